// Fused scaled dot-product attention: one graph node for softmax(q k^T / sqrt(d)) v, with a
// hand-written backward that keeps only q, k, v and the probabilities. The textbook
// composition of the same math is nn::functional::scaled_dot_product_attention; a test holds
// the two equal.
#pragma once

#include "core/random.h"
#include "core/tensor.h"

namespace tinyformer {

struct AttentionOptions {
  bool causal = false;   // query i attends to keys j <= i only
  double dropout = 0.0;  // on the probabilities, in training only
  bool training = false;
  Generator* generator = nullptr;  // for dropout; the default generator if null
  Tensor* probs = nullptr;         // if set, receives the probabilities [..., n, m] (no graph)
};

// q: [..., n, d], k: [..., m, d], v: [..., m, dv] with equal leading dims (e.g. [B, H]).
// mask: boolean, broadcastable to [..., n, m], true where a query may attend to a key;
// undefined means everywhere. A query with no key to attend to gets NaN, as in PyTorch.
// Returns [..., n, dv].
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {},
                       const AttentionOptions& options = {});

// The boolean [n, m] mask of causal attention: true where j <= i.
Tensor causal_mask(std::int64_t n, std::int64_t m, Device device = Device::cpu());

}  // namespace tinyformer
