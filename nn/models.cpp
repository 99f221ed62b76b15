// Masked-LM and sequence-classification models.
#include "nn/models.h"

#include <cmath>
#include <cstdio>

#include "autograd/ops.h"
#include "nn/causal_lm.h"
#include "nn/init.h"

namespace tinyformer::nn {

TokenEncoder::TokenEncoder(const EncoderConfig& config, std::int64_t vocab_size,
                           PositionEncoding positions, const InitConfig& start)
    : vocab_size_(vocab_size), dropout_(config.dropout) {
  TF_CHECK(vocab_size > 0, "TokenEncoder: expected a positive vocabulary size, got ", vocab_size);
  validate(start, "TokenEncoder");
  token_embedding =
      register_module("token_embedding", std::make_shared<Embedding>(vocab_size, config.d_model));
  init::normal_(token_embedding->weight, 0.0, start.token_std);
  if (positions == PositionEncoding::learned) {
    learned_positions =
        register_module("positions", std::make_shared<LearnedPositionalEncoding>(
                                         config.max_seq_len, config.d_model, start.position_std));
  } else {
    sinusoidal_positions = register_module(
        "positions",
        std::make_shared<SinusoidalPositionalEncoding>(config.max_seq_len, config.d_model));
  }
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(config));
}

Tensor TokenEncoder::forward(const Tensor& tokens, const Tensor& key_padding_mask) {
  TF_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.dtype() == DType::int64,
           "TokenEncoder: expected int64 tokens [B, n], got ",
           tokens.defined() ? shape_str(tokens.shape()) + " " + dtype_name(tokens.dtype())
                            : std::string("an undefined Tensor"));
  TF_CHECK(tokens.size(1) <= encoder->config().max_seq_len, "TokenEncoder: the sequence has ",
           tokens.size(1), " tokens, the model's max_seq_len is ", encoder->config().max_seq_len);
  Tensor h = token_embedding->forward(tokens);
  h = learned_positions ? learned_positions->forward(h) : sinusoidal_positions->forward(h);
  return encoder->forward(dropout(h, dropout_, is_training()), key_padding_mask);
}

MaskedLM::MaskedLM(const EncoderConfig& config, std::int64_t vocab_size, bool tie_weights,
                   PositionEncoding positions, const InitConfig& init) {
  body =
      register_module("body", std::make_shared<TokenEncoder>(config, vocab_size, positions, init));
  dense = register_module("dense", std::make_shared<Linear>(config.d_model, config.d_model));
  norm = register_module("norm", std::make_shared<LayerNorm>(config.d_model));
  if (!tie_weights) {
    decoder =
        register_module("decoder", std::make_shared<Linear>(config.d_model, vocab_size, false));
  }
  decoder_bias = register_parameter("decoder_bias", zeros({vocab_size}));
}

Tensor MaskedLM::forward(const Tensor& tokens, const Tensor& key_padding_mask) {
  Tensor h = norm->forward(gelu(dense->forward(body->forward(tokens, key_padding_mask))));
  // Tied: logits = h E^T with the token embedding E [vocab, d_model].
  Tensor logits =
      decoder ? decoder->forward(h) : matmul(h, body->token_embedding->weight.transpose(0, 1));
  return add(logits, decoder_bias);
}

SequenceClassifier::SequenceClassifier(const EncoderConfig& config, std::int64_t vocab_size,
                                       std::int64_t classes, Pooling pooling,
                                       PositionEncoding positions, const InitConfig& init)
    : pooling_(pooling) {
  TF_CHECK(classes > 1, "SequenceClassifier: expected at least 2 classes, got ", classes);
  body =
      register_module("body", std::make_shared<TokenEncoder>(config, vocab_size, positions, init));
  classifier = register_module("classifier", std::make_shared<Linear>(config.d_model, classes));
}

SequenceClassifier::SequenceClassifier(const EncoderConfig& config, std::int64_t vocab_size,
                                       std::shared_ptr<ClassifierHead> custom_head,
                                       PositionEncoding positions, const InitConfig& init) {
  TF_CHECK(custom_head != nullptr, "SequenceClassifier: expected a head, got null");
  body =
      register_module("body", std::make_shared<TokenEncoder>(config, vocab_size, positions, init));
  head = register_module("head", std::move(custom_head));
}

Tensor masked_mean(const Tensor& h, const Tensor& key_padding_mask) {
  TF_CHECK(h.defined() && h.dim() == 3, "masked_mean: expected h [B, n, d], got ",
           h.defined() ? shape_str(h.shape()) : std::string("an undefined Tensor"));
  if (!key_padding_mask.defined()) return mean(h, {1});
  TF_CHECK(key_padding_mask.dtype() == DType::boolean && key_padding_mask.dim() == 2 &&
               key_padding_mask.size(0) == h.size(0) && key_padding_mask.size(1) == h.size(1),
           "masked_mean: expected a bool key_padding_mask [", h.size(0), ", ", h.size(1), "], got ",
           shape_str(key_padding_mask.shape()), " ", dtype_name(key_padding_mask.dtype()));
  // The mean over real positions: padded rows are zeroed and not counted.
  Tensor real =
      eq(key_padding_mask, scalar_tensor(0.0, {.dtype = DType::boolean, .device = h.device()}))
          .to(h.dtype())
          .unsqueeze(2);  // [B, n, 1]
  return div(sum(mul(h, real), {1}),
             maximum(sum(real, {1}), ones({1}, {.dtype = h.dtype(), .device = h.device()})));
}

