// The state dict a model description implies, part by part as the constructors register it
// (nn/models.cpp, nn/encoder.cpp, nn/attention.cpp, nn/linear.cpp, nn/projection.cpp).
#include "nn/model_shapes.h"

#include <utility>

#include "core/error.h"
#include "nn/block.h"
#include "nn/config.h"

namespace tinyformer::nn {

namespace {

class Collector {
 public:
  explicit Collector(ModelShapes& out) : out_(out) {}

  void add(const std::string& name, Shape shape, const std::string& from) {
    out_.tensors.push_back({name, std::move(shape), from});
  }
  // Linear(in, out): weight [out, in], bias [out].
  void linear(const std::string& prefix, std::int64_t in, std::int64_t out, bool bias,
              const std::string& from_in, const std::string& from_out) {
    add(prefix + "weight", {out, in}, from_out + ", " + from_in);
    if (bias) add(prefix + "bias", {out}, from_out);
  }
  // LayerNorm(d_model): weight and bias [d_model].
  void layer_norm(const std::string& prefix, std::int64_t d_model) {
    add(prefix + "weight", {d_model}, "encoder.d_model");
    add(prefix + "bias", {d_model}, "encoder.d_model");
  }
  void own(const std::string& prefix) { out_.own_parts.push_back(prefix); }

