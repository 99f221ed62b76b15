// Masked-LM and sequence-classification models.
#include "nn/models.h"

#include <cmath>

#include "autograd/ops.h"
#include "nn/init.h"

namespace tinyformer::nn {

TokenEncoder::TokenEncoder(const EncoderConfig& config, std::int64_t vocab_size,
                           PositionEncoding positions)
    : vocab_size_(vocab_size), dropout_(config.dropout) {
  TF_CHECK(vocab_size > 0, "TokenEncoder: expected a positive vocabulary size, got ", vocab_size);
  token_embedding =
      register_module("token_embedding", std::make_shared<Embedding>(vocab_size, config.d_model));
  // N(0, 0.02^2) as BERT and RoBERTa initialise token embeddings: N(0, 1) would swamp the
  // position encodings and make tied output logits huge.
  init::normal_(token_embedding->weight, 0.0, 0.02);
  if (positions == PositionEncoding::learned) {
    learned_positions = register_module("positions", std::make_shared<LearnedPositionalEncoding>(
                                                         config.max_seq_len, config.d_model));
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
                   PositionEncoding positions) {
  body = register_module("body", std::make_shared<TokenEncoder>(config, vocab_size, positions));
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
                                       PositionEncoding positions)
    : pooling_(pooling) {
  TF_CHECK(classes > 1, "SequenceClassifier: expected at least 2 classes, got ", classes);
  body = register_module("body", std::make_shared<TokenEncoder>(config, vocab_size, positions));
  classifier = register_module("classifier", std::make_shared<Linear>(config.d_model, classes));
}

SequenceClassifier::SequenceClassifier(const EncoderConfig& config, std::int64_t vocab_size,
                                       std::shared_ptr<ClassifierHead> custom_head,
                                       PositionEncoding positions) {
  TF_CHECK(custom_head != nullptr, "SequenceClassifier: expected a head, got null");
  body = register_module("body", std::make_shared<TokenEncoder>(config, vocab_size, positions));
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

}  // namespace tinyformer::nn