Tensor SequenceClassifier::forward(const Tensor& tokens, const Tensor& key_padding_mask) {
  Tensor h = body->forward(tokens, key_padding_mask);  // [B, n, d]
  if (head) return head->forward(h, key_padding_mask);
  Tensor pooled = pooling_ == Pooling::cls ? h.select(1, 0) : masked_mean(h, key_padding_mask);
  return classifier->forward(pooled);
}

const char* model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::masked_lm:
      return "MaskedLM";
    case ModelKind::sequence_classifier:
      return "SequenceClassifier";
    case ModelKind::causal_lm:
      return "CausalLM";
  }
  return "unknown";
}

const char* model_body_prefix(ModelKind kind) {
  return kind == ModelKind::causal_lm ? "" : "body.";
}

namespace {

std::string attention_text(AttentionKind attention, const LinformerConfig& lin) {
  if (attention == AttentionKind::full) return "full attention";
  std::string ks;
  if (lin.k_per_layer.empty()) {
    ks = std::to_string(lin.k);
  } else {
    for (std::int64_t k : lin.k_per_layer) {
      if (!ks.empty()) ks += ',';
      ks += std::to_string(k);
    }
  }
  const std::string kind =
      lin.projection_name.empty() ? projection_name(lin.projection) : lin.projection_name;
  std::string text = "Linformer k=" + ks + " (" + kind + " projection";
  // Sharing and the recipe apply to the learned matrices E and F of the linear kind only.
  if (kind == "linear") {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", lin.projection_lr_scale);
    text += std::string(", ") + sharing_name(lin.sharing) + " sharing, " +
            projection_init_name(lin.projection_init) + " start, lr x" + scale;
  }
  return text + ")";
}

}  // namespace

std::string describe(const EncoderConfig& c) {
  std::string text = std::to_string(c.layers) + (c.layers == 1 ? " layer" : " layers") +
                     ", d_model " + std::to_string(c.d_model) + ", " + std::to_string(c.heads) +
                     " heads, d_ff " + std::to_string(c.d_ff) + ", ";
  if (c.per_layer.empty()) return text + attention_text(c.attention, c.linformer);
  text += "per layer:";
  for (std::size_t l = 0; l < c.per_layer.size(); ++l) {
    text +=
        (l == 0 ? " " : "; ") + attention_text(c.per_layer[l].attention, c.per_layer[l].linformer);
  }
  return text;
}

std::string describe(const ModelDescription& d) {
  std::string text = model_kind_name(d.kind);
  if (d.kind == ModelKind::sequence_classifier) {
    text += " (";
    text += std::to_string(d.classes);
    text += d.pooling == Pooling::cls ? " classes, cls pooling)" : " classes, mean pooling)";
  }
  if (d.vocabulary.tokenizer.empty()) {
    text += " over an unnamed vocabulary (";
  } else {
    text += " over the \"";
    text += d.vocabulary.tokenizer;
    text += "\" vocabulary (";
  }
  text += std::to_string(d.vocabulary.size);
  text += d.positions == PositionEncoding::learned ? " tokens), learned positions"
                                                   : " tokens), sinusoidal positions";
  if (d.kind == ModelKind::masked_lm) text += d.tie_weights ? ", tied output" : ", untied output";
  if (d.kind == ModelKind::causal_lm) text += ", causal, tied output";
  text += "; ";
  text += describe(d.encoder);
  return text;
}

std::shared_ptr<Module> make_model(const ModelDescription& d, const InitConfig& init) {
  validate(d.encoder);
  TF_CHECK(d.vocabulary.size > 0, "make_model: expected a positive vocabulary size, got ",
           d.vocabulary.size);
  switch (d.kind) {
    case ModelKind::masked_lm:
      return std::make_shared<MaskedLM>(d.encoder, d.vocabulary.size, d.tie_weights, d.positions,
                                        init);
    case ModelKind::sequence_classifier:
      return std::make_shared<SequenceClassifier>(d.encoder, d.vocabulary.size, d.classes,
                                                  d.pooling, d.positions, init);
    case ModelKind::causal_lm:
      TF_CHECK(d.positions == PositionEncoding::learned,
               "make_model: a CausalLM has learned positions, the description says sinusoidal");
      return std::make_shared<CausalLM>(d.encoder, d.vocabulary.size, init);
  }
  fail("make_model: unknown model kind ", static_cast<int>(d.kind));
}

}  // namespace tinyformer::nn
