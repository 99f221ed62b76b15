// bfloat16 on the CPU: conversions (round to nearest even, NaN, infinities, saturation into
// int64), fill, strided copies, arange, random draws, and matrix products against a float64
// reference within bfloat16's precision.
#include <doctest/doctest.h>

#include <omp.h>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/avx512.h"
#include "backends/cpu/matmul.h"
#include "core/backend.h"
#include "core/tensor.h"

namespace {

using namespace tinyformer;

float as_float(bfloat16 v) {
  return static_cast<float>(v);
}

// The float32 values of a tensor converted to bfloat16 by the CPU backend's copy.
std::vector<float> through_bf16(const std::vector<float>& values) {
  Tensor t = from<float>(values, {static_cast<std::int64_t>(values.size())});
  Tensor b = t.to(kBFloat16);
  REQUIRE(b.dtype() == kBFloat16);
  return b.to(kFloat32).to_vector<float>();
}

}  // namespace

TEST_CASE("bfloat16: values with 8 significant bits survive the round trip") {
  const std::vector<float> exact = {0.0f,
                                    -0.0f,
                                    1.0f,
                                    -2.5f,
                                    0.15625f,
                                    65280.0f,
                                    std::ldexp(1.0f, -126),
                                    std::ldexp(1.0f, -133),  // subnormal
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity()};
  const auto back = through_bf16(exact);
  for (std::size_t i = 0; i < exact.size(); ++i) {
    CAPTURE(exact[i]);
    CHECK(std::bit_cast<std::uint32_t>(back[i]) == std::bit_cast<std::uint32_t>(exact[i]));
  }
  // to_vector<bfloat16>, from<bfloat16> and item<bfloat16> see the same bits.
  Tensor b = from<bfloat16>({bfloat16(1.5f), bfloat16(-3.0f)}, {2});
  CHECK(b.dtype() == kBFloat16);
  const auto v = b.to_vector<bfloat16>();
  CHECK(v[0].bits == 0x3fc0);
  CHECK(v[1].bits == 0xc040);
  CHECK(as_float(b.to(kFloat64).to(kBFloat16).to_vector<bfloat16>()[1]) == -3.0f);
  CHECK(as_float(b.select(0, 0).item<bfloat16>()) == 1.5f);
}

TEST_CASE("bfloat16: rounding to nearest, ties to even") {
  // bfloat16 keeps 7 fraction bits: near 1 its step is 2^-7.
  const float step = std::ldexp(1.0f, -7), half = std::ldexp(1.0f, -8);
  const std::vector<float> in = {
      1.0f + half,                                       // tie, 1 is even: down
      1.0f + step + half,                                // tie, 1 + step is odd: up to 1 + 2 step
      1.0f + half + std::ldexp(1.0f, -20),               // just above the tie: up
      1.0f + half - std::ldexp(1.0f, -20),               // just below: down
      -(1.0f + step + half),                             // negative tie: away to the even one
      std::numeric_limits<float>::max(),                 // above the largest bfloat16: infinity
      std::bit_cast<float>(std::uint32_t{0x7f7f7fffu}),  // just below the tie: the largest one
  };
  const auto out = through_bf16(in);
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == 1.0f + 2 * step);
  CHECK(out[2] == 1.0f + step);
  CHECK(out[3] == 1.0f);
  CHECK(out[4] == -(1.0f + 2 * step));
  CHECK(std::isinf(out[5]));
  CHECK(std::bit_cast<std::uint32_t>(out[6]) == 0x7f7f0000u);
  // The host type rounds the same way as the kernel.
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(as_float(bfloat16(in[i])) == out[i]);
  // float64 converts through float32 (as PyTorch does): 1 + 2^-8 + 2^-30 first becomes the
  // float32 tie 1 + 2^-8, which then rounds to even.
  Tensor d = from<double>({1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)}, {1});
  CHECK(d.to(kBFloat16).to(kFloat64).item<double>() == 1.0);
}

