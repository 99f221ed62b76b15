// The parts of an encoder block (attention, feed-forward, normalisation) as interfaces with
// registries of named factories, so that a user swaps one part by name and the stack keeps the
// rest: the Linformer projections it shares, the k of each layer, the padding masks
// (docs/attention.md, "Custom block parts").
//
//   nn::register_feed_forward("swiglu", [](const nn::BlockPartSpec& s) {
//     return std::make_shared<SwiGLU>(s.config.d_model, s.config.d_ff);
//   });
//   nn::EncoderConfig{..., .feed_forward = "swiglu", .norm = "rms_norm"}
//
// EncoderConfig carries the names only (plain data, which a checkpoint can store); the
// factories live here. The built-in names: attention "standard" (MultiHeadAttention or
// LinformerAttention, by the layer's AttentionKind), feed-forward "standard" (FeedForward),
// norm "layer_norm" (LayerNorm).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention.h"
#include "nn/block_parts.h"
#include "nn/config.h"

namespace tinyformer::nn {

// What a feed-forward or norm factory builds from: the whole configuration and the layer's
// index (0 .. layers-1; -1 for the final norm of a pre-norm stack).
struct BlockPartSpec {
  const EncoderConfig& config;
  std::int64_t layer;
};

// What an attention factory builds from. For a Linformer layer (spec.attention ==
// AttentionKind::linformer) the stack has built the key and value projections already, with the
// layer's k and shared as the config's Sharing says (the same object across layers for
// layerwise sharing, key == value for key-value sharing); a factory passes them on to keep that
// sharing. For a full-attention layer they are null.
struct AttentionSpec {
  const EncoderConfig& config;
  std::int64_t layer;
  const LayerSpec& spec;
  std::shared_ptr<Projection> key_projection, value_projection;
};

using AttentionFactory = std::function<std::shared_ptr<Attention>(const AttentionSpec&)>;
using FeedForwardFactory = std::function<std::shared_ptr<FeedForwardModule>(const BlockPartSpec&)>;
using NormFactory = std::function<std::shared_ptr<NormModule>(const BlockPartSpec&)>;

// Register (or replace) a part under a name; the built-ins are registered already.
void register_attention(const std::string& name, AttentionFactory factory);
void register_feed_forward(const std::string& name, FeedForwardFactory factory);
void register_norm(const std::string& name, NormFactory factory);

// The registered names, sorted.
std::vector<std::string> attention_names();
std::vector<std::string> feed_forward_names();
std::vector<std::string> norm_names();

// Whether `name` is a built-in part that has not been replaced with a register_* call since:
// its parameters are then known from the configuration alone (nn/model_shapes.h).
bool is_builtin_attention(const std::string& name);
bool is_builtin_feed_forward(const std::string& name);
bool is_builtin_norm(const std::string& name);

// Build a part by name; an unknown name is an Error that lists the registered ones, and so is a
// factory that returns null.
std::shared_ptr<Attention> make_attention(const std::string& name, const AttentionSpec& spec);
std::shared_ptr<FeedForwardModule> make_feed_forward(const std::string& name,
                                                     const BlockPartSpec& spec);
std::shared_ptr<NormModule> make_norm(const std::string& name, const BlockPartSpec& spec);

// Factories given directly to a TransformerEncoder, for a part that needs no name (a one-off
// experiment, a closure over local state); a set one overrides the config's name. A config
// alone cannot rebuild such a stack, so register a name for anything a checkpoint must restore.
struct BlockFactories {
  AttentionFactory attention = nullptr;
  FeedForwardFactory feed_forward = nullptr;
  NormFactory norm = nullptr;
};

}  // namespace tinyformer::nn
