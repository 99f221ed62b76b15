// Multi-head attention, full (MultiHeadAttention) and Linformer (LinformerAttention).
//
// Both take x: [B, n, d_model] and an optional key_padding_mask [B, n] (bool, true at padded
// positions: those keys are excluded, PyTorch's key_padding_mask convention), and return
// [B, n, d_model]. Every boolean attention mask in tinyformer means the same: true = excluded.
#pragma once

#include <memory>
#include <utility>

#include "autograd/attention.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/projection.h"

namespace tinyformer::nn {

class Attention : public Module {
 public:
  Attention(std::int64_t d_model, std::int64_t heads, double dropout, bool fused);
  virtual Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {},
                         bool causal = false) = 0;

  // Keep the last forward's attention probabilities ([B, H, n, n], or [B, H, n, k] for
  // Linformer) for inspection; off by default because they cost memory.
  void keep_attention(bool on) { keep_ = on; }
  const Tensor& last_attention() const { return last_attention_; }
  // Use the fused attention op (true) or the textbook composition (false).
  void set_fused(bool on) { fused_ = on; }
  // The fused op's kernel (autograd/attention.h): memory_efficient (the default) keeps no
  // [B, H, n, m] probabilities; materialized keeps them for the backward. keep_attention(true)
  // materializes them whatever this says. The math is the same, so the choice is not saved with
  // a model.
  void set_kernel(AttentionKernel kernel) { kernel_ = kernel; }
  AttentionKernel kernel() const { return kernel_; }

  std::int64_t heads() const { return heads_; }
  std::int64_t head_dim() const { return head_dim_; }

  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;

 protected:
  // [B, n, d_model] -> [B, H, n, d_head]
  Tensor split_heads(const Tensor& x) const;
  // [B, H, n, d_head] -> [B, n, d_model]
  Tensor merge_heads(const Tensor& x) const;
  // softmax(query key^T / sqrt(d)) value per head; excluded_mask: bool, broadcastable to the
  // scores [B, H, n, m], true where a query must not attend to a key.
  Tensor attend(const Tensor& query, const Tensor& key, const Tensor& value,
                const Tensor& excluded_mask, bool causal);
  void check_input(const Tensor& x, const Tensor& key_padding_mask, const char* op) const;

  std::int64_t d_model_, heads_, head_dim_;
  double dropout_;
  bool fused_;
  AttentionKernel kernel_ = AttentionKernel::memory_efficient;
  bool keep_ = false;
  Tensor last_attention_;
};

// The arguments of MultiHeadAttention's PyTorch-style call, named as in PyTorch's
// nn.MultiheadAttention.forward.
struct AttentionCall {
  // [B, m], bool, true at padded keys (excluded).
  Tensor key_padding_mask{};
  // [n, m] or [B * H, n, m] (PyTorch's layout of per-head masks): bool, true = excluded (the
  // convention of nn.MultiheadAttention), or of the query's floating dtype, added to the scores.
  Tensor attn_mask{};
  bool need_weights = true;          // return the attention weights
  bool average_attn_weights = true;  // [B, n, m] averaged over the heads, else [B, H, n, m]
  bool is_causal = false;            // key j > query i excluded (needs n == m)
};

// Standard attention: every query attends to every (unpadded, and with `causal` every earlier)
// key. Cost O(n^2) per head.
class MultiHeadAttention : public Attention {
 public:
  MultiHeadAttention(std::int64_t d_model, std::int64_t heads, double dropout = 0.0,
                     bool fused = true);
  // Self-attention: query, key and value are all x.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {},
                 bool causal = false) override;
  // PyTorch's nn.MultiheadAttention call with batch_first = true: query [B, n, d_model] attends
  // to key [B, m, d_model] with value [B, m, d_model] (cross-attention when they differ).
  // Returns (output [B, n, d_model], weights): the weights are the attention probabilities after
  // masking and before dropout, averaged over the heads ([B, n, m]) or per head
  // ([B, H, n, m]), outside the graph (PyTorch's carry one); undefined unless
  // call.need_weights.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionCall& call = {});
  std::string type_name() const override { return "MultiHeadAttention"; }
  std::string extra_repr() const override;
};

// Linformer attention (docs/attention.md; the paper's section 4): keys and values are projected
// from n rows to k rows before attention, so the cost is O(n k). Padded rows of the keys and
// values are zeroed before the projection and the projection is given the key-padding mask, so
// padding never reaches the k compressed rows; compressed rows that cover no real position
// (Projected::empty_rows) are excluded from the softmax and get weight exactly 0. The
// projections may be shared with other heads, with each other (key_projection == value_projection)
// and with other layers.
class LinformerAttention : public Attention {
 public:
  LinformerAttention(std::int64_t d_model, std::int64_t heads,
                     std::shared_ptr<Projection> key_projection,
                     std::shared_ptr<Projection> value_projection, double dropout = 0.0,
                     bool fused = true);
  // A causal mask is an Error: every compressed row mixes all n positions, so the future would
  // leak into every query.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {},
                 bool causal = false) override;
  std::string type_name() const override { return "LinformerAttention"; }
  std::string extra_repr() const override;

  std::shared_ptr<Projection> key_projection, value_projection;
};

// Sets the kernel of every attention layer (Attention) in `model` and its descendants; returns
// how many it set.
std::int64_t set_attention_kernel(Module& model, AttentionKernel kernel);

}  // namespace tinyformer::nn
