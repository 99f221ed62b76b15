// The CPU backend's AVX-512 kernels (backends/cpu/avx512.h) against plain loops: the exponential
// bit for bit, softmax rows, the head-width product over odd sizes, strides, its row maxima and
// its prefetch, the product over the keys and the weight gradient's product (float32, and
// bfloat16 where the CPU has AVX512-BF16), layer norm rows. Where the CPU (or
// DNNL_MAX_CPU_ISA) rules AVX-512 out, the cases say so and check nothing else; the ctest case
// cpu_portable_attention runs attention's parity cases on the portable path.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/avx512.h"
#include "backends/cpu/softmax_row.h"
#include "core/bfloat16.h"
#include "core/math.h"

namespace {

using namespace tinyformer;
namespace avx512 = tinyformer::cpu::avx512;

TEST_CASE("avx512: oneDNN capped below AVX-512 turns the kernels off") {
  // Set by the ctest case cpu_portable_attention, which runs with DNNL_MAX_CPU_ISA=AVX2: its
  // parity cases then run the portable paths, not the kernels again.
  if (std::getenv("TINYFORMER_EXPECT_NO_AVX512") == nullptr) return;
  CHECK_FALSE(avx512::available());
}

bool skip() {
  if (avx512::available()) return false;
  MESSAGE("no AVX-512 on this CPU (or DNNL_MAX_CPU_ISA caps it): the kernels are not used");
  return true;
}

std::vector<float> random_floats(std::size_t count, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(count);
  for (float& x : v) x = normal(gen);
  return v;
}

// Whether this build contracts a * b + c into one fused multiply-add, as the kernel's intrinsics
// do (GCC from -O2 on; not at -O1, the sanitizer builds' level). 1 + 2^-11 + 2^-24, the exact
// product, rounds to 1 + 2^-11 on its own.
bool contracts() {
  volatile float a = 1.0f + 0x1p-12f, c = -1.0f;
  const float b = a;
  return a * b + c == std::fma(static_cast<float>(a), b, static_cast<float>(c));
}

// The distance of two floats of one sign in units in the last place.
std::uint32_t ulps(float x, float y) {
  const std::uint32_t a = std::bit_cast<std::uint32_t>(x), b = std::bit_cast<std::uint32_t>(y);
  return a > b ? a - b : b - a;
}

TEST_CASE("avx512: exp_nonpositive has math::exp_nonpositive's bits for every float <= 0") {
  if (skip()) return;
  // The same operations in the same order: the same bits where the scalar code is contracted
  // into the same fused multiply-adds, within one ulp where it is not.
  const std::uint32_t allowed = contracts() ? 0 : 1;
  CAPTURE(allowed);
  // Every bit pattern with the sign set: -0, every negative float down to -inf, and the NaNs.
  constexpr std::uint64_t kChunk = 1 << 16;
  std::vector<float> x(kChunk), y(kChunk);
  std::uint64_t mismatches = 0;
  for (std::uint64_t base = 0x80000000u; base <= 0xFFFFFFFFu; base += kChunk) {
    for (std::uint64_t i = 0; i < kChunk; ++i) {
      x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(base + i));
    }
    avx512::exp_nonpositive(x.data(), y.data(), static_cast<std::int64_t>(kChunk));
    for (std::uint64_t i = 0; i < kChunk; ++i) {
      const float want = math::exp_nonpositive(x[i]);
      const bool same = (std::isnan(want) && std::isnan(y[i])) ||
                        (!std::isnan(want) && !std::isnan(y[i]) && ulps(want, y[i]) <= allowed);
      if (!same && mismatches++ < 5) {
        MESSAGE("x = " << x[i] << ": " << y[i] << " against " << want);
      }
    }
  }
  CHECK(mismatches == 0);
  // A length that is not a multiple of 16 writes nothing past its end.
  std::vector<float> tail(40, 7.0f);
  avx512::exp_nonpositive(x.data(), tail.data(), 21);
  for (std::size_t i = 21; i < tail.size(); ++i) CHECK(tail[i] == 7.0f);
}

