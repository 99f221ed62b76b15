// Encoder layers and the stack, including how Linformer projections are shared.
#include "nn/encoder.h"

#include <typeinfo>

#include "autograd/ops.h"
#include "nn/layers.h"

namespace tinyformer::nn {

namespace {

// norm(x + residual): the built-in LayerNorm runs it as one fused op (add_layer_norm, one pass
// over each row); any other norm module, a LayerNorm subclass included, sees the sum.
Tensor add_then_norm(const NormModule& norm, const Tensor& x, const Tensor& residual) {
  if (typeid(norm) == typeid(LayerNorm) && x.shape() == residual.shape() &&
      x.dtype() == residual.dtype()) {
    return static_cast<const LayerNorm&>(norm).forward_add(x, residual);
  }
  return norm.forward(add(x, residual));
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const EncoderConfig& config,
                                                 std::shared_ptr<Attention> attn,
                                                 std::int64_t layer)
    : TransformerEncoderLayer(
          config, std::move(attn), make_feed_forward(config.feed_forward, {config, layer}),
          make_norm(config.norm, {config, layer}), make_norm(config.norm, {config, layer})) {}

TransformerEncoderLayer::TransformerEncoderLayer(const EncoderConfig& config,
                                                 std::shared_ptr<Attention> attn,
                                                 std::shared_ptr<FeedForwardModule> ff,
                                                 std::shared_ptr<NormModule> n1,
                                                 std::shared_ptr<NormModule> n2)
    : pre_norm_(config.pre_norm), dropout_(config.dropout) {
  TF_CHECK(attn != nullptr && ff != nullptr && n1 != nullptr && n2 != nullptr,
           "TransformerEncoderLayer: expected an attention, a feed-forward and two norm modules, "
           "got a null one");
  TF_CHECK(n1 != n2, "TransformerEncoderLayer: norm1 and norm2 must be two modules");
  attention = register_module("attention", std::move(attn));
  feed_forward = register_module("feed_forward", std::move(ff));
  norm1 = register_module("norm1", std::move(n1));
  norm2 = register_module("norm2", std::move(n2));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& key_padding_mask,
                                        bool causal) {
  const bool train = is_training();
  if (pre_norm_) {
    // x + Attn(LN(x)), then h + FF(LN(h))
    Tensor h = add(x, dropout(attention->forward(norm1->forward(x), key_padding_mask, causal),
                              dropout_, train));
    return add(h, dropout(feed_forward->forward(norm2->forward(h)), dropout_, train));
  }
  // LN(x + Attn(x)), then LN(h + FF(h))
  Tensor h = add_then_norm(
      *norm1, x, dropout(attention->forward(x, key_padding_mask, causal), dropout_, train));
  return add_then_norm(*norm2, h, dropout(feed_forward->forward(h), dropout_, train));
}

TransformerEncoder::TransformerEncoder(const EncoderConfig& config)
    : TransformerEncoder(config, BlockFactories{}) {}

TransformerEncoder::TransformerEncoder(const EncoderConfig& config, const BlockFactories& factories)
    : config_(config) {
  validate(config);
  auto norm = [&](std::int64_t l) {
    if (!factories.norm) return make_norm(config.norm, {config, l});
    auto part = factories.norm({config, l});
    TF_CHECK(part != nullptr, "TransformerEncoder: the norm factory returned null");
    return part;
  };
  layer_list_ = register_module("layers", std::make_shared<ModuleList>());
  const std::int64_t head_dim = config.d_model / config.heads;
  std::shared_ptr<Projection> across_layers;  // layerwise sharing: one for every layer
  for (std::int64_t l = 0; l < config.layers; ++l) {
    const LayerSpec spec = layer_spec(config, l);
    std::shared_ptr<Projection> key, value;  // Linformer layers only
    if (spec.attention == AttentionKind::linformer) {
      const LinformerConfig& lin = spec.linformer;
      const std::string kind =
          lin.projection_name.empty() ? projection_name(lin.projection) : lin.projection_name;
      const ProjectionSpec ps{.k = layer_k(lin, l),
                              .max_seq_len = config.max_seq_len,
                              .head_dim = head_dim,
                              .heads = lin.sharing == Sharing::none ? config.heads : 1,
                              .init = lin.projection_init,
                              .lr_scale = lin.projection_lr_scale};
      switch (lin.sharing) {
        case Sharing::none:
        case Sharing::headwise:
          key = make_projection(kind, ps);
          value = make_projection(kind, ps);
          break;
        case Sharing::key_value:
          key = value = make_projection(kind, ps);
          break;
        case Sharing::layerwise:
          if (!across_layers) across_layers = make_projection(kind, ps);
          key = value = across_layers;
          break;
      }
    }
    const AttentionSpec as{config, l, spec, key, value};
    std::shared_ptr<Attention> attn =
        factories.attention ? factories.attention(as) : make_attention(spec.attention_module, as);
    std::shared_ptr<FeedForwardModule> ff =
        factories.feed_forward ? factories.feed_forward({config, l})
                               : make_feed_forward(config.feed_forward, {config, l});
    layers_.push_back(layer_list_->push_back(
        std::make_shared<TransformerEncoderLayer>(config, attn, ff, norm(l), norm(l))));
  }
  if (config.pre_norm) final_norm = register_module("final_norm", norm(-1));
}

Tensor TransformerEncoder::forward(const Tensor& x, const Tensor& key_padding_mask, bool causal) {
  TF_CHECK(x.defined() && x.dim() == 3 && x.size(1) <= config_.max_seq_len,
           "TransformerEncoder: expected input [B, n <= ", config_.max_seq_len, ", ",
           config_.d_model, "], got ", x.defined() ? shape_str(x.shape()) : "an undefined Tensor");
  Tensor h = x;
  for (const auto& layer : layers_) h = layer->forward(h, key_padding_mask, causal);
  return final_norm ? final_norm->forward(h) : h;
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoder::layer(std::size_t i) const {
  TF_CHECK(i < layers_.size(), "TransformerEncoder::layer: index ", i, " out of range for ",
           layers_.size(), " layers");
  return layers_[i];
}

std::vector<std::shared_ptr<Attention>> TransformerEncoder::attention_layers() const {
  std::vector<std::shared_ptr<Attention>> out;
  for (const auto& layer : layers_) out.push_back(layer->attention);
  return out;
}

}  // namespace tinyformer::nn
