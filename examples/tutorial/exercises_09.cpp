// Solutions to the exercises of tutorial step 9 (docs/tutorial/09-costs.md): the memory a forward
// keeps, predicted from the shapes; the sequence length from which Linformer needs less memory
// than full attention; and the per-entry bound that Theorem 1's proof rests on. One function per
// exercise; each checks its result.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// Bytes held after `run` returns its output (the graph, and what it saved, stays alive with it).
template <typename Run>
double kept_bytes(Run&& run) {
  const std::int64_t before = memory_stats().current_bytes;
  const Tensor out = run();
  return static_cast<double>(memory_stats().current_bytes - before);
}

// Exercise 9.1: predict what a forward keeps for the backward. fused_attention on its
// materialized kernel keeps P [B, H, n, m] and returns [B, H, n, d]; Linformer's attention also
// keeps its k summary rows of keys and values, [B, H, k, d] each, with m = k.
void predict_memory() {
  std::printf("Exercise 9.1: the memory a forward keeps, from the shapes\n");
  const std::int64_t b = 2, h = 4, n = 512, d = 16, k = 32;
  const auto like = TensorOptions{.requires_grad = true};
  const Tensor q = randn({b, h, n, d}, like), key = randn({b, h, n, d}, like),
               value = randn({b, h, n, d}, like);
  const Tensor e = randn({k, n}) / std::sqrt(static_cast<double>(n));
  const AttentionOptions materialized{.kernel = AttentionKernel::materialized};
  const double full = kept_bytes([&] { return fused_attention(q, key, value, {}, materialized); });
  const double linformer = kept_bytes(
      [&] { return fused_attention(q, matmul(e, key), matmul(e, value), {}, materialized); });
  // The memory-efficient kernel (the default) keeps the output and one log-sum-exp per row.
  const double efficient = kept_bytes([&] { return fused_attention(q, key, value); });
  const double efficient_predicted = 4.0 * (b * h * n * d + b * h * n);
  const double full_predicted = 4.0 * (b * h * n * n + b * h * n * d);
  const double linformer_predicted = 4.0 * (b * h * n * k + b * h * n * d + 2 * b * h * k * d);
  std::printf("  full attention: kept %.0f bytes, predicted %.0f\n", full, full_predicted);
  std::printf("  Linformer:      kept %.0f bytes, predicted %.0f\n", linformer,
              linformer_predicted);
  std::printf("  full attention, memory-efficient kernel: kept %.0f bytes, predicted %.0f\n",
              efficient, efficient_predicted);
  check(std::abs(efficient / efficient_predicted - 1) < 0.05,
        "9.1 the memory-efficient kernel keeps the output and lse: B H (n d + n) floats");
  check(std::abs(full / full_predicted - 1) < 0.05,
        "9.1 full attention keeps P and the output: B H (n^2 + n d) floats (within 5%)");
  check(std::abs(linformer / linformer_predicted - 1) < 0.05,
        "9.1 Linformer keeps P', K', V' and the output: B H (n k + n d + 2 k d) floats");
}