TEST_CASE("avx512: softmax rows against the portable loop") {
  if (skip()) return;
  for (std::int64_t n : {1, 5, 16, 17, 31, 32, 33, 100, 1000}) {
    CAPTURE(n);
    std::vector<float> x =
        random_floats(static_cast<std::size_t>(n), static_cast<std::uint32_t>(n), 4.0f);
    if (n > 3) x[2] = -std::numeric_limits<float>::infinity();  // a masked key: exactly 0
    std::vector<float> y(x.size() + 8, 5.0f), want(x.size());
    float max = -std::numeric_limits<float>::infinity();
    for (float v : x) max = std::max(max, v);
    CHECK(avx512::softmax_row(x.data(), y.data(), n) == max);
    // The portable loop: the same exponentials; sums in another order.
    double sum = 0;
    for (std::int64_t i = 0; i < n; ++i) sum += math::exp_nonpositive(x[i] - max);
    for (std::int64_t i = 0; i < n; ++i) {
      CHECK(y[i] == doctest::Approx(math::exp_nonpositive(x[i] - max) / sum).epsilon(1e-6));
    }
    if (n > 3) CHECK(y[2] == 0.0f);
    for (std::size_t i = x.size(); i < y.size(); ++i) CHECK(y[i] == 5.0f);
    // With the maximum given, the same bits; in place, too.
    std::vector<float> again(x);
    avx512::softmax_row(again.data(), again.data(), n, &max);
    for (std::int64_t i = 0; i < n; ++i)
      CHECK(std::bit_cast<std::uint32_t>(again[i]) == std::bit_cast<std::uint32_t>(y[i]));
  }
  // A row of -inf only: NaN throughout, as the portable loop gives.
  std::vector<float> all_masked(20, -std::numeric_limits<float>::infinity()), out(20);
  avx512::softmax_row(all_masked.data(), out.data(), 20);
  for (float v : out) CHECK(std::isnan(v));
}

TEST_CASE("avx512: softmax rows rounded to bfloat16: softmax_row's bits, rounded as bfloat16") {
  if (skip()) return;
  for (std::int64_t n : {1, 5, 16, 17, 31, 33, 100, 1000, 4096}) {
    CAPTURE(n);
    std::vector<float> x =
        random_floats(static_cast<std::size_t>(n), static_cast<std::uint32_t>(n) + 7, 6.0f);
    if (n > 3) x[2] = -std::numeric_limits<float>::infinity();  // a masked key: exactly 0
    std::vector<float> want(x.size()), scratch(x.size());
    const float max = avx512::softmax_row(x.data(), want.data(), n);
    std::vector<std::uint16_t> y(x.size() + 8, 0x1234);
    CHECK(avx512::softmax_row_bf16(x.data(), scratch.data(), y.data(), n) == max);
    for (std::int64_t i = 0; i < n; ++i) {
      CAPTURE(i);
      CHECK(y[static_cast<std::size_t>(i)] == bfloat16::round(want[static_cast<std::size_t>(i)]));
    }
    for (std::size_t i = x.size(); i < y.size(); ++i) CHECK(y[i] == 0x1234);  // past the row
  }
  // A row of -inf only: NaN throughout, quiet NaNs of bfloat16.
  std::vector<float> scratch(20);
  std::vector<std::uint16_t> y(20);
  std::vector<float> all_masked(20, -std::numeric_limits<float>::infinity());
  avx512::softmax_row_bf16(all_masked.data(), scratch.data(), y.data(), 20);
  for (std::uint16_t bits : y) {
    CHECK((bits & 0x7f80) == 0x7f80);
    CHECK((bits & 0x007f) != 0);
    CHECK((bits & 0x0040) != 0);
  }
  // Two equal scores: 0.5 each, exact.
  for (const float v : {0.0f, 3.0f}) {
    const std::vector<float> pair = {v, v};
    avx512::softmax_row_bf16(pair.data(), scratch.data(), y.data(), 2);
    CHECK(y[0] == bfloat16::round(0.5f));
    CHECK(y[1] == bfloat16::round(0.5f));
  }
}