TEST_CASE("bfloat16: NaN stays NaN; conversions to int64 and bool") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto out = through_bf16({nan, -nan, std::bit_cast<float>(std::uint32_t{0x7f800001u})});
  for (float v : out) CHECK(std::isnan(v));  // a signalling NaN must not become infinity
  Tensor b = from<float>({nan, 1e30f, -1e30f, -2.75f, 2.75f, 0.0f}, {6}).to(kBFloat16);
  const auto ints = raw::to_dtype(b, kInt64).to_vector<std::int64_t>();
  CHECK(ints == std::vector<std::int64_t>{0, std::numeric_limits<std::int64_t>::max(),
                                          std::numeric_limits<std::int64_t>::min(), -2, 2, 0});
  const auto bools = raw::to_dtype(b, kBool).to_vector<bool>();
  CHECK(bools == std::vector<bool>{true, true, true, true, true, false});
  // int64 and bool into bfloat16.
  Tensor i = from<std::int64_t>({3, -257, 1 << 20}, {3});
  const auto from_int = raw::to_dtype(i, kBFloat16).to_vector<float>();
  CHECK(from_int == std::vector<float>{3.0f, -256.0f, 1048576.0f});  // 257 ties to even 256
  CHECK(raw::to_dtype(from<bool>({true, false}, {2}), kBFloat16).to_vector<float>() ==
        std::vector<float>{1.0f, 0.0f});
}

TEST_CASE("bfloat16: fill, strided copies and arange") {
  Tensor t = full({3, 5}, 0.1, {.dtype = kBFloat16});
  for (float v : t.to_vector<float>()) CHECK(v == as_float(bfloat16(0.1f)));
  // A transposed and a sliced source, into a bfloat16 and out of one.
  std::vector<float> values(12 * 7);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (float& v : values) v = dist(gen);
  Tensor src = from<float>(values, {12, 7});
  Tensor transposed = src.transpose(0, 1);  // [7, 12], strides [1, 7]
  Tensor b = raw::contiguous(raw::to_dtype(transposed, kBFloat16));
  const auto got = b.to_vector<float>();
  for (std::int64_t r = 0; r < 7; ++r) {
    for (std::int64_t c = 0; c < 12; ++c) {
      CHECK(got[static_cast<std::size_t>(r * 12 + c)] ==
            as_float(bfloat16(values[static_cast<std::size_t>(c * 7 + r)])));
    }
  }
  Tensor dst = zeros({7, 12}, {.dtype = kFloat64}).transpose(0, 1);  // [12, 7] strided
  raw::copy(b.transpose(0, 1), dst);
  const auto back = raw::contiguous(dst).to_vector<double>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    CHECK(back[i] == static_cast<double>(as_float(bfloat16(values[i]))));
  }
  Tensor r = arange(0.0, 300.0, 1.0, {.dtype = kBFloat16});
  const auto ar = r.to_vector<float>();
  CHECK(ar[255] == 255.0f);
  CHECK(ar[257] == 256.0f);  // 257 needs 9 bits: ties to even
  CHECK(ar[259] == 260.0f);
}

TEST_CASE("bfloat16: random draws are the float32 draws rounded") {
  Backend& cpu = backend(Device::cpu());
  const Shape shape = {1001};
  for (RandomKind kind : {RandomKind::normal, RandomKind::uniform, RandomKind::bernoulli,
                          RandomKind::scaled_bernoulli}) {
    CAPTURE(static_cast<int>(kind));
    const bool coin = kind == RandomKind::bernoulli || kind == RandomKind::scaled_bernoulli;
    const double a = coin ? 0.3 : (kind == RandomKind::uniform ? -2 : 0.5);
    // scaled_bernoulli's value: 1 / 0.7, which float32 and bfloat16 round differently.
    const double b =
        kind == RandomKind::uniform ? 3.0 : (kind == RandomKind::scaled_bernoulli ? 1 / 0.7 : 2.0);
    Tensor f = empty(shape), h = empty(shape, {.dtype = kBFloat16});
    cpu.random(f, kind, 77, 5, a, b);
    cpu.random(h, kind, 77, 5, a, b);
    const auto fv = f.to_vector<float>();
    const auto hv = h.to_vector<bfloat16>();
    for (std::size_t i = 0; i < fv.size(); ++i) {
      const float expected = as_float(bfloat16(fv[i]));
      if (kind == RandomKind::uniform && expected >= 3.0f) {
        CHECK(as_float(hv[i]) == 2.984375f);  // the largest bfloat16 below 3
      } else {
        CHECK(as_float(hv[i]) == expected);
      }
    }
  }
  // uniform [0, 1): values that round up to 1 are replaced by the largest bfloat16 below 1.
  Tensor u = empty({4096}, {.dtype = kBFloat16});
  cpu.random(u, RandomKind::uniform, 1, 0, 0.0, 1.0);
  bool below_one = true, saw_top = false;
  for (bfloat16 v : u.to_vector<bfloat16>()) {
    below_one = below_one && as_float(v) < 1.0f && as_float(v) >= 0.0f;
    saw_top = saw_top || as_float(v) == 1.0f - std::ldexp(1.0f, -8);
  }
  CHECK(below_one);
  CHECK(saw_top);  // 1 in 512 of the float32 draws round up: ~8 expected here
}

