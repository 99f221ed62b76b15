// Readable compositions of primitives: the textbook forms of softmax, layer norm, GELU and
// attention. Their backward comes free from the ops they are made of. The fused ops
// (softmax, layer_norm, gelu, fused_attention) compute the same and are held equal to these
// by tests; modules use the fused ones for speed.
#pragma once

#include "core/tensor.h"

namespace tinyformer::nn::functional {

// exp(x - max) / sum(exp(x - max)) along dim (subtracting the max keeps exp from overflowing).
Tensor softmax(const Tensor& x, std::int64_t dim);
// (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased variance).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// x * Phi(x) with Phi written out via tanh (the approximation) — exact erf has no primitive.
Tensor gelu_tanh(const Tensor& x);

// Attention, step by step:
//   scores = q k^T                   [..., n, m]
//   scores = scores / sqrt(d)
//   scores = -inf where mask is false (mask: bool, broadcastable, true = may attend)
//   probs  = softmax(scores)         [..., n, m]
//   out    = probs v                 [..., n, dv]
// If `probs_out` is set it receives probs.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = {}, bool causal = false,
                                    Tensor* probs_out = nullptr);

}  // namespace tinyformer::nn::functional
