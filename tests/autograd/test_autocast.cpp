// Mixed precision: float32 -> bfloat16 rounding against a reference, products under autocast
// equal to the explicit bfloat16 computation, the cached parameter copies and their gradients.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "core/bfloat16.h"
#include "core/profiler.h"

using namespace tinyformer;

namespace {

// Round to nearest, ties to even, computed from the two bfloat16 neighbours in double: the
// truncation `low` and the next value away from zero. NaN becomes a quiet NaN of the same sign.
std::uint16_t reference_round(float f) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  if (std::isinf(f)) return static_cast<std::uint16_t>(u >> 16);
  const std::uint32_t low = u & 0xffff0000u;
  const std::uint32_t high = low + 0x10000u;  // the next magnitude (may carry into inf)
  const double x = std::abs(static_cast<double>(f));
  // Past the largest finite value the next step is 2^128, where rounding overflows to infinity.
  const double high_value = (high & 0x7fffffffu) == 0x7f800000u
                                ? std::ldexp(1.0, 128)
                                : std::abs(static_cast<double>(std::bit_cast<float>(high)));
  const double dl = x - std::abs(static_cast<double>(std::bit_cast<float>(low)));
  const double dh = high_value - x;
  if (dl < dh) return static_cast<std::uint16_t>(low >> 16);
  if (dh < dl) return static_cast<std::uint16_t>(high >> 16);
  return static_cast<std::uint16_t>(((low >> 16) & 1u) ? high >> 16 : low >> 16);
}

std::vector<float> as_floats(const Tensor& t) {
  return t.to(DType::float32).to_vector<float>();
}

Tensor randn32(const Shape& shape) {
  return randn(shape);
}

// a @ b for bfloat16 a: [..., M, K] and b: [K, N] or [..., K, N] (a's batch dims), with the
// float32 result the kernel accumulates, unrounded: the backend's mixed product, which autocast's
// products run. A shared b folds a's batch into M, as matmul does.
Tensor product32(const Tensor& a, const Tensor& b) {
  const std::int64_t k = a.size(-1), n = b.size(-1);
  const bool shared = b.dim() == 2;
  const std::int64_t m = shared ? a.numel() / k : a.size(-2);
  const std::int64_t batch = a.numel() / (m * k);
  const Tensor a3 = a.contiguous().reshape({batch, m, k});
  const Tensor b3 = b.contiguous().reshape({shared ? 1 : batch, k, n});
  Tensor out = empty({batch, m, n});
  backend(a.device()).matmul(a3, b3, out);
  Shape out_shape = a.shape();
  out_shape.back() = n;
  return out.reshape(out_shape);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const std::vector<float> x = as_floats(a), y = as_floats(b);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(x[i]) != std::bit_cast<std::uint32_t>(y[i])) return false;
  }
  return true;
}

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (float v : as_floats(t)) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

}  // namespace

TEST_CASE("bfloat16 rounding: nearest even, subnormals, inf and NaN against a reference") {
  std::vector<std::uint32_t> bits = {
      0x00000000u, 0x80000000u,                            // zeros
      0x00000001u, 0x00007fffu, 0x00008000u, 0x00008001u,  // subnormals: below, at, above a tie
      0x00018000u, 0x00010000u, 0x007f8000u, 0x007fffffu,  // odd tie up, exact, into normal
      0x807fc000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu,  // ties to even, near ties
      0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu,               // the largest finites round to inf
      0x7f800000u, 0xff800000u,                            // infinities
      0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7f80ffffu,  // NaNs, signalling ones included
  };
  std::mt19937 gen(7);
  for (int i = 0; i < 4000; ++i) bits.push_back(gen());
  for (int i = 0; i < 1000; ++i) bits.push_back(gen() & 0x807fffffu);  // subnormals
  std::vector<float> values;
  for (std::uint32_t b : bits) values.push_back(std::bit_cast<float>(b));
  const auto n = static_cast<std::int64_t>(values.size());
  const std::vector<bfloat16> got =
      raw::to_dtype(from<float>(values, {n}), DType::bfloat16).to_vector<bfloat16>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t want = reference_round(values[i]);
    INFO("float32 bits " << bits[i]);
    CHECK(bfloat16(values[i]).bits == want);  // the host conversion
    if (std::isnan(values[i])) {
      // The kernel keeps NaN a NaN of the same sign (its payload is not part of the contract).
      CHECK(((got[i].bits & 0x7f80u) == 0x7f80u && (got[i].bits & 0x7fu) != 0));
      CHECK((got[i].bits & 0x8000u) == (want & 0x8000u));
    } else {
      CHECK(got[i].bits == want);  // the backend's conversion
    }
  }
}

