// Fused scaled dot-product attention: one graph node for softmax(query key^T / sqrt(d)) value,
// with a hand-written backward. Two kernels compute it (AttentionKernel): the memory-efficient
// one, the default, keeps only query, key, value, the output and one log-sum-exp per query row,
// and recomputes the probabilities block by block in backward (FlashAttention's scheme: memory
// linear in the sequence length); the materialized one keeps the [..., n, m] probabilities P.
// The textbook composition of the same math is nn::functional::scaled_dot_product_attention; a
// test holds the three equal.
//
// Masks follow one convention everywhere in tinyformer: a boolean mask is true where a key is
// excluded (as in PyTorch's nn.MultiheadAttention, key_padding_mask and attn_mask alike).
#pragma once

#include <string>

#include "core/random.h"
#include "core/tensor.h"

namespace tinyformer {

// How fused_attention computes: memory_efficient never stores the [..., n, m] probabilities
// (ops flash_attention and flash_attention_backward); materialized keeps them for the backward
// (ops attention and attention_backward, or the composition of products and softmax where those
// do not apply). Asking for the probabilities (AttentionOptions::probs) always materializes them,
// and a backend without the memory-efficient kernel for the dtype runs the materialized path.
enum class AttentionKernel { memory_efficient, materialized };

struct AttentionOptions {
  bool causal = false;   // query i attends to keys j <= i only
  double dropout = 0.0;  // on the probabilities, in training only
  bool training = false;
  Generator* generator = nullptr;  // for dropout; the default generator if null
  Tensor* probs = nullptr;         // if set, receives the probabilities [..., n, m] (no graph)
  AttentionKernel kernel = AttentionKernel::memory_efficient;
};

// "memory_efficient" or "materialized", and back (an Error naming the choices otherwise).
const char* attention_kernel_name(AttentionKernel kernel);
AttentionKernel parse_attention_kernel(const std::string& name);

// query: [..., n, d], key: [..., m, d], value: [..., m, dv] with equal leading dims (e.g. [B, H]).
// excluded_mask: boolean, broadcastable to [..., n, m], true where query i must not attend to
// key j (a key-padding mask [B, m] enters as [B, 1, 1, m]); undefined excludes nothing. A query
// with every key excluded gets NaN, as in PyTorch. Returns [..., n, dv].
//
// Dropout draws its mask from the generator as dropout over a [..., n, m] tensor would (one
// counter per score), on either kernel: the same generator state drops the same elements, and
// the memory-efficient kernel draws each again in backward instead of storing the mask. The
// memory-efficient kernel's float32 products are exact under any matmul_precision() and under a
// bfloat16 autocast.
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
