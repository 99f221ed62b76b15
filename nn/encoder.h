// The Transformer encoder: layers of (attention, feed-forward), each with a residual and a
// norm, pre-norm or post-norm; every layer's attention full or Linformer. Each part is built by
// the factory registered under the config's name for it (nn/block.h), so a custom part keeps
// the rest of the stack.
#pragma once

#include <memory>
#include <vector>

#include "nn/attention.h"
#include "nn/block.h"
#include "nn/config.h"
#include "nn/container.h"
#include "nn/layers.h"

namespace tinyformer::nn {

class TransformerEncoderLayer : public Module {
 public:
  // The feed-forward and both norms built by the config's registered names for layer `layer`.
  TransformerEncoderLayer(const EncoderConfig& config, std::shared_ptr<Attention> attention,
                          std::int64_t layer = 0);
  // Every part given.
  TransformerEncoderLayer(const EncoderConfig& config, std::shared_ptr<Attention> attention,
                          std::shared_ptr<FeedForwardModule> feed_forward,
                          std::shared_ptr<NormModule> norm1, std::shared_ptr<NormModule> norm2);
  // x: [B, n, d_model]; key_padding_mask: [B, n] bool, true at padding (those keys are
  // excluded), or undefined.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {}, bool causal = false);
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  std::string extra_repr() const override { return pre_norm_ ? "pre-norm" : "post-norm"; }

  std::shared_ptr<Attention> attention;
  std::shared_ptr<FeedForwardModule> feed_forward;  // a FeedForward for "standard"
  std::shared_ptr<NormModule> norm1, norm2;         // LayerNorms for "layer_norm"

 private:
  bool pre_norm_;
  double dropout_;
};

class TransformerEncoder : public Module {
 public:
  // Parts by the config's registered names; a factory set in `factories` overrides its name.
  explicit TransformerEncoder(const EncoderConfig& config);
  TransformerEncoder(const EncoderConfig& config, const BlockFactories& factories);
  // As TransformerEncoderLayer::forward, through every layer.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {}, bool causal = false);
  std::string type_name() const override { return "TransformerEncoder"; }

  const EncoderConfig& config() const { return config_; }
  std::size_t size() const { return layers_.size(); }
  std::shared_ptr<TransformerEncoderLayer> layer(std::size_t i) const;
  std::vector<std::shared_ptr<Attention>> attention_layers() const;

  std::shared_ptr<NormModule> final_norm;  // pre-norm stacks only

 private:
  EncoderConfig config_;
  std::shared_ptr<ModuleList> layer_list_;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers_;
};

}  // namespace tinyformer::nn