TEST_CASE("autocast: the guard nests, float32 turns it off, and the state is restored") {
  CHECK(!autocast_dtype());
  {
    const AutocastGuard on(DType::bfloat16);
    CHECK(autocast_dtype() == DType::bfloat16);
    {
      const AutocastSuspend off;
      CHECK(!autocast_dtype());
    }
    CHECK(autocast_dtype() == DType::bfloat16);
  }
  CHECK(!autocast_dtype());
  CHECK_THROWS_AS(AutocastGuard{DType::float64}, Error);
}

TEST_CASE("autocast: matmul equals the explicit bfloat16 product with a float32 result") {
  manual_seed(3);
  const Tensor a = randn32({3, 5, 40}), b = randn32({40, 24});
  const Tensor explicit_product = product32(a.to(DType::bfloat16), b.to(DType::bfloat16));
  // Not rounded to bfloat16: the float32 accumulator is the result.
  CHECK(!bitwise_equal(explicit_product, explicit_product.to(DType::bfloat16).to(DType::float32)));
  Tensor got;
  {
    const AutocastGuard autocast(DType::bfloat16);
    got = matmul(a, b.transpose(0, 1).contiguous().transpose(0, 1));  // a transposed operand
    CHECK(got.dtype() == DType::float32);
    // Already bfloat16, float64 or integer operands are left alone.
    CHECK(matmul(a.to(DType::bfloat16), b.to(DType::bfloat16)).dtype() == DType::bfloat16);
    CHECK(matmul(a.to(DType::float64), b.to(DType::float64)).dtype() == DType::float64);
  }
  CHECK(bitwise_equal(got, explicit_product));
  // Outside the guard the product is float32 and differs from the bfloat16 one.
  CHECK(!bitwise_equal(matmul(a, b), explicit_product));
}

TEST_CASE(
    "autocast: linear's backward rounds the masked gradient once, the bias's sum is float32") {
  // y = relu(x W^T + b) under autocast, loss sum(y * r). By hand: gz = r where y > 0, else 0
  // (float32); the bias gradient is gz's column sums, of the unrounded values; x's and W's
  // gradients are the bfloat16 products of gz rounded once, with float32 results.
  manual_seed(11);
  for (const Epilogue epilogue : {Epilogue::relu, Epilogue::none}) {
    CAPTURE(epilogue_name(epilogue));
    const Tensor x = randn32({2, 37, 24}).requires_grad_(true);
    const Tensor w = randn32({40, 24}).requires_grad_(true);
    const Tensor b = randn32({40}).requires_grad_(true);
    const Tensor r = randn32({2, 37, 40});
    Tensor y;
    {
      const AutocastGuard autocast(DType::bfloat16);
      y = linear(x, w, b, epilogue);
      sum(mul(y, r)).backward();
    }
    REQUIRE(y.dtype() == DType::float32);
    const Tensor mask = epilogue == Epilogue::relu
                            ? gt(y.detach(), zeros_like(y)).to(DType::float32)
                            : ones_like(r);
    const Tensor gz = mul(r, mask).reshape({74, 40});  // float32, exact
    const Tensor gz_low = gz.to(DType::bfloat16);
    const Tensor expected_b = sum(gz.to(DType::float64), {0}).to(DType::float32);
    const Tensor expected_x =
        product32(gz_low, w.detach().to(DType::bfloat16)).reshape({2, 37, 24});
    const Tensor expected_w = product32(gz_low.transpose(0, 1).contiguous(),
                                        x.detach().reshape({74, 24}).to(DType::bfloat16));
    // The bias gradient sums the float32 gz (in float32, one chain of 74 rows): within that
    // sum's rounding of the float64 one, and far from the sum of the rounded gz.
    const double bias_tolerance = 74 * 0x1p-24 * max_abs(sum(abs(gz), {0}));
    CHECK(max_abs(sub(b.grad(), expected_b)) <= bias_tolerance);
    const Tensor rounded_b = sum(gz_low.to(DType::float64), {0}).to(DType::float32);
    CHECK(max_abs(sub(b.grad(), rounded_b)) > 10 * bias_tolerance);
    CHECK(max_abs(sub(x.grad(), expected_x)) <= 1e-5 * max_abs(expected_x));
    CHECK(max_abs(sub(w.grad(), expected_w)) <= 1e-5 * max_abs(expected_w));
    // Not the products of the float32 gradient: rounding it matters at this tolerance.
    const Tensor unrounded_x = matmul(gz, w.detach()).reshape({2, 37, 24});
    CHECK(max_abs(sub(x.grad(), unrounded_x)) > 1e-4 * max_abs(expected_x));
  }
}

