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
//   scores = query key^T             [..., n, m]
//   scores = scores / sqrt(d)
//   scores = -inf where excluded_mask is true (bool, broadcastable to [..., n, m],
//            true = query i must not attend to key j), and where j > i when causal
//   probs  = softmax(scores)         [..., n, m]
//   out    = probs value             [..., n, dv]
// query: [..., n, d], key: [..., m, d], value: [..., m, dv]. The same arguments and checks as
// fused_attention. If `probs_out` is set it receives probs.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& excluded_mask = {}, bool causal = false,
                                    Tensor* probs_out = nullptr);

}  // namespace tinyformer::nn::functional
