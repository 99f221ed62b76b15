// Fused scaled dot-product attention: one graph node for softmax(query key^T / sqrt(d)) value,
// with a hand-written backward that keeps only query, key, value and the probabilities. The
// textbook composition of the same math is nn::functional::scaled_dot_product_attention; a test
// holds the two equal.
//
// Masks follow one convention everywhere in tinyformer: a boolean mask is true where a key is
// excluded (as in PyTorch's nn.MultiheadAttention, key_padding_mask and attn_mask alike).
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

// query: [..., n, d], key: [..., m, d], value: [..., m, dv] with equal leading dims (e.g. [B, H]).
// excluded_mask: boolean, broadcastable to [..., n, m], true where query i must not attend to
// key j (a key-padding mask [B, m] enters as [B, 1, 1, m]); undefined excludes nothing. A query
// with every key excluded gets NaN, as in PyTorch. Returns [..., n, dv].
Tensor fused_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                       const Tensor& excluded_mask = {}, const AttentionOptions& options = {});

// The boolean [n, m] mask that causal attention applies: true where key j lies in the future of
// query i (j > i), i.e. where it is excluded.
Tensor future_mask(std::int64_t n, std::int64_t m, Device device = Device::cpu());

// The checks every attention entry point runs on its arguments, with `op` naming it in the
// error: defined query, key, value of one floating dtype and matching shapes, and an
// excluded_mask (if defined) of dtype bool that broadcasts to [..., n, m].
void check_attention_inputs(const char* op, const Tensor& query, const Tensor& key,
                            const Tensor& value, const Tensor& excluded_mask);

}  // namespace tinyformer