TEST_CASE("autocast: softmax, log_softmax, layer_norm and nll_loss widen bfloat16 inputs") {
  manual_seed(4);
  const Tensor x = randn32({4, 6}).to(DType::bfloat16);
  const AutocastGuard autocast(DType::bfloat16);
  CHECK(softmax(x, -1).dtype() == DType::float32);
  CHECK(log_softmax(x, -1).dtype() == DType::float32);
  CHECK(layer_norm(x, {6}, ones({6}), zeros({6}), 1e-5).dtype() == DType::float32);
  const Tensor targets = from<std::int64_t>({0, 1, 2, 3}, {4});
  CHECK(nll_loss(x, targets).dtype() == DType::float32);
  CHECK(cross_entropy(x, targets).dtype() == DType::float32);
}

TEST_CASE("autocast: a backward runs under the autocast dtype of its forward") {
  struct Probe : autograd::Function {
    std::optional<DType> seen;
    bool called = false;
    Tensor forward(const std::vector<Tensor>& in) override { return in[0]; }
    std::vector<Tensor> backward(const Tensor& g) override {
      called = true;
      seen = autocast_dtype();
      return {g};
    }
  };
  const Tensor x = randn32({3}).requires_grad_();
  auto under = std::make_shared<Probe>(), outside = std::make_shared<Probe>();
  Tensor y;
  {
    const AutocastGuard autocast(DType::bfloat16);
    y = autograd::apply(under, {x});
  }
  const Tensor z = autograd::apply(outside, {x});
  sum(y + z).backward();  // run outside the guard
  CHECK(under->called);
  CHECK(under->seen == DType::bfloat16);
  CHECK(outside->called);
  CHECK(!outside->seen);
}

TEST_CASE("autocast: fused attention's products, forward and backward, in bfloat16") {
  // The products round their float32 operands; softmax writes P in bfloat16 (its sums in
  // float32), and its backward reads that P and writes dS in bfloat16, for the products.
  // 9 keys against 7 queries (the scale on the queries), and 4 (on the keys and on d_key).
  for (const std::int64_t keys : {9, 4}) {
    INFO(keys << " keys");
    manual_seed(5);
    const Tensor q = randn32({2, 2, 7, 8}), k = randn32({2, 2, keys, 8}),
                 v = randn32({2, 2, keys, 8});
    const Tensor r = randn32({2, 2, 7, 8});
    Tensor probs;
    auto run = [&](bool autocast) {
      const Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(),
                   vg = v.detach().requires_grad_();
      Tensor out;
      {
        const AutocastGuard guard(autocast ? DType::bfloat16 : DType::float32);
        out = fused_attention(qg, kg, vg, Tensor(), {.probs = &probs});
      }
      CHECK(out.dtype() == DType::float32);
      sum(out * r).backward();
      return std::vector<Tensor>{out, qg.grad(), kg.grad(), vg.grad()};
    };
    const std::vector<Tensor> exact = run(false), mixed = run(true);
    for (std::size_t i = 0; i < exact.size(); ++i) {
      REQUIRE(mixed[i].defined());
      CHECK(mixed[i].dtype() == DType::float32);
      const double diff = max(abs(mixed[i] - exact[i])).item<double>();
      const double scale = max(abs(exact[i])).item<double>();
      INFO("tensor " << i << ": max difference " << diff << " of " << scale);
      CHECK(diff <= 0.05 * scale);  // a few bfloat16 roundings through softmax
      CHECK(diff > 1e-5 * scale);   // and not float32
    }
    // The forward equals the composition with its products' operands and P rounded explicitly,
    // the scale on the side with fewer rows (1 / sqrt(8) is not a power of two, so the side
    // shows in the bits).
    const Tensor scale = scalar_tensor(1.0 / std::sqrt(8.0));
    const bool scale_keys = keys < 7;
    const Tensor s =
        product32((scale_keys ? q : mul(q, scale)).to(DType::bfloat16),
                  (scale_keys ? mul(k, scale) : k).transpose(-2, -1).to(DType::bfloat16));
    const Tensor p = empty(s.shape(), {.dtype = DType::bfloat16});
    backend(Device::cpu()).softmax(s.view({-1, keys}), false, p.view({-1, keys}));
    const Tensor want = product32(p, v.to(DType::bfloat16));
    CHECK(bitwise_equal(mixed[0], want));
    // The probabilities handed out are that P, widened.
    REQUIRE(probs.defined());
    CHECK(probs.dtype() == DType::float32);
    CHECK(bitwise_equal(probs, p.to(DType::float32)));
    // ... and P is the float32 softmax rounded once.
    CHECK(max(abs(probs - softmax(s, -1))).item<double>() <= std::ldexp(1.0, -9));
  }
}