 private:
  ModelShapes& out_;
};

// The parameters of a built-in projection kind: LinearProjection's E [heads, k, max_seq_len],
// ConvProjection's kernel [d, d, w] (or one per head, [heads, d, d, w]) with
// w = ceil(max_seq_len / k); the pooling and identity kinds have none.
void projection(Collector& c, const std::string& prefix, const std::string& kind,
                const ProjectionSpec& ps, const std::string& from_k) {
  const std::string from_heads = ps.heads > 1 ? ", encoder.heads" : "";
  if (kind == "linear") {
    c.add(prefix + "weight", {ps.heads, ps.k, ps.max_seq_len},
          from_k + ", encoder.max_seq_len" + from_heads);
  } else if (kind == "conv") {
    const std::int64_t d = ps.head_dim, w = (ps.max_seq_len + ps.k - 1) / ps.k;
    const std::string from = "encoder.d_model, encoder.heads, " + from_k + ", encoder.max_seq_len";
    if (ps.heads == 1) {
      c.add(prefix + "weight", {d, d, w}, from);
    } else {
      c.add(prefix + "weight", {ps.heads, d, d, w}, from);
    }
  }
}

}  // namespace

ModelShapes model_shapes(const ModelDescription& d) {
  const EncoderConfig& c = d.encoder;
  validate(c);
  TF_CHECK(d.vocabulary.size > 0, "model_shapes: expected a positive vocabulary size, got ",
           d.vocabulary.size);
  TF_CHECK(d.kind != ModelKind::sequence_classifier || d.classes > 1,
           "model_shapes: expected at least 2 classes, got ", d.classes);
  TF_CHECK(d.kind != ModelKind::causal_lm || d.positions == PositionEncoding::learned,
           "model_shapes: a CausalLM has learned positions, the description says sinusoidal");
  ModelShapes out;
  Collector add(out);
  const std::int64_t vocab = d.vocabulary.size, d_model = c.d_model;
  const std::string from_vocab = "vocabulary.size", from_d = "encoder.d_model";

  // A module's own parameters come before its children's.
  if (d.kind == ModelKind::masked_lm) add.add("decoder_bias", {vocab}, from_vocab);

  // TokenEncoder ("body."; a CausalLM holds the same three parts itself): the token embedding,
  // the positions, the encoder.
  const std::string body = model_body_prefix(d.kind);
  add.add(body + "token_embedding.weight", {vocab, d_model}, from_vocab + ", " + from_d);
  if (d.positions == PositionEncoding::learned) {
    add.add(body + "positions.weight", {c.max_seq_len, d_model}, "encoder.max_seq_len, " + from_d);
  }

  // TransformerEncoder: each layer's attention (with its Linformer projections, shared as the
  // sharing mode says), feed-forward and two norms; the final norm of a pre-norm stack.
  const std::int64_t head_dim = d_model / c.heads;
  // Layerwise sharing: one projection for every layer, registered (hence in the state dict)
  // under the first layer whose attention takes it. When that attention is one's own, whether
  // it registers the projection is its own affair, and so are the later layers' entries.
  bool across_layers_seen = false, across_layers_own = false;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const LayerSpec spec = layer_spec(c, l);
    const std::string layer = body + "encoder.layers." + std::to_string(l) + ".";
    const bool builtin_attention = is_builtin_attention(spec.attention_module);
    if (builtin_attention) {
      for (const char* p : {"q_proj.", "k_proj.", "v_proj.", "out_proj."}) {
        add.linear(layer + "attention." + p, d_model, d_model, true, from_d, from_d);
      }
    } else {
      add.own(layer + "attention.");
    }
    if (spec.attention == AttentionKind::linformer) {
      const LinformerConfig& lin = spec.linformer;
      const std::string kind = canonical_projection_name(
          lin.projection_name.empty() ? projection_name(lin.projection) : lin.projection_name);
      const std::string lin_field = c.per_layer.empty()
                                        ? std::string("encoder.linformer")
                                        : "encoder.per_layer[" + std::to_string(l) + "].linformer";
      const std::string from_k = lin.k_per_layer.empty()
                                     ? lin_field + ".k"
                                     : lin_field + ".k_per_layer[" + std::to_string(l) + "]";
      const ProjectionSpec ps{.k = layer_k(lin, l),
                              .max_seq_len = c.max_seq_len,
                              .head_dim = head_dim,
                              .heads = lin.sharing == Sharing::none ? c.heads : 1};
      const std::string key = layer + "attention.key_projection.",
                        value = layer + "attention.value_projection.";
      bool registers_here = builtin_attention;
      if (lin.sharing == Sharing::layerwise) {
        if (!across_layers_seen) {
          across_layers_seen = true;
          across_layers_own = !builtin_attention;
        } else {
          registers_here = false;  // the earlier layer's entry is the only one
          if (across_layers_own && builtin_attention) {
            add.own(key);
            add.own(value);
          }
        }
      }
      if (registers_here) {
        if (!is_builtin_projection(kind)) {
          add.own(key);
          add.own(value);
        } else {
          projection(add, key, kind, ps, from_k);
          // Key-value and layerwise sharing: one object, registered twice, listed once.
          if (lin.sharing == Sharing::none || lin.sharing == Sharing::headwise) {
            projection(add, value, kind, ps, from_k);
          }
        }
      }
    }
    if (is_builtin_feed_forward(c.feed_forward)) {
      add.linear(layer + "feed_forward.fc1.", d_model, c.d_ff, true, from_d, "encoder.d_ff");
      add.linear(layer + "feed_forward.fc2.", c.d_ff, d_model, true, "encoder.d_ff", from_d);
    } else {
      add.own(layer + "feed_forward.");
    }
    for (const char* norm : {"norm1.", "norm2."}) {
      if (is_builtin_norm(c.norm)) {
        add.layer_norm(layer + norm, d_model);
      } else {
        add.own(layer + norm);
      }
    }
  }
  if (c.pre_norm) {
    if (is_builtin_norm(c.norm)) {
      add.layer_norm(body + "encoder.final_norm.", d_model);
    } else {
      add.own(body + "encoder.final_norm.");
    }
  }

  // The heads (a CausalLM's output is its token embedding).
  if (d.kind == ModelKind::masked_lm) {
    add.linear("dense.", d_model, d_model, true, from_d, from_d);
    add.layer_norm("norm.", d_model);
    if (!d.tie_weights) add.linear("decoder.", d_model, vocab, false, from_d, from_vocab);
  } else if (d.kind == ModelKind::sequence_classifier) {
    add.linear("classifier.", d_model, d.classes, true, from_d, "classes");
  }

  // Buffers come after every parameter.
  if (d.positions == PositionEncoding::sinusoidal) {
    add.add(body + "positions.table", {c.max_seq_len, d_model}, "encoder.max_seq_len, " + from_d);
  }
  return out;
}

}  // namespace tinyformer::nn