TEST_CASE("avx512: softmax's backward from bfloat16 probabilities into bfloat16") {
  if (skip()) return;
  for (std::int64_t n : {1, 7, 16, 63, 64, 65, 100, 1000, 4096}) {
    CAPTURE(n);
    const std::size_t count = static_cast<std::size_t>(n);
    std::vector<float> scores = random_floats(count, static_cast<std::uint32_t>(n) + 11, 3.0f);
    std::vector<float> p(count), scratch(count);
    avx512::softmax_row(scores.data(), p.data(), n);
    std::vector<std::uint16_t> y(count);
    for (std::size_t i = 0; i < count; ++i) y[i] = bfloat16::round(p[i]);
    const std::vector<float> g = random_floats(count, static_cast<std::uint32_t>(n) + 12);
    std::vector<std::uint16_t> out(count + 8, 0x1234);
    avx512::softmax_grad_row_bf16(y.data(), g.data(), out.data(), n);
    const auto widen = [](std::uint16_t bits) {
      return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
    };
    double dot = 0, magnitude = 0;
    for (std::size_t i = 0; i < count; ++i) {
      dot += double(widen(y[i])) * g[i];
      magnitude += std::abs(double(widen(y[i])) * g[i]);
    }
    for (std::size_t i = 0; i < count; ++i) {
      CAPTURE(i);
      const double yi = widen(y[i]), want = yi * (g[i] - dot);
      // bfloat16's rounding of the result, and float32's of the dot product (its sum in
      // another order than the loop's), carried through y.
      const double tolerance =
          std::abs(want) * std::ldexp(1.001, -8) + yi * magnitude * double(n) * 6e-8 + 1e-30;
      CHECK(std::abs(double(widen(out[i])) - want) <= tolerance);
    }
    for (std::size_t i = count; i < out.size(); ++i) CHECK(out[i] == 0x1234);  // past the row
    // With a float32 out: the values that the bfloat16 out rounds.
    std::vector<float> out32(count + 8, 5.0f);
    avx512::softmax_grad_row_bf16(y.data(), g.data(), out32.data(), n);
    for (std::size_t i = 0; i < count; ++i) CHECK(bfloat16::round(out32[i]) == out[i]);
    for (std::size_t i = count; i < out32.size(); ++i) CHECK(out32[i] == 5.0f);
  }
}

TEST_CASE("avx512: softmax's scaled backward over a row against a float64 loop") {
  if (skip()) return;
  // Rows past a vector of 16 and a step of 64 (masked tails), written in place or elsewhere.
  std::uint32_t seed = 50;
  for (std::int64_t n : {0, 1, 15, 16, 17, 63, 64, 65, 200, 4096}) {
    for (const bool in_place : {false, true}) {
      CAPTURE(n);
      CAPTURE(in_place);
      std::vector<float> p = random_floats(static_cast<std::size_t>(n), ++seed);
      for (float& v : p) v = std::fabs(v) / static_cast<float>(n);
      std::vector<float> g = random_floats(static_cast<std::size_t>(n + 1), ++seed);
      const float sentinel = 42.0f;
      g[static_cast<std::size_t>(n)] = sentinel;
      std::vector<float> out(static_cast<std::size_t>(n + 1), sentinel);
      const std::vector<float> g0 = g;
      float* y = in_place ? g.data() : out.data();
      avx512::softmax_grad_row(p.data(), g.data(), y, n, 0.125f);
      double dot = 0, magnitude = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        dot += static_cast<double>(p[j]) * g0[j];
        magnitude += std::fabs(static_cast<double>(p[j]) * g0[j]);
      }
      bool close = true;
      for (std::int64_t j = 0; j < n; ++j) {
        const double want = 0.125 * p[j] * (g0[j] - dot);
        const double tol = 1e-6 * 0.125 * p[j] * (std::fabs(g0[j]) + magnitude) + 1e-30;
        close = close && std::fabs(y[j] - want) <= tol;
      }
      CHECK(close);
      CHECK(y[n] == sentinel);
    }
  }
}

