// Full and Linformer multi-head attention.
#include "nn/attention.h"

#include "autograd/ops.h"
#include "nn/functional.h"

namespace tinyformer::nn {

Attention::Attention(std::int64_t d_model, std::int64_t heads, double dropout, bool fused)
    : d_model_(d_model),
      heads_(heads),
      head_dim_(heads > 0 ? d_model / heads : 0),
      dropout_(dropout),
      fused_(fused) {
  TF_CHECK(d_model > 0 && heads > 0 && d_model % heads == 0, "attention",
           ": expected d_model divisible by heads, got d_model=", d_model, ", heads=", heads);
  TF_CHECK(dropout >= 0 && dropout < 1, "attention: expected dropout in [0, 1), got ", dropout);
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, d_model));
  k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, d_model));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, d_model));
  out_proj = register_module("out_proj", std::make_shared<Linear>(d_model, d_model));
}

void Attention::check_input(const Tensor& x, const Tensor& padding_mask, const char* op) const {
  TF_CHECK(x.defined() && x.dim() == 3 && x.size(2) == d_model_, op, ": expected input [B, n, ",
           d_model_, "], got ", x.defined() ? shape_str(x.shape()) : "an undefined Tensor");
  if (padding_mask.defined()) {
    TF_CHECK(padding_mask.dtype() == DType::boolean && padding_mask.dim() == 2 &&
                 padding_mask.size(0) == x.size(0) && padding_mask.size(1) == x.size(1),
             op, ": expected a bool padding mask [", x.size(0), ", ", x.size(1), "], got ",
             shape_str(padding_mask.shape()), " ", padding_mask.dtype());
  }
}

Tensor Attention::split_heads(const Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads_, head_dim_}).transpose(1, 2);
}

Tensor Attention::merge_heads(const Tensor& x) const {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), d_model_});
}

Tensor Attention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         bool causal) {
  Tensor probs;
  Tensor out;
  TF_CHECK(fused_ || !is_training() || dropout_ == 0.0, type_name(),
           ": attention dropout needs the fused path (set_fused(true))");
  if (fused_) {
    out = fused_attention(q, k, v, mask,
                          {.causal = causal,
                           .dropout = dropout_,
                           .training = is_training(),
                           .probs = keep_ ? &probs : nullptr});
  } else {
    out = functional::scaled_dot_product_attention(q, k, v, mask, causal, &probs);
  }
  last_attention_ = keep_ && probs.defined() ? probs.detach() : Tensor();
  return out;
}

MultiHeadAttention::MultiHeadAttention(std::int64_t d_model, std::int64_t heads, double dropout,
                                       bool fused)
    : Attention(d_model, heads, dropout, fused) {}

Tensor MultiHeadAttention::forward(const Tensor& x, const Tensor& padding_mask, bool causal) {
  check_input(x, padding_mask, "MultiHeadAttention");
  Tensor q = split_heads(q_proj->forward(x));  // [B, H, n, d_head]
  Tensor k = split_heads(k_proj->forward(x));
  Tensor v = split_heads(v_proj->forward(x));
  // Keys at padded positions are masked out: [B, 1, 1, n], true where a key is real.
  Tensor mask;
  if (padding_mask.defined()) {
    mask = eq(padding_mask, scalar_tensor(0.0, {.dtype = DType::boolean, .device = x.device()}))
               .view({x.size(0), 1, 1, x.size(1)});
  }
  return out_proj->forward(merge_heads(attend(q, k, v, mask, causal)));
}

std::string MultiHeadAttention::extra_repr() const {
  return "d_model=" + std::to_string(d_model_) + ", heads=" + std::to_string(heads_);
}

LinformerAttention::LinformerAttention(std::int64_t d_model, std::int64_t heads,
                                       std::shared_ptr<Projection> key_proj,
                                       std::shared_ptr<Projection> value_proj, double dropout,
                                       bool fused)
    : Attention(d_model, heads, dropout, fused) {
  TF_CHECK(key_proj && value_proj, "LinformerAttention: expected key and value projections");
  TF_CHECK(key_proj->k() == value_proj->k(),
           "LinformerAttention: the key projection gives k=", key_proj->k(),
           " rows, the value projection k=", value_proj->k());
  key_projection = register_module("key_projection", std::move(key_proj));
  value_projection = register_module("value_projection", std::move(value_proj));
}

Tensor LinformerAttention::forward(const Tensor& x, const Tensor& padding_mask, bool causal) {
  TF_CHECK(!causal,
           "LinformerAttention: causal masks are not supported: each of the k projected rows "
           "mixes all n positions, so every query would see the future through them. Use "
           "MultiHeadAttention for causal (decoder) attention");
  check_input(x, padding_mask, "LinformerAttention");
  Tensor q = split_heads(q_proj->forward(x));  // [B, H, n, d_head]
  Tensor k = split_heads(k_proj->forward(x));
  Tensor v = split_heads(v_proj->forward(x));
  if (padding_mask.defined()) {
    // Zero the padded rows before projecting, so no padded value reaches the compressed rows.
    Tensor pad = padding_mask.view({x.size(0), 1, x.size(1), 1});
    k = masked_fill(k, pad, 0.0);
    v = masked_fill(v, pad, 0.0);
  }
  Tensor k_small = key_projection->forward(k);  // [B, H, k, d_head]
  Tensor v_small = value_projection->forward(v);
  return out_proj->forward(merge_heads(attend(q, k_small, v_small, Tensor(), false)));
}

std::string LinformerAttention::extra_repr() const {
  return "d_model=" + std::to_string(d_model_) + ", heads=" + std::to_string(heads_) +
         ", k=" + std::to_string(key_projection->k()) +
         (key_projection == value_projection ? ", shared key-value" : "");
}

}  // namespace tinyformer::nn
