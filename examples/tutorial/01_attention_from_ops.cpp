// Tutorial step 1: scaled dot-product attention built from primitive ops (matmul, transpose,
// exp, sum, division), checked against the library's fused op and its textbook composition.
// docs/tutorial/01-attention-from-ops.md walks through it.
#include <limits>

#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

// softmax along the last dim, written out: subtract the row's max (exp never overflows, and
// the result is unchanged since the shift cancels in the ratio), exponentiate, normalise.
Tensor softmax_by_hand(const Tensor& scores) {
  const Tensor row_max = std::get<0>(max(scores, -1, /*keepdim=*/true));  // [..., n, 1]
  const Tensor e = exp(scores - row_max);
  return e / sum(e, {-1}, /*keepdim=*/true);
}

// query: [..., n, d], key: [..., m, d], value: [..., m, dv]; excluded: bool, broadcastable to
// [..., n, m], true where query i must not look at key j.
Tensor attention_by_hand(const Tensor& query, const Tensor& key, const Tensor& value,
                         const Tensor& excluded = {}) {
  const double d = static_cast<double>(query.size(-1));
  Tensor scores = matmul(query, key.transpose(-2, -1)) / std::sqrt(d);  // [..., n, m]
  if (excluded.defined())
    scores = masked_fill(scores, excluded, -std::numeric_limits<double>::infinity());
  const Tensor probs = softmax_by_hand(scores);  // each row sums to 1
  return matmul(probs, value);                   // [..., n, dv]: a weighted mean of values
}

int main() {
  manual_seed(1);
  std::printf("Step 1: attention from primitive ops\n");
  // One batch of 2 sequences, 5 positions, width 4: query, key and value as random matrices.
  const Tensor query = randn({2, 5, 4}), key = randn({2, 5, 4}), value = randn({2, 5, 4});

  const Tensor scores = matmul(query, key.transpose(-2, -1)) / std::sqrt(4.0);
  const Tensor probs = softmax_by_hand(scores);
  tutorial::print_matrix("P = softmax(Q K^T / sqrt(d)), first sequence", probs);
  const Tensor row_sums = sum(probs, {-1});
  check(tutorial::max_abs_diff(row_sums, ones({2, 5})) < 1e-6, "every row of P sums to 1");
  check(tutorial::max_abs_diff(probs, softmax(scores, -1)) < 1e-6,
        "softmax by hand equals the fused softmax op");

  const Tensor ours = attention_by_hand(query, key, value);
  const Tensor fused = fused_attention(query, key, value);
  const Tensor composed = nn::functional::attention(query, key, value);
  std::printf("max |by hand - fused_attention| = %.3g\n", tutorial::max_abs_diff(ours, fused));
  check(tutorial::max_abs_diff(ours, fused) < 1e-5,
        "attention by hand equals fused_attention (float32)");
  check(tutorial::max_abs_diff(ours, composed) < 1e-5,
        "attention by hand equals nn::functional::attention");

  // In float64 the two agree to rounding of double precision.
  const Tensor q64 = query.to(kFloat64), k64 = key.to(kFloat64), v64 = value.to(kFloat64);
  check(tutorial::max_abs_diff(attention_by_hand(q64, k64, v64), fused_attention(q64, k64, v64)) <
            1e-12,
        "the same in float64, to 1e-12");

  // A key-padding mask: the last two positions of the second sequence are padding. true =
  // excluded, [B, m] -> [B, 1, m] so it broadcasts over the n queries.
  const Tensor padding = from<bool>({false, false, false, false, false,  //
                                     false, false, false, true, true},
                                    {2, 5});
  const Tensor excluded = padding.view({2, 1, 5});
  const Tensor masked = attention_by_hand(query, key, value, excluded);
  check(tutorial::max_abs_diff(masked, fused_attention(query, key, value, excluded)) < 1e-5,
        "with a padding mask, by hand equals fused_attention");
  Tensor masked_probs;
  fused_attention(query, key, value, excluded, {.probs = &masked_probs});
  const Tensor on_padding = masked_probs.select(0, 1).narrow(1, 3, 2);  // [n, 2]
  check(tutorial::max_abs_diff(on_padding, zeros({5, 2})) == 0.0,
        "padded keys get weight exactly 0 (exp(-inf) = 0)");
  // Changing the padded values changes nothing.
  const Tensor other_value = where(padding.view({2, 5, 1}), randn({2, 5, 4}) * 100.0, value);
  check(tutorial::max_abs_diff(masked, attention_by_hand(query, key, other_value, excluded)) == 0.0,
        "the values at padded positions do not reach the output");
  return tutorial::finish();
}