TEST_CASE("avx512: layer norm rows, forward and backward, against float64 loops") {
  if (skip()) return;
  // Rows past a vector of 16 and a step of 64 (masked tails), with and without a residual,
  // weight and bias; a sentinel past each row's end must stay.
  std::uint32_t seed = 70;
  const float sentinel = 42.0f, eps = 1e-5f;
  for (std::int64_t n : {1, 15, 16, 17, 63, 64, 65, 256, 300}) {
    for (const bool residual : {false, true}) {
      // Weight and bias each present or not (affine: the weight; shifted: the bias).
      for (const int parts : {0, 1, 2, 3}) {
        const bool affine = (parts & 1) != 0, shifted = (parts & 2) != 0;
        CAPTURE(n);
        CAPTURE(residual);
        CAPTURE(affine);
        CAPTURE(shifted);
        const auto row = [&](float offset) {
          std::vector<float> v = random_floats(static_cast<std::size_t>(n + 1), ++seed);
          for (float& e : v) e += offset;  // a mean far from 0: the two-pass variance holds
          v[static_cast<std::size_t>(n)] = sentinel;
          return v;
        };
        const std::vector<float> x = row(3.0f), r = row(-1.0f), w = row(0.5f), b = row(0.0f),
                                 g = row(0.0f);
        std::vector<float> h(static_cast<std::size_t>(n + 1), sentinel), y = h;
        float mean = 0, rstd = 0;
        avx512::layer_norm_row(x.data(), residual ? r.data() : nullptr,
                               residual ? h.data() : nullptr, affine ? w.data() : nullptr,
                               shifted ? b.data() : nullptr, eps, y.data(), &mean, &rstd, n);
        // float64: the input, its mean and variance, the output.
        std::vector<double> in(static_cast<std::size_t>(n));
        double sum = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          in[j] = residual ? static_cast<double>(x[j] + r[j]) : x[j];  // h rounds to float
          sum += in[j];
        }
        const double want_mean = sum / static_cast<double>(n);
        double sq = 0;
        for (double v : in) sq += (v - want_mean) * (v - want_mean);
        const double want_rstd = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
        CHECK(std::fabs(mean - want_mean) <= 1e-6 * (std::fabs(want_mean) + 1));
        CHECK(std::fabs(rstd - want_rstd) <= 1e-5 * want_rstd);
        bool close = true, h_exact = true;
        for (std::int64_t j = 0; j < n; ++j) {
          const double xhat = (in[j] - want_mean) * want_rstd;
          const double want = (affine ? xhat * w[j] : xhat) + (shifted ? b[j] : 0.0);
          close = close && std::fabs(y[j] - want) <= 1e-5 * (std::fabs(want) + 1);
          if (residual) h_exact = h_exact && h[j] == x[j] + r[j];
        }
        CHECK(close);
        CHECK(h_exact);
        CHECK(y[static_cast<std::size_t>(n)] == sentinel);
        CHECK(h[static_cast<std::size_t>(n)] == sentinel);

        // The backward from that row's input, mean and rstd, adding to column sums that start
        // at 1 (a block's running sums).
        const std::vector<float>& src = residual ? h : x;
        std::vector<float> dx(static_cast<std::size_t>(n + 1), sentinel);
        std::vector<float> dw(static_cast<std::size_t>(n + 1), 1.0f), db = dw;
        dw[static_cast<std::size_t>(n)] = db[static_cast<std::size_t>(n)] = sentinel;
        avx512::layer_norm_backward_row(g.data(), src.data(), affine ? w.data() : nullptr, mean,
                                        rstd, dx.data(), dw.data(), db.data(), n);
        double sum_gy = 0, sum_gy_xhat = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          const double xhat = (static_cast<double>(src[j]) - mean) * rstd;
          const double gy = affine ? static_cast<double>(g[j]) * w[j] : g[j];
          sum_gy += gy;
          sum_gy_xhat += gy * xhat;
        }
        bool dx_close = true, dw_close = true, db_close = true;
        for (std::int64_t j = 0; j < n; ++j) {
          const double xhat = (static_cast<double>(src[j]) - mean) * rstd;
          const double gy = affine ? static_cast<double>(g[j]) * w[j] : g[j];
          const double want = rstd * (gy - sum_gy / static_cast<double>(n) -
                                      xhat * sum_gy_xhat / static_cast<double>(n));
          dx_close = dx_close && std::fabs(dx[j] - want) <= 1e-5 * rstd * (std::fabs(gy) + 1);
          dw_close = dw_close &&
                     std::fabs(dw[j] - (1.0 + g[j] * xhat)) <= 1e-5 * (1 + std::fabs(g[j] * xhat));
          db_close = db_close && dw_close && db[j] == 1.0f + g[j];
        }
        CHECK(dx_close);
        CHECK(dw_close);
        CHECK(db_close);
        CHECK(dx[static_cast<std::size_t>(n)] == sentinel);
        CHECK(dw[static_cast<std::size_t>(n)] == sentinel);
        CHECK(db[static_cast<std::size_t>(n)] == sentinel);

        // Without dx, the column sums alone; without them, dx alone (the same bits).
        std::vector<float> dx2(static_cast<std::size_t>(n + 1), sentinel);
        avx512::layer_norm_backward_row(g.data(), src.data(), affine ? w.data() : nullptr, mean,
                                        rstd, dx2.data(), nullptr, nullptr, n);
        CHECK(dx2 == dx);
        std::vector<float> db2(static_cast<std::size_t>(n + 1), 1.0f);
        db2[static_cast<std::size_t>(n)] = sentinel;
        avx512::layer_norm_backward_row(g.data(), src.data(), affine ? w.data() : nullptr, mean,
                                        rstd, nullptr, nullptr, db2.data(), n);
        CHECK(db2 == db);
      }
    }
  }
}

