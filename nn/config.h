// Configuration of a Transformer/Linformer encoder stack: one struct, designated initializers.
//
//   nn::EncoderConfig{.layers = 4, .d_model = 256, .heads = 4, .d_ff = 1024,
//                     .max_seq_len = 512, .attention = nn::AttentionKind::linformer,
//                     .linformer = {.k = 64, .sharing = nn::Sharing::layerwise}}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/linear.h"
#include "nn/projection.h"

namespace tinyformer::nn {

enum class AttentionKind { full, linformer };

// Which projection matrices are shared (the paper's section 4; docs/attention.md). For L layers
// and h heads the linear kind has 2hL matrices (none), 2L (headwise), L (key_value) or 1
// (layerwise).
enum class Sharing { none, headwise, key_value, layerwise };
const char* sharing_name(Sharing sharing);

struct LinformerConfig {
  std::int64_t k = 128;
  // One k per layer (overrides k when non-empty); see k_linear_decay and k_geometric_decay.
  std::vector<std::int64_t> k_per_layer = {};
  ProjectionKind projection = ProjectionKind::linear;
  // A registered projection kind by name (see register_projection); overrides `projection`.
  std::string projection_name = "";
  Sharing sharing = Sharing::headwise;
  // The learned linear kind's recipe (ProjectionSpec; docs/linformer.md, "Learning E"): E starts
  // as mean pooling and learns at projection_lr_scale times the learning rate, undecayed.
  ProjectionInit projection_init = ProjectionInit::pooling;
  double projection_lr_scale = 0.1;
};

// k_l = max(k_min, k0 - l * step) for l = 0 .. layers-1.
std::vector<std::int64_t> k_linear_decay(std::int64_t layers, std::int64_t k0, std::int64_t step,
                                         std::int64_t k_min);
// k_l = max(k_min, round(k0 * ratio^l)).
std::vector<std::int64_t> k_geometric_decay(std::int64_t layers, std::int64_t k0, double ratio,
                                            std::int64_t k_min);

// One layer's attention, when layers differ.
struct LayerSpec {
  AttentionKind attention = AttentionKind::full;
  LinformerConfig linformer = {};
  // The registered attention module (nn/block.h) of this layer; empty: the config's.
  std::string attention_module = {};
};

struct EncoderConfig {
  std::int64_t layers = 2;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
  std::int64_t d_ff = 512;
  std::int64_t max_seq_len = 512;
  double dropout = 0.1;            // on residual branches and in the feed-forward block
  double attention_dropout = 0.0;  // on attention probabilities
  Activation activation = Activation::gelu;
  bool pre_norm = true;  // LayerNorm before each sub-block (true) or after the residual sum
  // The block's parts, by the names they are registered under (nn/block.h: register_attention,
  // register_feed_forward, register_norm). Names rather than functions keep the configuration
  // plain data that a checkpoint can carry. "standard" attention is MultiHeadAttention or
  // LinformerAttention as `attention` says; a custom one gets the layer's shared projections.
  std::string attention_module = "standard";
  std::string feed_forward = "standard";  // FeedForward(d_model, d_ff, activation, dropout)
  std::string norm = "layer_norm";        // LayerNorm(d_model); also the pre-norm final norm
  AttentionKind attention = AttentionKind::full;
  LinformerConfig linformer = {};
  // Per-layer attention (size == layers) overriding `attention` and `linformer`.
  std::vector<LayerSpec> per_layer = {};
  bool fused_attention = true;
};

// The spec of layer `l` after applying per_layer (its attention_module filled in from the
// config's when empty).
LayerSpec layer_spec(const EncoderConfig& config, std::int64_t l);
std::int64_t layer_k(const LinformerConfig& linformer, std::int64_t l);
// Throws Error for an inconsistent config (sizes, heads, k > max_seq_len, layerwise sharing
// with unequal k or kinds, per_layer of the wrong length, a projection, attention module,
// feed-forward or norm name that is not registered, ...). Its work grows with what the config
// holds (per_layer, k_per_layer), not with the number of layers it names, so a description read
// from an untrusted file is checked quickly whatever it claims.
void validate(const EncoderConfig& config);

}  // namespace tinyformer::nn
