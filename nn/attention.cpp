// Full and Linformer multi-head attention.
#include "nn/attention.h"

#include <cmath>
#include <limits>

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
  TF_CHECK(dropout >= 0 && dropout <= 1, "attention: expected dropout in [0, 1], got ", dropout);
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, d_model));
  k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, d_model));
  v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, d_model));
  out_proj = register_module("out_proj", std::make_shared<Linear>(d_model, d_model));
}

void Attention::check_input(const Tensor& x, const Tensor& key_padding_mask, const char* op) const {
  TF_CHECK(x.defined() && x.dim() == 3 && x.size(2) == d_model_, op, ": expected input [B, n, ",
           d_model_, "], got ", x.defined() ? shape_str(x.shape()) : "an undefined Tensor");
  if (key_padding_mask.defined()) {
    TF_CHECK(key_padding_mask.dtype() == DType::boolean && key_padding_mask.dim() == 2 &&
                 key_padding_mask.size(0) == x.size(0) && key_padding_mask.size(1) == x.size(1),
             op, ": expected key_padding_mask of dtype bool and shape [", x.size(0), ", ",
             x.size(1), "] (true = padding), got ", key_padding_mask.dtype(), " ",
             shape_str(key_padding_mask.shape()));
  }
}

Tensor Attention::split_heads(const Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads_, head_dim_}).transpose(1, 2);
}

Tensor Attention::merge_heads(const Tensor& x) const {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), d_model_});
}

Tensor Attention::attend(const Tensor& query, const Tensor& key, const Tensor& value,
                         const Tensor& excluded_mask, bool causal) {
  Tensor probs;
  Tensor out;
  TF_CHECK(fused_ || !is_training() || dropout_ == 0.0, type_name(),
           ": attention dropout needs the fused path (set_fused(true))");
  if (fused_) {
    out = fused_attention(query, key, value, excluded_mask,
                          {.causal = causal,
                           .dropout = dropout_,
                           .training = is_training(),
                           .probs = keep_ ? &probs : nullptr,
                           .kernel = kernel_});
  } else {
    out = functional::attention(query, key, value, excluded_mask, causal, &probs);
  }
  last_attention_ = keep_ && probs.defined() ? probs.detach() : Tensor();
  return out;
}

std::int64_t set_attention_kernel(Module& model, AttentionKernel kernel) {
  std::int64_t count = 0;
  if (auto* attention = dynamic_cast<Attention*>(&model)) {
    attention->set_kernel(kernel);
    ++count;
  }
  for (const auto& child : model.children()) count += set_attention_kernel(*child, kernel);
  return count;
}

MultiHeadAttention::MultiHeadAttention(std::int64_t d_model, std::int64_t heads, double dropout,
                                       bool fused)
    : Attention(d_model, heads, dropout, fused) {}

Tensor MultiHeadAttention::forward(const Tensor& x, const Tensor& key_padding_mask, bool causal) {
  check_input(x, key_padding_mask, "MultiHeadAttention");
  Tensor query = split_heads(q_proj->forward(x));  // [B, H, n, d_head]
  Tensor key = split_heads(k_proj->forward(x));
  Tensor value = split_heads(v_proj->forward(x));
  // The key-padding mask is already an excluded mask; it applies to every head and query:
  // [B, n] -> [B, 1, 1, n].
  Tensor excluded;
  if (key_padding_mask.defined()) excluded = key_padding_mask.view({x.size(0), 1, 1, x.size(1)});
  return out_proj->forward(merge_heads(attend(query, key, value, excluded, causal)));
}