TEST_CASE("bfloat16: matmul against a float64 reference") {
  Backend& cpu = backend(Device::cpu());
  const std::string path = cpu::bf16_matmul_native()
                               ? "on oneDNN's bfloat16 kernels"
                               : "on the float32 path (oneDNN has no bfloat16 kernel here)";
  MESSAGE("bfloat16 products run " << path);
  struct Case {
    std::int64_t batch, m, k, n;
    bool transpose_b, broadcast_a;
  };
  for (const Case c : {Case{1, 1, 1, 1, false, false}, Case{3, 33, 17, 65, false, false},
                       Case{2, 70, 129, 31, true, false}, Case{4, 16, 64, 9, false, true}}) {
    CAPTURE(c.m);
    CAPTURE(c.k);
    CAPTURE(c.n);
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const std::int64_t a_batch = c.broadcast_a ? 1 : c.batch;
    std::vector<float> av(static_cast<std::size_t>(a_batch * c.m * c.k)),
        bv(static_cast<std::size_t>(c.batch * c.k * c.n));
    for (float& v : av) v = as_float(bfloat16(dist(gen)));  // exactly representable
    for (float& v : bv) v = as_float(bfloat16(dist(gen)));
    Tensor a = raw::to_dtype(from<float>(av, {a_batch, c.m, c.k}), kBFloat16);
    if (c.broadcast_a) a = raw::expand(a, {c.batch, c.m, c.k}, "test");
    // b stored as [batch, n, k] and viewed transposed when asked.
    Tensor b = c.transpose_b
                   ? raw::to_dtype(from<float>(bv, {c.batch, c.n, c.k}), kBFloat16).transpose(1, 2)
                   : raw::to_dtype(from<float>(bv, {c.batch, c.k, c.n}), kBFloat16);
    Tensor out = empty({c.batch, c.m, c.n}, {.dtype = kBFloat16});
    cpu.matmul(a, b, out);
    const auto got = out.to_vector<float>();
    for (std::int64_t i = 0; i < c.batch; ++i) {
      for (std::int64_t r = 0; r < c.m; ++r) {
        for (std::int64_t col = 0; col < c.n; ++col) {
          double ref = 0, mag = 0;
          for (std::int64_t j = 0; j < c.k; ++j) {
            const double x =
                av[static_cast<std::size_t>(((c.broadcast_a ? 0 : i) * c.m + r) * c.k + j)];
            const double y = c.transpose_b
                                 ? bv[static_cast<std::size_t>((i * c.n + col) * c.k + j)]
                                 : bv[static_cast<std::size_t>((i * c.k + j) * c.n + col)];
            ref += x * y;
            mag += std::abs(x * y);
          }
          // One rounding to bfloat16 (2^-9 relative) plus float32 accumulation.
          const double got_v = got[static_cast<std::size_t>((i * c.m + r) * c.n + col)];
          CHECK(std::abs(got_v - ref) <= std::ldexp(1.0, -8) * std::abs(ref) + 1e-5 * mag);
        }
      }
    }
  }
  CHECK_THROWS_AS(cpu.matmul(empty({1, 2, 3}, {.dtype = kBFloat16}), empty({1, 3, 2}),
                             empty({1, 2, 2}, {.dtype = kBFloat16})),
                  Error);
}

