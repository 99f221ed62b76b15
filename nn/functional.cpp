// The textbook compositions.
#include "nn/functional.h"

#include <cmath>
#include <limits>
#include <numbers>

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

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, bool causal, Tensor* probs_out) {
  TF_CHECK(q.defined() && k.defined() && v.defined() && q.dim() >= 2,
           "scaled_dot_product_attention: expected q, k, v of at least 2 dims");
  const double d = static_cast<double>(q.size(-1));
  Tensor scores = matmul(q, k.transpose(-2, -1));
  scores = scores / std::sqrt(d);
  const Tensor minus_inf = scalar_tensor(-std::numeric_limits<double>::infinity(),
                                         {.dtype = q.dtype(), .device = q.device()});
  if (mask.defined()) scores = where(mask, scores, minus_inf);
  if (causal) scores = where(causal_mask(q.size(-2), k.size(-2), q.device()), scores, minus_inf);
  Tensor probs = functional::softmax(scores, -1);
  if (probs_out) *probs_out = probs;
  return matmul(probs, v);
}

}  // namespace tinyformer::nn::functional
