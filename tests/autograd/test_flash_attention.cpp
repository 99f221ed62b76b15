// fused_attention on its memory-efficient kernel (the default): gradient checks in float64 with a
// key-padding mask, the causal rule, Linformer's summary rows past the sequence (k > n, left out
// by the mask) and dropout under a fixed seed; forward and backward equal to the materialized
// kernel's in float32, dropout included (the same counters drop the same elements); and a peak
// of live tensor memory that grows linearly with n, where the materialized kernel's grows as
// n^2.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/attention.h"
#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/random.h"

namespace {

using namespace tinyformer;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(to(a, DType::float64), to(b, DType::float64)))).item<double>();
}

// A key-padding mask [B, 1, 1, m]: the last `padded[b]` keys of batch b excluded.
Tensor padding_mask(const std::vector<std::int64_t>& padded, std::int64_t m) {
  std::vector<double> values;
  for (std::int64_t p : padded) {
    for (std::int64_t j = 0; j < m; ++j) values.push_back(j >= m - p ? 1.0 : 0.0);
  }
  const std::int64_t batch = static_cast<std::int64_t>(padded.size());
  return to(from(values, {batch, 1, 1, m}), DType::boolean);
}

TEST_CASE("memory-efficient attention: gradcheck in float64") {
  manual_seed(5);
  const auto leaf = [](const Shape& shape) {
    return randn(shape, {.dtype = DType::float64, .requires_grad = true});
  };
  // [B, H, n, d] with B = 2, H = 2; keys m = n, and m = 7 > n = 5 (Linformer's k > n).
  for (std::int64_t m : {5, 7}) {
    const Tensor q = leaf({2, 2, 5, 3}), k = leaf({2, 2, m, 3}), v = leaf({2, 2, m, 4});
    const Tensor mask = padding_mask({1, 2}, m);
    // Summary rows past the sequence: keys 5 and 6 excluded for every query.
    const Tensor past = m > 5 ? padding_mask({m - 5, m - 5}, m) : mask;
    const auto run = [](Tensor excluded, AttentionOptions options) {
      return [excluded, options](const std::vector<Tensor>& in) {
        return fused_attention(in[0], in[1], in[2], excluded, options);
      };
    };
    CAPTURE(m);
    CHECK(gradcheck(run({}, {}), {q, k, v}));
    CHECK(gradcheck(run(mask, {}), {q, k, v}));
    CHECK(gradcheck(run(past, {}), {q, k, v}));
    if (m == 5) CHECK(gradcheck(run(mask, {.causal = true}), {q, k, v}));
  }
  // Dropout: a generator reseeded at every call draws the same mask each time.
  const Tensor q = leaf({2, 3, 6, 4}), k = leaf({2, 3, 6, 4}), v = leaf({2, 3, 6, 2});
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    CHECK(gradcheck(
        [causal](const std::vector<Tensor>& in) {
          Generator gen(77);
          return fused_attention(
              in[0], in[1], in[2], padding_mask({2, 0}, 6),
              {.causal = causal, .dropout = 0.3, .training = true, .generator = &gen});
        },
        {q, k, v}));
  }
}

// Both kernels on the same float32 inputs and upstream gradient; returns the largest difference
// of the output and of each input gradient.
std::vector<double> kernel_differences(const Shape& batch, std::int64_t n, std::int64_t m,
                                       std::int64_t d, const Tensor& mask, bool causal,
                                       double dropout, std::uint64_t seed) {
  manual_seed(seed);
  Shape qs = batch, ks = batch, vs = batch;
  qs.insert(qs.end(), {n, d});
  ks.insert(ks.end(), {m, d});
  vs.insert(vs.end(), {m, d});
  const Tensor q0 = randn(qs), k0 = randn(ks), v0 = randn(vs);
  Shape os = batch;
  os.insert(os.end(), {n, d});
  const Tensor up = randn(os);
  std::vector<Tensor> results[2];
  int at = 0;
  for (AttentionKernel kernel :
       {AttentionKernel::memory_efficient, AttentionKernel::materialized}) {
    const Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(),
                 v = v0.detach().requires_grad_();
    Generator gen(seed + 1);
    const Tensor out = fused_attention(q, k, v, mask,
                                       {.causal = causal,
                                        .dropout = dropout,
                                        .training = dropout > 0,
                                        .generator = &gen,
                                        .kernel = kernel});
    sum(mul(out, up)).backward();
    results[at++] = {out.detach(), q.grad(), k.grad(), v.grad()};
  }
  std::vector<double> diffs;
  for (std::size_t i = 0; i < 4; ++i) diffs.push_back(max_abs_diff(results[0][i], results[1][i]));
  return diffs;
}

TEST_CASE("memory-efficient attention equals the materialized kernel in float32") {
  struct Case {
    Shape batch;
    std::int64_t n, m;
    bool masked, causal;
    double dropout;
  };
  // Past the CPU kernel's tiles (64 rows, 512 keys), n not a multiple of either; m < n, m > n;
  // one matrix (the CPU backward's two passes) and 8 (a matrix per item).
  const Case cases[] = {
      {{1, 1}, 300, 300, false, false, 0.0}, {{2, 4}, 300, 300, true, false, 0.0},
      {{2, 4}, 300, 300, false, true, 0.0},  {{1, 3}, 200, 64, true, false, 0.0},
      {{1, 2}, 50, 530, true, true, 0.0},    {{2, 4}, 257, 257, true, true, 0.2},
      {{1, 1}, 129, 129, false, false, 0.5},
  };
  std::uint64_t seed = 10;
  for (const Case& c : cases) {
    const Tensor mask =
        c.masked
            ? padding_mask(std::vector<std::int64_t>(static_cast<std::size_t>(c.batch[0]), c.m / 5),
                           c.m)
            : Tensor{};
    const std::vector<double> diffs =
        kernel_differences(c.batch, c.n, c.m, 16, mask, c.causal, c.dropout, seed += 3);
    CAPTURE(c.n);
    CAPTURE(c.m);
    CAPTURE(c.masked);
    CAPTURE(c.causal);
    CAPTURE(c.dropout);
    CHECK(diffs[0] < 2e-6);  // out
    CHECK(diffs[1] < 2e-5);  // grad_query
    CHECK(diffs[2] < 2e-5);  // grad_key
    CHECK(diffs[3] < 2e-5);  // grad_value
  }
}