TEST_CASE("bfloat16 operands, float32 out: attention's scores with two batch dims") {
  // Q K^T under autocast: heads [B, H, n, d] viewed in [B, n, H, d] buffers, K^T read
  // column-major. From a head's [n, m] of 2^18 elements the backend runs one jit GEMM per
  // sequence, or the 4-D blocked kernel where oneDNN runs AMX (matmul4_on_dnnl); below, the 4-D
  // product everywhere. Against float64 sums of the same bfloat16 values, out written as heads.
  Backend& cpu = backend(Device::cpu());
  MESSAGE("bfloat16 products " << (cpu::bf16_matmul_amx() ? "on AMX tiles" : "without AMX"));
  const std::int64_t batch = 2, heads = 2, d = 64;
  for (const std::int64_t n : {100, 512}) {
    CAPTURE(n);
    std::mt19937 gen(static_cast<std::uint32_t>(n));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> qv(static_cast<std::size_t>(batch * n * heads * d)), kv(qv.size());
    for (float& v : qv) v = as_float(bfloat16(dist(gen)));  // exactly representable
    for (float& v : kv) v = as_float(bfloat16(dist(gen)));
    const Tensor q =
        raw::to_dtype(from<float>(qv, {batch, n, heads, d}), kBFloat16).transpose(1, 2);
    const Tensor k_t = raw::to_dtype(from<float>(kv, {batch, n, heads, d}), kBFloat16)
                           .permute({0, 2, 3, 1});  // [batch, heads, d, n], column-major
    const Tensor buffer = empty({batch, n, heads, n});
    cpu.matmul(q, k_t, buffer.transpose(1, 2));
    const std::vector<float> got = buffer.to_vector<float>();
    bool close = true;
    const auto at = [&](std::int64_t b, std::int64_t row, std::int64_t h, std::int64_t j) {
      return static_cast<std::size_t>(((b * n + row) * heads + h) * d + j);
    };
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t i = 0; i < n; ++i) {
          for (std::int64_t c = 0; c < n; ++c) {
            double ref = 0, mag = 0;
            for (std::int64_t j = 0; j < d; ++j) {
              const double x = qv[at(b, i, h, j)], y = kv[at(b, c, h, j)];
              ref += x * y;
              mag += std::abs(x * y);
            }
            // Exact products, float32 sums of 64 terms.
            const double v = got[static_cast<std::size_t>(((b * n + i) * heads + h) * n + c)];
            close = close && std::abs(v - ref) <= 64 * 0x1p-24 * mag;
          }
        }
      }
    }
    CHECK(close);
  }
}

TEST_CASE(
    "float32 matmul under MatmulPrecision::bf16: operands rounded where the CPU has the "
    "instructions") {
  Backend& cpu = backend(Device::cpu());
  const bool native = cpu::bf16_matmul_fast();
  MESSAGE("float32 products under bf16 precision are "
          << (native ? "bfloat16 products" : "exact (no bfloat16 kernel on this CPU)"));
  // Above the small-product size, with a transposed and a broadcast operand as well.
  const std::int64_t batch = 3, m = 70, k = 150, n = 40;
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> av(static_cast<std::size_t>(m * k)),
      bv(static_cast<std::size_t>(batch * n * k));
  for (float& v : av) v = dist(gen);  // not representable in bfloat16, as a rule
  for (float& v : bv) v = dist(gen);
  const Tensor a = raw::expand(from<float>(av, {1, m, k}), {batch, m, k}, "test");
  const Tensor b = from<float>(bv, {batch, n, k}).transpose(1, 2);  // [batch, k, n] column-major
  const auto run = [&](MatmulPrecision precision) {
    set_matmul_precision(precision);
    Tensor out = empty({batch, m, n});
    cpu.matmul(a, b, out);
    set_matmul_precision(MatmulPrecision::exact);
    return out.to_vector<float>();
  };
  const std::vector<float> exact = run(MatmulPrecision::exact);
  const std::vector<float> reduced = run(MatmulPrecision::bf16);
  double largest_change = 0;
  for (std::int64_t i = 0; i < batch; ++i) {
    for (std::int64_t r = 0; r < m; ++r) {
      for (std::int64_t col = 0; col < n; ++col) {
        double ref = 0, ref16 = 0, mag = 0;
        for (std::int64_t j = 0; j < k; ++j) {
          const float x = av[static_cast<std::size_t>(r * k + j)];
          const float y = bv[static_cast<std::size_t>((i * n + col) * k + j)];
          ref += double(x) * double(y);
          ref16 += double(as_float(bfloat16(x))) * double(as_float(bfloat16(y)));
          mag += std::abs(double(x) * double(y));
        }
        const auto idx = static_cast<std::size_t>((i * m + r) * n + col);
        CHECK(std::abs(exact[idx] - ref) <= 1e-5 * mag);
        // With kernels: the product of the rounded operands, accumulated in float32.
        CHECK(std::abs(reduced[idx] - (native ? ref16 : ref)) <= 1e-5 * mag);
        largest_change = std::max(largest_change, std::abs(double(reduced[idx]) - exact[idx]));
      }
    }
  }
  // Rounding 150-term sums' operands to 8 bits moves some results by far more than float32's
  // rounding; without kernels nothing moves.
  if (native) {
    CHECK(largest_change > 1e-3);
  } else {
    CHECK(largest_change == 0);
  }
}

