// The textbook compositions.
#include "nn/functional.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <optional>

#include "autograd/ops.h"

namespace tinyformer::nn::functional {

Tensor softmax(const Tensor& x, std::int64_t dim) {
  Tensor shifted = sub(x, std::get<0>(max(x, dim, /*keepdim=*/true)).detach());
  Tensor e = exp(shifted);
  return div(e, sum(e, {dim}, /*keepdim=*/true));
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor mu = mean(x, {-1}, /*keepdim=*/true);
  Tensor centered = sub(x, mu);
  Tensor variance = mean(mul(centered, centered), {-1}, /*keepdim=*/true);
  Tensor y = mul(centered, rsqrt(variance + eps));
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

Tensor gelu_tanh(const Tensor& x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  Tensor inner =
      mul(x + 0.044715 * pow(x, 3.0), scalar_tensor(c, {.dtype = x.dtype(), .device = x.device()}));
  return 0.5 * x * (1.0 + tanh(inner));
}

Tensor attention(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& excluded_mask, bool causal, Tensor* probs_out) {
  check_attention_inputs("attention", query, key, value, excluded_mask);
  const double d = static_cast<double>(query.size(-1));
  Tensor scores = matmul(query, key.transpose(-2, -1));  // [..., n, m]
  scores = scores / std::sqrt(d);
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (excluded_mask.defined()) scores = masked_fill(scores, excluded_mask, minus_inf);
  if (causal) {
    scores =
        masked_fill(scores, future_mask(query.size(-2), key.size(-2), query.device()), minus_inf);
  }
  Tensor probs = functional::softmax(scores, -1);
  if (probs_out) *probs_out = probs;
  // [..., n, dv], laid out like the query: for heads that are a view of a [B, n, H, d] buffer
  // the result is one too, and merging the heads is free.
  return matmul_like(probs, value, query);
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  check_attention_inputs(op, query, key, value, Tensor());
  TF_CHECK(std::isfinite(dropout_p) && dropout_p >= 0.0 && dropout_p <= 1.0, op,
           ": expected a dropout_p in [0, 1], got ", dropout_p);
  TF_CHECK(!scale || std::isfinite(*scale), op, ": expected a finite scale, got ", *scale);
  Shape scores_shape = query.shape();  // [..., n, m]
  scores_shape.back() = key.size(-2);
  if (attn_mask.defined()) {
    TF_CHECK(attn_mask.dtype() == DType::boolean || attn_mask.dtype() == query.dtype(), op,
             ": expected a bool attn_mask (true = takes part) or an additive one of the query's ",
             "dtype ", query.dtype(), ", got ", attn_mask.dtype());
    TF_CHECK(attn_mask.device() == query.device(), op, ": expected an attn_mask on ",
             query.device(), ", got one on ", attn_mask.device());
    const Shape shape = broadcast_shapes(scores_shape, attn_mask.shape(), op);
    TF_CHECK(shape == scores_shape, op, ": an attn_mask of shape ", shape_str(attn_mask.shape()),
             " does not broadcast to the scores ", shape_str(scores_shape));
  }
  const double head_scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  if (!attn_mask.defined() || attn_mask.dtype() == DType::boolean) {
    // fused_attention, on its default memory-efficient kernel: the mask turned into an
    // excluded one, a scale other than 1 / sqrt(d) moved onto the query.
    const Tensor q = scale && *scale != head_scale ? query * (*scale / head_scale) : query;
    const Tensor excluded =
        attn_mask.defined()
            ? eq(attn_mask, zeros({}, {.dtype = DType::boolean, .device = query.device()}))
            : Tensor();
    return fused_attention(q, key, value, excluded,
                           {.causal = is_causal, .dropout = dropout_p, .training = dropout_p > 0});
  }
  // An additive mask: the composition, which keeps the scores.
  Tensor scores = matmul(query, key.transpose(-2, -1));
  scores = scores * scale.value_or(head_scale);
  const double minus_inf = -std::numeric_limits<double>::infinity();
  scores = scores + attn_mask;
  if (is_causal) {
    scores =
        masked_fill(scores, future_mask(query.size(-2), key.size(-2), query.device()), minus_inf);
  }
  Tensor probs = functional::softmax(scores, -1);
  if (dropout_p > 0.0) probs = dropout(probs, dropout_p, /*training=*/true);
  return matmul_like(probs, value, query);
}

}  // namespace tinyformer::nn::functional