TEST_CASE("memory-efficient attention: a row with every key excluded is NaN, as materialized") {
  const Tensor q = randn({1, 3, 4}), k = randn({1, 2, 4}), v = randn({1, 2, 4});
  const Tensor mask =
      to(from(std::vector<double>{0.0, 1.0, 1.0, 1.0, 0.0, 0.0}, {1, 3, 2}), DType::boolean);
  const Tensor efficient = fused_attention(q, k, v, mask);
  const Tensor materialized =
      fused_attention(q, k, v, mask, {.kernel = AttentionKernel::materialized});
  const std::vector<float> a = efficient.to_vector<float>(), b = materialized.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isnan(a[i]) == std::isnan(b[i]));
    if (!std::isnan(b[i])) CHECK(std::fabs(a[i] - b[i]) < 1e-6);
  }
  CHECK(std::isnan(a[4]));  // row 1: both keys excluded
}

TEST_CASE("memory-efficient attention: peak memory linear in n, materialized quadratic") {
  // [1, 4, n, 16]: the materialized kernel's P is 4 n^2 floats; at n = 2048 that is 64 MiB,
  // against 512 KiB for each of query, key, value and the output.
  const auto peak = [](AttentionKernel kernel, std::int64_t n) {
    manual_seed(3);
    const Tensor q = randn({1, 4, n, 16}, {.requires_grad = true});
    const Tensor k = randn({1, 4, n, 16}, {.requires_grad = true});
    const Tensor v = randn({1, 4, n, 16}, {.requires_grad = true});
    const std::int64_t base = memory_stats().current_bytes;
    reset_peak_memory();
    sum(fused_attention(q, k, v, {}, {.causal = true, .kernel = kernel})).backward();
    return memory_stats().peak_bytes - base;
  };
  const std::int64_t efficient_1k = peak(AttentionKernel::memory_efficient, 1024);
  const std::int64_t efficient_2k = peak(AttentionKernel::memory_efficient, 2048);
  const std::int64_t materialized_2k = peak(AttentionKernel::materialized, 2048);
  MESSAGE("peak above inputs, n = 1024 / 2048: memory-efficient ", efficient_1k, " / ",
          efficient_2k, " bytes; materialized at 2048: ", materialized_2k, " bytes");
  // Linear: a bound of 64 floats per query row and head covers the output, its gradient, the
  // three input gradients, lse, D and the per-thread tiles (fixed in n); P alone is n floats
  // per row and head.
  for (const std::pair<std::int64_t, std::int64_t>& at :
       {std::pair{std::int64_t{1024}, efficient_1k}, std::pair{std::int64_t{2048}, efficient_2k}}) {
    const std::int64_t n = at.first;
    CAPTURE(n);
    CHECK(at.second < 4 * n * 64 * 4 + 8 * 1024 * 1024);
  }
  CHECK(static_cast<double>(efficient_2k) / static_cast<double>(efficient_1k) < 2.3);
  CHECK(materialized_2k > 4 * efficient_2k);
}

TEST_CASE("memory-efficient attention: float32 products under a bfloat16 autocast") {
  // The kernel has no bfloat16 mode: under autocast it computes what it computes without, bit
  // for bit, forward and backward.
  manual_seed(8);
  const Tensor q0 = randn({2, 3, 9, 8}), k0 = randn({2, 3, 9, 8}), v0 = randn({2, 3, 9, 8});
  std::vector<Tensor> results[2];
  for (int autocast = 0; autocast < 2; ++autocast) {
    const Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(),
                 v = v0.detach().requires_grad_();
    Tensor out;
    {
      const AutocastGuard guard(autocast ? DType::bfloat16 : DType::float32);
      out = fused_attention(q, k, v, {}, {.causal = true});
    }
    CHECK(out.dtype() == DType::float32);
    sum(out).backward();
    results[autocast] = {out.detach(), q.grad(), k.grad(), v.grad()};
  }
  for (std::size_t i = 0; i < 4; ++i) CHECK(max_abs_diff(results[0][i], results[1][i]) == 0.0);
}

TEST_CASE("memory-efficient attention: the kernel by name, and keep_attention materializes") {
  CHECK(parse_attention_kernel("memory_efficient") == AttentionKernel::memory_efficient);
  CHECK(parse_attention_kernel("materialized") == AttentionKernel::materialized);
  CHECK(std::string(attention_kernel_name(AttentionKernel::materialized)) == "materialized");
  CHECK_THROWS_WITH_AS(parse_attention_kernel("flash"),
                       "attention kernel: expected memory_efficient or materialized, got 'flash'",
                       Error);
  // Asking for the probabilities materializes them on either kernel.
  const Tensor q = randn({2, 5, 4}), k = randn({2, 6, 4}), v = randn({2, 6, 3});
  Tensor probs;
  const Tensor out = fused_attention(q, k, v, {}, {.probs = &probs});
  CHECK(probs.shape() == Shape{2, 5, 6});
  CHECK(max_abs_diff(out, fused_attention(q, k, v)) < 1e-6);
}

}  // namespace