TEST_CASE("avx512: the head-width product C = alpha A B^T against a float64 loop") {
  if (skip()) return;
  std::uint32_t seed = 1;
  for (std::int64_t m : {1, 5, 6, 7, 13, 24, 25, 53}) {
    for (std::int64_t n : {1, 15, 63, 64, 65, 130}) {
      for (std::int64_t k : {0, 1, 9, 64}) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        // Strided rows: lda, ldb and ldc wider than the rows.
        const std::int64_t lda = k + 3, ldb = k + 5, ldc = n + 7;
        const std::vector<float> a = random_floats(static_cast<std::size_t>(m * lda), ++seed);
        const std::vector<float> b = random_floats(static_cast<std::size_t>(n * ldb), ++seed);
        std::vector<float> packed(static_cast<std::size_t>(avx512::packed_nt_size(n, k)));
        avx512::pack_nt(b.data(), ldb, n, k, packed.data());
        const float sentinel = 42.0f;
        std::vector<float> c(static_cast<std::size_t>(m * ldc), sentinel);
        std::vector<float> row_max(static_cast<std::size_t>(m), sentinel);
        const float alpha = 0.375f;
        avx512::gemm_nt(m, n, k, alpha, a.data(), lda, packed.data(), c.data(), ldc,
                        row_max.data());
        double worst = 0;
        for (std::int64_t i = 0; i < m; ++i) {
          float max = -std::numeric_limits<float>::infinity();
          for (std::int64_t j = 0; j < n; ++j) {
            double want = 0, size = 0;
            for (std::int64_t kk = 0; kk < k; ++kk) {
              want += double(a[i * lda + kk]) * b[j * ldb + kk];
              size += std::abs(double(a[i * lda + kk]) * b[j * ldb + kk]);
            }
            const float got = c[i * ldc + j];
            worst = std::max(worst, std::abs(got - alpha * want) / (alpha * size + 1e-30));
            max = std::max(max, got);
          }
          CHECK(row_max[i] == max);
          for (std::int64_t j = n; j < ldc; ++j) CHECK(c[i * ldc + j] == sentinel);
        }
        CHECK(worst < 1e-6);
        // The prefetch changes nothing; neither does asking for no row maxima.
        std::vector<float> again(c.size(), sentinel);
        avx512::gemm_nt(m, n, k, alpha, a.data(), lda, packed.data(), again.data(), ldc, nullptr,
                        b.data(), static_cast<std::int64_t>(b.size() * sizeof(float)));
        CHECK(again == c);
      }
    }
  }
}

TEST_CASE("avx512: the product over the keys C = A B: one fused multiply-add chain per element") {
  if (skip()) return;
  std::uint32_t seed = 50;
  // m past a register tile of 6, n past a panel of 64 (masked columns), k past a chunk of 128
  // (the chain goes on from the first chunk's stored sums), k = 0 (zeros).
  for (std::int64_t m : {1, 5, 6, 7, 24, 25}) {
    for (std::int64_t n : {1, 9, 16, 63, 64, 65, 130}) {
      for (std::int64_t k : {0, 1, 127, 128, 129, 300}) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        const std::int64_t lda = k + 3, ldb = n + 5, ldc = n + 7;
        const std::vector<float> a = random_floats(static_cast<std::size_t>(m * lda), ++seed);
        const std::vector<float> b = random_floats(static_cast<std::size_t>(k * ldb), ++seed);
        std::vector<float> packed(static_cast<std::size_t>(avx512::packed_nn_size(k, n)));
        avx512::pack_nn(b.data(), ldb, k, n, packed.data());
        // C starts as garbage (the result may not depend on it) with sentinels past n.
        const float sentinel = 42.0f;
        std::vector<float> c = random_floats(static_cast<std::size_t>(m * ldc), ++seed);
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = n; j < ldc; ++j) c[i * ldc + j] = sentinel;
        }
        avx512::gemm_nn(m, n, k, a.data(), lda, packed.data(), c.data(), ldc);
        bool same = true;
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            float want = 0.0f;
            for (std::int64_t kk = 0; kk < k; ++kk) {
              want = std::fma(a[i * lda + kk], b[kk * ldb + j], want);
            }
            same = same && std::bit_cast<std::uint32_t>(c[i * ldc + j]) ==
                               std::bit_cast<std::uint32_t>(want);
          }
          for (std::int64_t j = n; j < ldc; ++j) CHECK(c[i * ldc + j] == sentinel);
        }
        CHECK(same);
      }
    }
  }
}

