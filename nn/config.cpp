// Encoder configuration: k schedules, per-layer specs and validation.
#include "nn/config.h"

#include <algorithm>
#include <cmath>

#include "core/checked.h"
#include "core/error.h"
#include "nn/block.h"

namespace tinyformer::nn {

const char* sharing_name(Sharing sharing) {
  switch (sharing) {
    case Sharing::none:
      return "none";
    case Sharing::headwise:
      return "headwise";
    case Sharing::key_value:
      return "key-value";
    case Sharing::layerwise:
      return "layerwise";
  }
  return "unknown";
}

std::vector<std::int64_t> k_linear_decay(std::int64_t layers, std::int64_t k0, std::int64_t step,
                                         std::int64_t k_min) {
  TF_CHECK(layers > 0 && k0 > 0 && step >= 0 && k_min > 0 && k_min <= k0,
           "k_linear_decay: expected layers > 0, 0 < k_min <= k0 and step >= 0, got layers=",
           layers, ", k0=", k0, ", step=", step, ", k_min=", k_min);
  std::vector<std::int64_t> ks;
  for (std::int64_t l = 0; l < layers; ++l) {
    // k0 - l * step cannot overflow downwards unless l * step does (k0 > 0): a step that large
    // is a mistake, reported rather than wrapped into some k.
    std::int64_t decay = 0;
    TF_CHECK(!mul_overflows(l, step, decay), "k_linear_decay: layer ", l, "'s decay ", l, " * ",
             step, " overflows a 64-bit integer (layers=", layers, ", k0=", k0, ", step=", step,
             ", k_min=", k_min, "); use a step of at most k0");
    ks.push_back(std::max(k_min, k0 - decay));
  }
  return ks;
}

std::vector<std::int64_t> k_geometric_decay(std::int64_t layers, std::int64_t k0, double ratio,
                                            std::int64_t k_min) {
  TF_CHECK(layers > 0 && k0 > 0 && ratio > 0 && ratio <= 1 && k_min > 0 && k_min <= k0,
           "k_geometric_decay: expected layers > 0, 0 < k_min <= k0 and 0 < ratio <= 1, got "
           "layers=",
           layers, ", k0=", k0, ", ratio=", ratio, ", k_min=", k_min);
  std::vector<std::int64_t> ks;
  for (std::int64_t l = 0; l < layers; ++l) {
    // k0 * ratio^l <= k0, but a k0 near 2^63 rounds up to 2^63 as a double, which llround
    // cannot return: such a k stays k0.
    const double k = static_cast<double>(k0) * std::pow(ratio, static_cast<double>(l));
    ks.push_back(std::max(k_min, k < 9223372036854775808.0
                                     ? std::min(k0, static_cast<std::int64_t>(std::llround(k)))
                                     : k0));
  }
  return ks;
}

LayerSpec layer_spec(const EncoderConfig& config, std::int64_t l) {
  if (config.per_layer.empty())
    return {config.attention, config.linformer, config.attention_module};
  LayerSpec spec = config.per_layer[static_cast<std::size_t>(l)];
  if (spec.attention_module.empty()) spec.attention_module = config.attention_module;
  return spec;
}

std::int64_t layer_k(const LinformerConfig& linformer, std::int64_t l) {
  return linformer.k_per_layer.empty() ? linformer.k
                                       : linformer.k_per_layer[static_cast<std::size_t>(l)];
}

namespace {

// An Error naming the field, the unknown name and the registered ones.
void check_registered(const std::string& name, const std::vector<std::string>& known,
                      const std::string& field, const char* how) {
  if (std::find(known.begin(), known.end(), name) != known.end()) return;
  std::string list;
  for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
  fail("EncoderConfig: ", field, " \"", name, "\" is not registered (registered: ", list,
       "); add one with ", how);
}

}  // namespace

void validate(const EncoderConfig& c) {
  TF_CHECK(c.layers > 0 && c.d_model > 0 && c.heads > 0 && c.d_ff > 0 && c.max_seq_len > 0,
           "EncoderConfig: expected positive layers, d_model, heads, d_ff and max_seq_len");
  TF_CHECK(c.d_model % c.heads == 0, "EncoderConfig: d_model (", c.d_model,
           ") must be divisible by heads (", c.heads, ")");
  TF_CHECK(c.dropout >= 0 && c.dropout <= 1 && c.attention_dropout >= 0 && c.attention_dropout <= 1,
           "EncoderConfig: expected dropouts in [0, 1], got dropout ", c.dropout,
           " and attention_dropout ", c.attention_dropout);
  TF_CHECK(c.per_layer.empty() || static_cast<std::int64_t>(c.per_layer.size()) == c.layers,
           "EncoderConfig: per_layer has ", c.per_layer.size(), " entries for ", c.layers,
           " layers");
  check_registered(c.feed_forward, feed_forward_names(), "feed_forward", "register_feed_forward");
  check_registered(c.norm, norm_names(), "norm", "register_norm");
  const std::vector<std::string> attention_modules = attention_names();
  const std::vector<std::string> projections = projection_names();
  // Without per_layer, every layer has the config's spec and differs at most in its k
  // (k_per_layer, whose length must then be the number of layers): the first layer stands for
  // the others unless there is a k per layer. The loop below thus runs over what the config
  // holds, never over a number of layers it merely claims.
  std::int64_t distinct_layers = c.layers;
  if (c.per_layer.empty()) {
    const std::size_t ks = c.linformer.k_per_layer.size();
    TF_CHECK(c.attention != AttentionKind::linformer || ks == 0 ||
                 static_cast<std::int64_t>(ks) == c.layers,
             "EncoderConfig: k_per_layer has ", ks, " entries for ", c.layers, " layers");
    distinct_layers = c.attention == AttentionKind::linformer && ks != 0 ? c.layers : 1;
  }
  std::int64_t shared_k = -1;
  std::string shared_kind;
  for (std::int64_t l = 0; l < distinct_layers; ++l) {
    const LayerSpec spec = layer_spec(c, l);
    check_registered(spec.attention_module, attention_modules,
                     "layer " + std::to_string(l) + "'s attention_module", "register_attention");
    if (spec.attention != AttentionKind::linformer) continue;
    const LinformerConfig& lin = spec.linformer;
    if (!lin.projection_name.empty())
      check_registered(canonical_projection_name(lin.projection_name), projections,
                       "layer " + std::to_string(l) + "'s projection_name", "register_projection");
    TF_CHECK(
        lin.k_per_layer.empty() || static_cast<std::int64_t>(lin.k_per_layer.size()) == c.layers,
        "EncoderConfig: k_per_layer has ", lin.k_per_layer.size(), " entries for ", c.layers,
        " layers");
    const std::int64_t k = layer_k(lin, l);
    TF_CHECK(k > 0 && k <= c.max_seq_len, "EncoderConfig: layer ", l, " has k=", k,
             ", expected 0 < k <= max_seq_len (", c.max_seq_len, ")");
    if (lin.sharing == Sharing::layerwise) {
      const std::string kind = lin.projection_name.empty()
                                   ? projection_name(lin.projection)
                                   : canonical_projection_name(lin.projection_name);
      TF_CHECK(shared_k < 0 || (shared_k == k && shared_kind == kind),
               "EncoderConfig: layerwise sharing uses one projection for every layer, so every "
               "layer needs the same k and kind; layer ",
               l, " has k=", k, " (", kind, "), an earlier layer k=", shared_k, " (", shared_kind,
               "). Use headwise or key-value sharing for a k per layer");
      shared_k = k;
      shared_kind = kind;
    }
  }
}

}  // namespace tinyformer::nn