TEST_CASE("autocast: fused attention rounds no [n, m] tensor in a pass of its own") {
  // On the materialized kernel under bfloat16 autocast, P and dS are written in bfloat16 by softmax
  // and its backward: no copy of a scores-sized tensor runs, forward or backward (the query, key,
  // value and the incoming gradient, [n, d] and [m, d] tensors, are rounded for the products).
  manual_seed(12);
  const std::int64_t n = 48, m = 40, d = 8;
  const Tensor q = randn32({2, 3, n, d}).requires_grad_(),
               k = randn32({2, 3, m, d}).requires_grad_(),
               v = randn32({2, 3, m, d}).requires_grad_();
  const Profiler profiler(true);
  {
    const AutocastGuard guard(DType::bfloat16);
    sum(fused_attention(q, k, v, Tensor(), {.kernel = AttentionKernel::materialized})).backward();
  }
  // Without bfloat16 product kernels (oneDNN capped below AVX-512) the products widen their
  // bfloat16 operands, P and dS among them: that fallback's copies are not counted.
  const bool fallback =
      runtime_info().find("bfloat16 products: no oneDNN kernel") != std::string::npos;
  bool softmax_ran = false, softmax_backward_ran = false;
  for (const OpProfile& row : profiler.ops()) {
    INFO(row.name);
    if (!fallback && row.name.rfind("copy", 0) == 0) {
      // A copy's bytes (read and written) per call: a rounded P or dS would be 6 per element of
      // [2, 3, n, m]; rounding a [2, 3, n, d] operand is a fifth of that.
      CHECK(row.bytes / static_cast<double>(row.calls) < 2.0 * 2 * 3 * n * m);
    }
    // The profiler counts the bytes of operands and out: softmax reads float32 S and writes
    // bfloat16 P (6 bytes an element, 8 in float32); its backward reads bfloat16 P and float32
    // dP and writes bfloat16 dS (8 bytes, 12 in float32).
    const double elements = 2.0 * 3 * n * m;
    if (row.name == "softmax") {
      softmax_ran = true;
      CHECK(row.bytes == 6.0 * elements);
    }
    if (row.name == "softmax_backward") {
      softmax_backward_ran = true;
      CHECK(row.bytes == 8.0 * elements);
    }
  }
  CHECK(softmax_ran);
  CHECK(softmax_backward_ran);
  CHECK(q.grad().defined());
  CHECK(k.grad().defined());
  CHECK(v.grad().defined());
}