// gemm_tn on random operands with row strides past their widths, C starting as random values
// (with accumulate, part of the sum; else overwritten) and sentinels past n: C must hold, bit for
// bit, the chains of 128 fused multiply-adds added in order (to C's value with accumulate).
void check_gemm_tn(std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate,
                   std::uint32_t seed) {
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(k);
  CAPTURE(accumulate);
  const std::int64_t lda = m + 3, ldb = n + 5, ldc = n + 7;
  const std::vector<float> a = random_floats(static_cast<std::size_t>(k * lda), seed);
  const std::vector<float> b = random_floats(static_cast<std::size_t>(k * ldb), seed + 1);
  std::vector<float> scratch(static_cast<std::size_t>(avx512::gemm_tn_scratch_size()));
  const float sentinel = 42.0f;
  std::vector<float> c = random_floats(static_cast<std::size_t>(m * ldc), seed + 2);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = n; j < ldc; ++j) c[i * ldc + j] = sentinel;
  }
  const std::vector<float> before = c;
  avx512::gemm_tn(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, scratch.data(), accumulate);
  bool same = true;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      float want = accumulate ? before[i * ldc + j] : 0.0f;
      for (std::int64_t k0 = 0; k0 < k; k0 += 128) {
        float chunk = 0.0f;
        for (std::int64_t kk = k0; kk < k && kk < k0 + 128; ++kk) {
          chunk = std::fma(a[kk * lda + i], b[kk * ldb + j], chunk);
        }
        want = k0 == 0 && !accumulate ? chunk : want + chunk;
      }
      same = same &&
             std::bit_cast<std::uint32_t>(c[i * ldc + j]) == std::bit_cast<std::uint32_t>(want);
    }
    for (std::int64_t j = n; j < ldc; ++j) CHECK(c[i * ldc + j] == sentinel);
  }
  CHECK(same);
}

TEST_CASE("avx512: the weight gradient's product C = A^T B: chains of 128, added in order") {
  if (skip()) return;
  std::uint32_t seed = 70;
  // m past a register tile of 6 (a short last tile repeats its last row), n past a panel of 64
  // (masked columns), k past a chunk of 128 (each chunk's sum added to the stored one), k = 0;
  // C overwritten, or added to. A small enough to stay in L2 runs panel by panel, a larger one
  // chunk by chunk: both orders, the same bits.
  for (const bool accumulate : {false, true}) {
    for (std::int64_t m : {1, 5, 6, 7, 13, 64}) {
      for (std::int64_t n : {1, 9, 63, 64, 65, 130}) {
        for (std::int64_t k : {0, 1, 127, 128, 129, 300}) {
          check_gemm_tn(m, n, k, accumulate, seed += 3);
        }
      }
    }
    // A of 37 x 1000 and 64 x 600 elements: chunk by chunk.
    check_gemm_tn(37, 130, 1000, accumulate, seed += 3);
    check_gemm_tn(64, 65, 600, accumulate, seed += 3);
  }
}

