// Solutions to the exercises of tutorial step 1 (docs/tutorial/01-attention-from-ops.md): a masked
// softmax without -inf, why the scores are divided by sqrt(d), and why the softmax subtracts the
// row's maximum. One function per exercise; each checks its result.
#include <limits>

#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// Exercise 1.1: a masked softmax that never writes -inf. The excluded entries are zeroed after
// exp and left out of the sum, which is what exp(-inf) = 0 does in step 1's version.
Tensor masked_softmax(const Tensor& scores, const Tensor& excluded) {
  const Tensor row_max = std::get<0>(max(scores, -1, /*keepdim=*/true));  // [..., n, 1]
  const Tensor kept = where(excluded, zeros_like(scores), exp(scores - row_max));
  return kept / sum(kept, {-1}, /*keepdim=*/true);
}

void masked_softmax_by_hand() {
  std::printf("Exercise 1.1: a masked softmax without -inf\n");
  const Tensor query = randn({2, 5, 4}), key = randn({2, 6, 4});
  // true = excluded; the first key of every row stays, so no row is all excluded.
  std::vector<bool> pattern;
  for (int i = 0; i < 2 * 5 * 6; ++i) pattern.push_back(i % 6 != 0 && i % 4 == 1);
  const Tensor excluded = from<bool>(pattern, {2, 5, 6});
  const Tensor probs = masked_softmax(matmul(query, key.transpose(-2, -1)) / 2.0, excluded);

  // The library's attention with the same mask hands back its probabilities.
  Tensor reference;
  fused_attention(query, key, randn({2, 6, 4}), excluded, {.probs = &reference});
  std::printf("  max |by hand - fused_attention's P| = %.3g\n",
              tutorial::max_abs_diff(probs, reference));
  check(tutorial::max_abs_diff(probs, reference) < 1e-6,
        "1.1 the masked softmax by hand equals fused_attention's probabilities");
  check(tutorial::max_abs_diff(where(excluded, probs, zeros_like(probs)), zeros_like(probs)) == 0,
        "1.1 excluded entries get weight exactly 0");
  check(tutorial::max_abs_diff(sum(probs, {-1}), ones({2, 5})) < 1e-6,
        "1.1 every row still sums to 1");
}

// Exercise 1.2: the scale. q . k of two random vectors of width d has variance d; divided by
// sqrt(d) it has variance 1, and the softmax over 16 keys stays soft.
void the_scale() {
  std::printf("Exercise 1.2: why divide by sqrt(d)\n");
  std::printf("  %6s %14s %14s %16s %18s\n", "d", "var(q.k)/d", "var scaled", "max weight raw",
              "max weight scaled");
  double largest_raw = 0, largest_scaled = 0;
  bool variance_is_d = true, scaled_is_one = true;
  for (std::int64_t d : {4, 16, 64, 256}) {
    const Tensor q = randn({64, 16, d}), k = randn({64, 16, d});
    const Tensor raw = matmul(q, k.transpose(-2, -1));  // [64, 16, 16]
    const Tensor scaled = raw / std::sqrt(static_cast<double>(d));
    const double var_raw = var(raw.flatten(), {0}).item<double>();
    const double var_scaled = var(scaled.flatten(), {0}).item<double>();
    // The mean over rows of the largest weight: 1 for a one-hot row, 1/16 for a uniform one.
    const double top_raw = mean(std::get<0>(max(softmax(raw, -1), -1))).item<double>();
    const double top_scaled = mean(std::get<0>(max(softmax(scaled, -1), -1))).item<double>();
    std::printf("  %6lld %14.3f %14.3f %16.3f %18.3f\n", static_cast<long long>(d),
                var_raw / static_cast<double>(d), var_scaled, top_raw, top_scaled);
    variance_is_d = variance_is_d && std::abs(var_raw / static_cast<double>(d) - 1) < 0.2;
    scaled_is_one = scaled_is_one && std::abs(var_scaled - 1) < 0.2;
    largest_raw = top_raw;
    largest_scaled = top_scaled;
  }
  check(variance_is_d, "1.2 unscaled, var(q . k) is d (within 20%)");
  check(scaled_is_one, "1.2 divided by sqrt(d), the variance is 1 whatever d (within 20%)");
  check(largest_raw > 0.85 && largest_scaled < 0.5,
        "1.2 at d = 256 the unscaled softmax is nearly one-hot, the scaled one is not");
}

// Exercise 1.3: exp overflows float32 above 88.7. A softmax that does not subtract the row's
// maximum turns large scores into inf / inf = NaN; the shifted one is exact.
void the_shift() {
  std::printf("Exercise 1.3: why subtract the row's maximum\n");
  const Tensor scores = randn({3, 5}) + 100.0;  // e^100 > 3.4e38, float32's largest
  const Tensor e = exp(scores);
  const Tensor naive = e / sum(e, {-1}, true);
  const Tensor shifted_e = exp(scores - std::get<0>(max(scores, -1, true)));
  const Tensor shifted = shifted_e / sum(shifted_e, {-1}, true);
  const auto v = naive.to_vector<float>();
  const bool has_nan = std::any_of(v.begin(), v.end(), [](float x) { return x != x; });
  std::printf("  naive softmax of scores near 100, first row: %g %g %g ...\n", v[0], v[1], v[2]);
  check(has_nan, "1.3 without the shift, float32 gives NaN (inf / inf)");
  check(tutorial::max_abs_diff(shifted, softmax(scores, -1)) < 1e-6,
        "1.3 with the shift, the result equals the softmax op");
  // The same scores shifted by any constant give the same probabilities.
  check(tutorial::max_abs_diff(softmax(scores - 100.0, -1), shifted) < 1e-6,
        "1.3 softmax(s - c) = softmax(s) for any constant c");
}

}  // namespace

int main() {
  manual_seed(101);
  std::printf("Step 1, exercises\n");
  masked_softmax_by_hand();
  the_scale();
  the_shift();
  return tutorial::finish();
}