TEST_CASE("autocast: gradients reach float32 masters in float32, within bfloat16 of float64") {
  manual_seed(6);
  const Tensor w = randn32({16, 48}).requires_grad_();  // [out, in], as nn::Linear stores it
  const Tensor x = randn32({4, 10, 48}).requires_grad_();
  const Tensor r = randn32({4, 10, 16});
  AutocastCache cache;
  cache.add(w);
  cache.refresh();
  {
    const AutocastGuard autocast(DType::bfloat16, &cache);
    const Tensor y = matmul(x, w.transpose(0, 1));  // [4, 10, 16]
    CHECK(y.dtype() == DType::float32);
    sum(y * r).backward();
  }
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::float32);
  CHECK(x.grad().dtype() == DType::float32);
  // float64 reference: dW = r^T x summed over the batch, dx = r W.
  const Tensor x64 = x.detach().to(DType::float64), w64 = w.detach().to(DType::float64),
               r64 = r.to(DType::float64);
  const Tensor dw64 = matmul(r64.reshape({-1, 16}).transpose(0, 1), x64.reshape({-1, 48}));
  const Tensor dx64 = matmul(r64, w64);
  // Operands rounded to bfloat16 (relative error 2^-9 each), float32 sums, the product rounded
  // to bfloat16 once more: a few units of 2^-8 of the sum of |terms|.
  auto check_close = [](const Tensor& got, const Tensor& want, const Tensor& magnitude) {
    const std::vector<double> g = got.to(DType::float64).to_vector<double>();
    const std::vector<double> e = want.to_vector<double>();
    const std::vector<double> m = magnitude.to_vector<double>();
    double worst = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      worst = std::max(worst, std::abs(g[i] - e[i]) / (m[i] + 1e-12));
    }
    CHECK(worst <= 3 * std::ldexp(1.0, -8));
    CHECK(worst > 0);  // the bfloat16 path ran: float32 would be exact to ~2^-20
  };
  check_close(w.grad(), dw64,
              matmul(abs(r64.reshape({-1, 16})).transpose(0, 1), abs(x64.reshape({-1, 48}))));
  check_close(x.grad(), dx64, matmul(abs(r64), abs(w64)));
}

TEST_CASE("autocast cache: one rounding per refresh, the same copy for every product") {
  manual_seed(8);
  const Tensor w = randn32({8, 12}).requires_grad_();
  AutocastCache cache;
  cache.add(w);
  cache.add(w);  // registering twice keeps one entry
  CHECK(cache.size() == 1);
  CHECK(!cache.copy_of(w).defined());
  cache.refresh();
  CHECK(cache.conversions() == 1);
  const Tensor copy = cache.copy_of(w);
  REQUIRE(copy.defined());
  CHECK(copy.dtype() == DType::bfloat16);
  CHECK(bitwise_equal(copy, w.detach().to(DType::bfloat16)));

  // Two forwards in one step read the same copy: no conversion, the same storage.
  const Tensor x = randn32({5, 12});
  Tensor first, second;
  {
    const AutocastGuard autocast(DType::bfloat16, &cache);
    const Tensor view = cache.lookup(w.transpose(0, 1));
    REQUIRE(view.defined());
    CHECK(view.storage() == copy.storage());
    CHECK(view.shape() == Shape{12, 8});
    first = matmul(x, w.transpose(0, 1));
    second = matmul(x, w.transpose(0, 1));
    CHECK(cache.lookup(x).defined() == false);                   // an activation is not cached
    CHECK(cache.lookup(w.detach().clone()).defined() == false);  // nor a copy of the weight
  }
  CHECK(cache.conversions() == 1);
  CHECK(bitwise_equal(first, second));
  CHECK(bitwise_equal(first, product32(x.to(DType::bfloat16), copy.transpose(0, 1))));

  // An optimizer step changes the master in place: the copy is stale until refresh().
  {
    const NoGradGuard no_grad;
    raw::copy(add(w.detach(), scalar_tensor(0.5)), w);
  }
  Tensor stale, fresh;
  {
    const AutocastGuard autocast(DType::bfloat16, &cache);
    stale = matmul(x, w.transpose(0, 1));
  }
  CHECK(bitwise_equal(stale, first));
  cache.refresh();
  CHECK(cache.conversions() == 2);
  CHECK(cache.copy_of(w).storage() != copy.storage());  // a new copy: old graphs keep theirs
  CHECK(bitwise_equal(cache.copy_of(w), w.detach().to(DType::bfloat16)));
  {
    const AutocastGuard autocast(DType::bfloat16, &cache);
    fresh = matmul(x, w.transpose(0, 1));
  }
  CHECK(!bitwise_equal(fresh, first));
  CHECK(bitwise_equal(
      fresh, product32(x.to(DType::bfloat16), w.detach().to(DType::bfloat16).transpose(0, 1))));
}