TEST_CASE("bfloat16 operands, float32 out: weight gradients g^T x, on one thread and on the team") {
  // Mixed precision's weight gradients: a transposed bfloat16 a of one matrix with M <= 512, a
  // float32 out. Where the CPU has AVX512-BF16 and oneDNN does not run AMX, the library's own
  // kernel (matmul.cpp, matmul_tn): the sum over K in parts of about 4096 rows added in order
  // (K = 9000: 2 parts), columns and rows split between threads; elsewhere oneDNN (the tiles
  // where it runs AMX) or float32. Against float64 sums of the same
  // bfloat16 values, a's leading dimension past M, out rows of a wider matrix, and, on the own
  // kernel, the same bits on one thread as on the team.
  Backend& cpu = backend(Device::cpu());
  struct Case {
    std::int64_t m, k, n;
  };
  for (const Case c :
       {Case{256, 1024, 256}, Case{7, 9000, 64}, Case{100, 2001, 5}, Case{512, 700, 130}}) {
    CAPTURE(c.m);
    CAPTURE(c.k);
    CAPTURE(c.n);
    std::mt19937 gen(static_cast<unsigned>(c.m + c.k));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const std::int64_t lda = c.m + 3;
    std::vector<float> av(static_cast<std::size_t>(c.k * lda)),
        bv(static_cast<std::size_t>(c.k * c.n));
    for (float& v : av) v = as_float(bfloat16(dist(gen)));
    for (float& v : bv) v = as_float(bfloat16(dist(gen)));
    const Tensor a_store = raw::to_dtype(from<float>(av, {1, c.k, lda}), kBFloat16);
    const Tensor a = raw::as_strided(a_store, {1, c.m, c.k}, {c.k * lda, 1, lda}, 1);
    const Tensor b = raw::to_dtype(from<float>(bv, {1, c.k, c.n}), kBFloat16);
    const Tensor wide = empty({1, c.m, c.n + 4});
    cpu.fill(wide, 7.0);
    const Tensor out = raw::as_strided(wide, {1, c.m, c.n}, {c.m * (c.n + 4), c.n + 4, 1}, 2);
    cpu.matmul(a, b, out);
    const std::vector<float> got = wide.to_vector<float>();
    bool close = true, untouched = true;
    for (std::int64_t r = 0; r < c.m; ++r) {
      for (std::int64_t col = 0; col < c.n + 4; ++col) {
        const float v = got[static_cast<std::size_t>(r * (c.n + 4) + col)];
        if (col < 2 || col >= c.n + 2) {
          untouched = untouched && v == 7.0f;
          continue;
        }
        double ref = 0, mag = 0;
        for (std::int64_t j = 0; j < c.k; ++j) {
          const double x = av[static_cast<std::size_t>(j * lda + 1 + r)];
          const double y = bv[static_cast<std::size_t>(j * c.n + col - 2)];
          ref += x * y;
          mag += std::abs(x * y);
        }
        // Exact products, float32 sums: chains of at most 4096 steps on any path.
        close = close && std::abs(v - ref) <= 4096.0 * 0x1p-24 * mag;
      }
    }
    CHECK(close);
    CHECK(untouched);
    // oneDNN's own products need not give the same bits on another number of threads.
    if (!(cpu::avx512::bf16_available() && cpu::bf16_matmul_fast() && !cpu::bf16_matmul_amx())) {
      continue;
    }
    const Tensor alone = empty({1, c.m, c.n}), team = empty({1, c.m, c.n});
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    cpu.matmul(a, b, alone);
    omp_set_num_threads(before);
    cpu.matmul(a, b, team);
    CHECK(alone.to_vector<float>() == team.to_vector<float>());
  }
}
