// Readable compositions of primitives: the textbook forms of softmax, layer norm, GELU and
// attention. Their backward comes free from the ops they are made of. The fused ops
// (softmax, layer_norm, gelu, fused_attention) compute the same and are held equal to these
// by tests; modules use the fused ones for speed.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace tinyformer::nn::functional {

// exp(x - max) / sum(exp(x - max)) along dim (subtracting the max keeps exp from overflowing).
Tensor softmax(const Tensor& x, std::int64_t dim);
// (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased variance).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// x * Phi(x) with Phi written out via tanh (the approximation) — exact erf has no primitive.
Tensor gelu_tanh(const Tensor& x);

// Attention, step by step, in tinyformer's mask convention:
//   scores = query key^T             [..., n, m]
//   scores = scores / sqrt(d)
//   scores = -inf where excluded_mask is true (bool, broadcastable to [..., n, m],
//            true = query i must not attend to key j), and where j > i when causal
//   probs  = softmax(scores)         [..., n, m]
//   out    = probs value             [..., n, dv]
// query: [..., n, d], key: [..., m, d], value: [..., m, dv]. The same arguments and checks as
// fused_attention. If `probs_out` is set it receives probs.
Tensor attention(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& excluded_mask = {}, bool causal = false,
                 Tensor* probs_out = nullptr);

// PyTorch's torch.nn.functional.scaled_dot_product_attention, with its conventions:
//   - attn_mask, broadcastable to the scores [..., n, m]: bool with true = the query TAKES PART
//     in attending to the key (the opposite of tinyformer's excluded masks), or of the query's
//     floating dtype, added to the scores (0 keeps, -inf removes);
//   - dropout_p: dropout on the probabilities, applied whenever p > 0 (there is no training flag
//     in the functional form, as in PyTorch), from the default generator;
//   - is_causal: key j > query i is removed (with attn_mask as well, which PyTorch refuses);
//   - scale: the factor on the scores, 1 / sqrt(d) by default.
// A query whose keys are all removed gets NaN, as the math path of PyTorch gives. Without a mask
// or with a bool one it runs fused_attention's memory-efficient kernel (no [..., n, m] tensor
// kept, as PyTorch's flash and memory-efficient kernels); an additive mask takes the
// composition of products and softmax.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

}  // namespace tinyformer::nn::functional