TEST_CASE("autocast: the activation a product saves for backward is bfloat16") {
  // x: float32 activation of 64 KiB. Without autocast matmul keeps x itself; under autocast it
  // keeps only the bfloat16 copy (half the bytes) and x is freed with its last handle.
  manual_seed(9);
  const Tensor w = randn32({32, 32}).requires_grad_();
  AutocastCache cache;
  cache.add(w);
  cache.refresh();
  const std::int64_t x_bytes = 512 * 32 * 4, y_bytes = 512 * 32 * 4;
  auto held_after_forward = [&](bool autocast) {
    Tensor x = randn32({512, 32});
    const std::int64_t before = memory_stats().current_bytes;
    Tensor y;
    {
      const AutocastGuard guard(autocast ? DType::bfloat16 : DType::float32, &cache);
      y = matmul(x, w.transpose(0, 1));
    }
    x = Tensor();  // the caller drops its activation; the graph keeps what it saved
    const std::int64_t held = memory_stats().current_bytes - before;
    sum(y).backward();
    return held;
  };
  CHECK(held_after_forward(false) == y_bytes);  // x counted before, still alive in the graph
  CHECK(held_after_forward(true) == y_bytes - x_bytes + x_bytes / 2);
}

TEST_CASE("autocast: an activation read by several products is rounded once per guard") {
  // Three projections of one input (attention's query, key and value), each through a new view
  // of it: one bfloat16 copy, saved by all three products.
  manual_seed(15);
  std::vector<Tensor> weights;
  for (int i = 0; i < 3; ++i) weights.push_back(randn32({32, 32}).requires_grad_());
  const std::int64_t x_bytes = 512 * 32 * 4, y_bytes = 512 * 32 * 4;
  Tensor x = randn32({512, 32});
  const Tensor x_explicit = x.to(DType::bfloat16);
  const std::int64_t before = memory_stats().current_bytes;
  std::vector<Tensor> ys;
  {
    const AutocastGuard autocast(DType::bfloat16);
    for (const Tensor& w : weights) ys.push_back(matmul(x.reshape({512, 32}), w.transpose(0, 1)));
  }
  x = Tensor();
  // (The weights' copies are not kept: x needs no gradient, so nothing saves them.) Rounded
  // per product, the three copies would hold 3 * x_bytes / 2.
  CHECK(memory_stats().current_bytes - before == 3 * y_bytes - x_bytes + x_bytes / 2);
  for (std::size_t i = 0; i < 3; ++i) {
    const Tensor want =
        product32(x_explicit, weights[i].detach().to(DType::bfloat16).transpose(0, 1));
    CHECK(bitwise_equal(ys[i], want));
  }
  sum(ys[0] + ys[1] + ys[2]).backward();
  for (const Tensor& w : weights) CHECK(w.grad().dtype() == DType::float32);
}

TEST_CASE("autocast: products without bfloat16 instructions compute through float32") {
  // ctest runs this suite once more with oneDNN capped below AVX-512 (DNNL_MAX_CPU_ISA=AVX2),
  // where oneDNN has no bfloat16 kernel: the products must take the float32 fallback.
  const char* expect = std::getenv("TINYFORMER_EXPECT_BF16_FALLBACK");
  const std::string info = runtime_info();
  if (expect != nullptr) {
    CHECK(info.find("bfloat16 products: no oneDNN kernel") != std::string::npos);
  }
  manual_seed(10);
  const Tensor a = randn32({33, 70}), b = randn32({70, 45});
  Tensor got;
  {
    const AutocastGuard autocast(DType::bfloat16);
    got = matmul(a, b);
  }
  // Exact products of the rounded operands summed in float64, then rounded to bfloat16: the
  // kernel's float32 sum may differ from it by a float32 rounding, so the result by one bfloat16
  // step at most.
  const Tensor a64 = a.to(DType::bfloat16).to(DType::float64),
               b64 = b.to(DType::bfloat16).to(DType::float64);
  const std::vector<double> want = matmul(a64, b64).to_vector<double>();
  const std::vector<float> g = got.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    CHECK(std::abs(g[i] - want[i]) <= std::ldexp(std::abs(want[i]), -7) + 1e-6);
  }
}