std::pair<Tensor, Tensor> MultiHeadAttention::forward(const Tensor& query_in, const Tensor& key_in,
                                                      const Tensor& value_in,
                                                      const AttentionCall& call) {
  const char* op = "MultiHeadAttention";
  check_input(query_in, Tensor(), op);
  check_input(key_in, call.key_padding_mask, op);
  check_input(value_in, Tensor(), op);
  const std::int64_t b = query_in.size(0), n = query_in.size(1), m = key_in.size(1);
  TF_CHECK(key_in.size(0) == b && value_in.size(0) == b && value_in.size(1) == m, op,
           ": expected key and value [", b, ", m, ", d_model_, "] of one length m, got ",
           shape_str(key_in.shape()), " and ", shape_str(value_in.shape()));
  TF_CHECK(!call.is_causal || n == m, op, ": is_causal needs as many queries as keys, got ", n,
           " and ", m);
  Tensor query = split_heads(q_proj->forward(query_in));  // [B, H, n, d_head]
  Tensor key = split_heads(k_proj->forward(key_in));      // [B, H, m, d_head]
  Tensor value = split_heads(v_proj->forward(value_in));
  // Excluded keys as one bool mask broadcast to the scores [B, H, n, m].
  Tensor excluded;
  if (call.key_padding_mask.defined()) excluded = call.key_padding_mask.view({b, 1, 1, m});
  Tensor additive;
  if (call.attn_mask.defined()) {
    const Tensor& mask = call.attn_mask;
    const bool boolean = mask.dtype() == DType::boolean;
    TF_CHECK(boolean || mask.dtype() == query_in.dtype(), op,
             ": expected an attn_mask of dtype bool (true = excluded) or ", query_in.dtype(),
             " (added to the scores), got ", mask.dtype());
    TF_CHECK((mask.shape() == Shape{n, m} || mask.shape() == Shape{b * heads_, n, m}), op,
             ": expected an attn_mask of shape [", n, ", ", m, "] or [", b * heads_, ", ", n, ", ",
             m, "] (batch * heads first), got ", shape_str(mask.shape()));
    const Tensor per_head = mask.dim() == 2 ? mask : mask.view({b, heads_, n, m});
    if (!boolean) {
      additive = per_head;
    } else {
      excluded = excluded.defined() ? where(excluded, excluded, per_head) : per_head;  // or
    }
  }
  Tensor out, probs;
  if (!additive.defined()) {
    const bool keep = keep_;
    keep_ = keep || call.need_weights;
    out = attend(query, key, value, excluded, call.is_causal);
    probs = last_attention_;
    keep_ = keep;
    if (!keep) last_attention_ = Tensor();
  } else {
    // An additive mask: the composition, with the mask added to the scaled scores.
    Tensor scores = matmul(query, key.transpose(-2, -1)) /
                    std::sqrt(static_cast<double>(head_dim_));  // [B, H, n, m]
    scores = scores + additive;
    const double minus_inf = -std::numeric_limits<double>::infinity();
    if (excluded.defined()) scores = masked_fill(scores, excluded, minus_inf);
    if (call.is_causal) scores = masked_fill(scores, future_mask(n, m, query.device()), minus_inf);
    probs = softmax(scores, -1);
    out = matmul_like(dropout(probs, dropout_, is_training()), value, query);
    if (keep_) last_attention_ = probs.detach();
  }
  Tensor weights;
  if (call.need_weights && probs.defined()) {
    weights = call.average_attn_weights ? mean(probs, {1}) : probs;
  }
  return {out_proj->forward(merge_heads(out)), weights};
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

Tensor LinformerAttention::forward(const Tensor& x, const Tensor& key_padding_mask, bool causal) {
  TF_CHECK(!causal,
           "LinformerAttention: causal masks are not supported: each of the k projected rows "
           "mixes all n positions, so every query would see the future through them. Use "
           "MultiHeadAttention for causal (decoder) attention");
  check_input(x, key_padding_mask, "LinformerAttention");
  Tensor query = split_heads(q_proj->forward(x));               // [B, H, n, d_head]
  Tensor key = k_proj->forward(x), value = v_proj->forward(x);  // [B, n, d_model]
  if (key_padding_mask.defined()) {
    // Zero the padded rows before projecting, so no padded key or value reaches the compressed
    // rows (and no projection may add a bias, for the same reason). Before the heads split, so
    // that the fill runs over contiguous rows of d_model.
    Tensor padded_rows = key_padding_mask.view({x.size(0), x.size(1), 1});
    key = masked_fill(key, padded_rows, 0.0);
    value = masked_fill(value, padded_rows, 0.0);
  }
  key = split_heads(key);
  value = split_heads(value);
  // [B, H, k, d_head] each, with the summary rows that cover no real position.
  Projected key_compressed = key_projection->project(key, key_padding_mask);
  Projected value_compressed = value_projection->project(value, key_padding_mask);
  // A row empty for the keys or for the values is excluded from the softmax: its weight is
  // exactly 0 instead of what a zero key would take. [B, k] -> [B, 1, 1, k] for every head, or
  // [B, H, k] -> [B, H, 1, k] per head.
  const std::int64_t b = x.size(0), h = query.size(1), k = key_projection->k();
  Tensor excluded;
  for (const Tensor& e : {key_compressed.empty_rows, value_compressed.empty_rows}) {
    if (!e.defined()) continue;
    const bool fits =
        e.dtype() == DType::boolean && (e.shape() == Shape{b, k} || e.shape() == Shape{b, h, k});
    TF_CHECK(fits, "LinformerAttention: a projection reported empty rows of dtype bool and shape [",
             b, ", ", k, "] or [", b, ", ", h, ", ", k, "] expected, got ", e.dtype(), " ",
             shape_str(e.shape()));
    const Tensor rows = e.dim() == 2 ? e.view({b, 1, 1, k}) : e.view({b, h, 1, k});
    excluded = excluded.defined() ? where(excluded, excluded, rows) : rows;  // or, broadcast
  }
  return out_proj->forward(
      merge_heads(attend(query, key_compressed.rows, value_compressed.rows, excluded, false)));
}

std::string LinformerAttention::extra_repr() const {
  return "d_model=" + std::to_string(d_model_) + ", heads=" + std::to_string(heads_) +
         ", k=" + std::to_string(key_projection->k()) +
         (key_projection == value_projection ? ", shared key-value" : "");
}

}  // namespace tinyformer::nn