// Exercise 9.2: where Linformer starts to save memory. One layer's forward and backward, full
// attention against Linformer with k = 64, for n from 16 to 512: at small n the k x n matrices
// and the k summary rows cost more than the n x n map they replace.
void break_even() {
  std::printf("Exercise 9.2: from which n Linformer (k = 64) needs less memory\n");
  const std::int64_t d_model = 64, heads = 2, k = 64;
  std::int64_t first_saving = 0;
  bool stays_below = true;
  for (std::int64_t n : {16, 32, 64, 128, 256, 512}) {
    const Tensor x = randn({4, n, d_model}), g = randn({4, n, d_model});
    auto peak = [&](nn::Attention& layer) {
      const std::int64_t base = memory_stats().current_bytes;
      reset_peak_memory();
      layer.forward(x).backward(g);
      return static_cast<double>(memory_stats().peak_bytes - base) / 1e6;
    };
    nn::MultiHeadAttention full(d_model, heads);
    // E is [k, max_seq_len] and needs k <= max_seq_len; a shorter sequence uses its first columns.
    const nn::ProjectionSpec spec{
        .k = k, .max_seq_len = std::max(n, k), .head_dim = d_model / heads};
    nn::LinformerAttention linformer(d_model, heads, nn::make_projection("linear", spec),
                                     nn::make_projection("linear", spec));
    // Both on the materialized kernel: the textbook comparison, P against P'.
    full.set_kernel(AttentionKernel::materialized);
    linformer.set_kernel(AttentionKernel::materialized);
    const double full_mb = peak(full), linformer_mb = peak(linformer);
    std::printf("  n = %4lld: full %7.3f MB, Linformer %7.3f MB\n", static_cast<long long>(n),
                full_mb, linformer_mb);
    if (linformer_mb < full_mb && first_saving == 0) first_saving = n;
    if (first_saving != 0) stays_below = stays_below && linformer_mb < full_mb;
  }
  std::printf("  Linformer needs less from n = %lld on\n", static_cast<long long>(first_saving));
  check(first_saving > k / 2 && first_saving <= 2 * k,
        "9.2 Linformer starts to save memory between n = k/2 and n = 2k");
  check(stays_below, "9.2 ... and keeps saving at every longer n");
}

// Exercise 9.3: the bound behind Theorem 1. For a row p of P and a column w of V, Johnson-
// Lindenstrauss bounds |<R p, R w> - <p, w>| by eps |p| |w| with eps of order 1/sqrt(k), whatever
// n. (P R^T R w)_i is <R p_i, R w>, so the measured error per entry, divided by |p_i| |w|, must
// shrink as 1/sqrt(k) and not change with n.
void theorem1_bound() {
  std::printf("Exercise 9.3: Theorem 1's per-entry bound\n");
  std::vector<std::vector<double>> ratio;  // [n][k]
  const std::vector<std::int64_t> ks = {16, 64, 256};
  for (std::int64_t n : {256, 1024}) {
    const Tensor p = softmax(randn({n, n}, {.dtype = kFloat64}), -1);
    const Tensor w = randn({n, 8}, {.dtype = kFloat64});      // 8 columns of V
    const Tensor exact = matmul(p, w);                        // [n, 8]
    const Tensor row_norms = sqrt(sum(p * p, {1}, true));     // [n, 1]
    const Tensor column_norms = sqrt(sum(w * w, {0}, true));  // [1, 8]
    ratio.emplace_back();
    std::printf("  n = %4lld:", static_cast<long long>(n));
    for (std::int64_t k : ks) {
      double mean_ratio = 0;
      for (int draw = 0; draw < 4; ++draw) {  // averaged over four draws of R
        const Tensor r = randn({k, n}, {.dtype = kFloat64}) / std::sqrt(static_cast<double>(k));
        const Tensor sketched = matmul(matmul(p, r.transpose(0, 1)), matmul(r, w));
        mean_ratio += mean(abs(sketched - exact) / (row_norms * column_norms)).item<double>() / 4;
      }
      ratio.back().push_back(mean_ratio);
      std::printf("  k = %3lld: %.4f", static_cast<long long>(k), ratio.back().back());
    }
    std::printf("   (sqrt(2 / (pi k)) at k = 16: %.4f)\n", std::sqrt(2 / (3.14159265 * 16)));
  }
  check(ratio[0][0] > 3 * ratio[0][2] && ratio[1][0] > 3 * ratio[1][2],
        "9.3 16 times the rows: the error per entry shrinks about 4 times (1/sqrt(k))");
  bool same = true;
  for (std::size_t j = 0; j < ks.size(); ++j)
    same = same && std::abs(ratio[0][j] / ratio[1][j] - 1) < 0.2;
  check(same, "9.3 at every k it is the same for n = 256 and n = 1024 (within 20%)");
}

}  // namespace

int main() {
  manual_seed(109);
  std::printf("Step 9, exercises\n");
  predict_memory();
  break_even();
  theorem1_bound();
  return tutorial::finish();
}