TEST_CASE("avx512: the bfloat16 weight gradient's product C = A^T B against float64 sums") {
  if (skip()) return;
  if (!avx512::bf16_available()) {
    MESSAGE("no AVX512-BF16 on this CPU: the bfloat16 kernel is not used");
    return;
  }
  std::uint32_t seed = 90;
  // As the float32 kernel's case, and odd k (the last pair's second row reads as zero). The
  // products of bfloat16 values are exact in float32, so each element may differ from the float64
  // sum only by the float32 roundings of its sums: at most 128 per chunk plus one per chunk,
  // each within 2^-24 of the sum of magnitudes.
  for (std::int64_t m : {1, 5, 6, 7, 13, 37}) {
    for (std::int64_t n : {1, 9, 63, 64, 65, 130}) {
      for (std::int64_t k : {0, 1, 2, 127, 128, 129, 300}) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        const std::int64_t lda = m + 3, ldb = n + 5, ldc = n + 7;
        // bfloat16 bits: the top half of random floats.
        const auto bits = [](const std::vector<float>& v) {
          std::vector<std::uint16_t> out(v.size());
          for (std::size_t i = 0; i < v.size(); ++i) {
            out[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v[i]) >> 16);
          }
          return out;
        };
        const auto value = [](std::uint16_t h) {
          return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16));
        };
        const std::vector<std::uint16_t> a =
            bits(random_floats(static_cast<std::size_t>(k * lda), ++seed));
        const std::vector<std::uint16_t> b =
            bits(random_floats(static_cast<std::size_t>(k * ldb), ++seed));
        std::vector<std::uint32_t> scratch(
            static_cast<std::size_t>(avx512::gemm_tn_bf16_scratch_size(m)));
        const float sentinel = 42.0f;
        std::vector<float> c = random_floats(static_cast<std::size_t>(m * ldc), ++seed);
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = n; j < ldc; ++j) c[i * ldc + j] = sentinel;
        }
        avx512::gemm_tn_bf16(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, scratch.data());
        const double steps = 128.0 + static_cast<double>(k) / 128.0 + 2.0;
        bool close = true;
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double want = 0.0, magnitude = 0.0;
            for (std::int64_t kk = 0; kk < k; ++kk) {
              const double t = value(a[kk * lda + i]) * value(b[kk * ldb + j]);
              want += t;
              magnitude += std::fabs(t);
            }
            const double got = c[i * ldc + j];
            if (!(std::fabs(got - want) <= steps * 0x1p-24 * magnitude)) {
              close = false;
              MESSAGE("C[" << i << ", " << j << "] = " << got << ", want " << want);
            }
          }
          for (std::int64_t j = n; j < ldc; ++j) CHECK(c[i * ldc + j] == sentinel);
        }
        CHECK(close);
      }
    }
  }
}

TEST_CASE("avx512: the product's row maxima leave NaNs out, as the portable row_max does") {
  if (skip()) return;
  const std::int64_t m = 6, n = 64, k = 4;
  std::vector<float> a = random_floats(static_cast<std::size_t>(m * k), 3);
  const std::vector<float> b = random_floats(static_cast<std::size_t>(n * k), 4);
  a[0] = std::numeric_limits<float>::quiet_NaN();  // row 0 is NaN throughout
  std::vector<float> packed(static_cast<std::size_t>(avx512::packed_nt_size(n, k)));
  avx512::pack_nt(b.data(), k, n, k, packed.data());
  std::vector<float> c(static_cast<std::size_t>(m * n)), row_max(static_cast<std::size_t>(m));
  avx512::gemm_nt(m, n, k, 1.0f, a.data(), k, packed.data(), c.data(), n, row_max.data());
  for (std::int64_t i = 0; i < m; ++i) CHECK(row_max[i] == cpu::row_max(c.data() + i * n, n));
  CHECK(row_max[0] == -std::numeric_limits<float>::infinity());
}

}  // namespace

// The portable row maximum (every CPU, and the float64 rows): NaNs left out, and a row of only
// -inf and NaN has maximum -inf, whichever start value the compiler's OpenMP max reduction uses.
TEST_CASE_TEMPLATE("row_max: NaNs left out, -inf for an empty row or one of -inf and NaN", T, float,
                   double) {
  constexpr T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  constexpr T lowest = std::numeric_limits<T>::lowest();
  for (const std::int64_t n : {0, 1, 7, 16, 33, 100}) {
    CAPTURE(n);
    const auto row_max_of = [n](T fill, std::int64_t at, T value) {
      std::vector<T> x(static_cast<std::size_t>(n), fill);
      if (at < n) x[static_cast<std::size_t>(at)] = value;
      return cpu::row_max(x.data(), n);
    };
    CHECK(row_max_of(nan, n, 0) == -inf);
    CHECK(row_max_of(-inf, n, 0) == -inf);
    CHECK(row_max_of(nan, n / 2, -inf) == -inf);
    if (n == 0) continue;
    CHECK(row_max_of(nan, n / 2, lowest) == lowest);
    CHECK(row_max_of(-inf, n - 1, lowest) == lowest);
    CHECK(row_max_of(nan, n - 1, T(-3)) == T(-3));
    CHECK(row_max_of(T(1), 0, inf) == inf);
  }
}
