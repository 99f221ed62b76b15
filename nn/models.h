// Ready models built from an EncoderConfig: masked-language modelling and sequence
// classification.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/embedding.h"
#include "nn/encoder.h"

namespace tinyformer::nn {

enum class PositionEncoding { learned, sinusoidal };

// Token embedding + position encoding + dropout + encoder: tokens [B, n] -> [B, n, d_model].
// `init` sets the embeddings' starting scales here and in every model below.
// key_padding_mask: [B, n] bool, true at padding (excluded as keys, and from mean pooling), or
// undefined; the same in every model below.
class TokenEncoder : public Module {
 public:
  TokenEncoder(const EncoderConfig& config, std::int64_t vocab_size,
               PositionEncoding positions = PositionEncoding::learned, const InitConfig& init = {});
  Tensor forward(const Tensor& tokens, const Tensor& key_padding_mask = {});
  std::string type_name() const override { return "TokenEncoder"; }
  std::int64_t vocab_size() const { return vocab_size_; }

  std::shared_ptr<Embedding> token_embedding;
  std::shared_ptr<LearnedPositionalEncoding> learned_positions;  // or
  std::shared_ptr<SinusoidalPositionalEncoding> sinusoidal_positions;
  std::shared_ptr<TransformerEncoder> encoder;

 private:
  std::int64_t vocab_size_;
  double dropout_;
};

// Masked-LM: TokenEncoder, then dense + GELU + LayerNorm, then logits over the vocabulary
// through the token embedding's matrix (tied, the default) or a Linear of its own.
// tokens [B, n] -> logits [B, n, vocab].
class MaskedLM : public Module {
 public:
  MaskedLM(const EncoderConfig& config, std::int64_t vocab_size, bool tie_weights = true,
           PositionEncoding positions = PositionEncoding::learned, const InitConfig& init = {});
  Tensor forward(const Tensor& tokens, const Tensor& key_padding_mask = {});
  std::string type_name() const override { return "MaskedLM"; }

  std::shared_ptr<TokenEncoder> body;
  std::shared_ptr<Linear> dense;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> decoder;  // null when tied
  Tensor decoder_bias;              // [vocab]
};

enum class Pooling { cls, mean };

// The mean over each sequence's real positions: h [B, n, d] -> [B, d]; key_padding_mask [B, n]
// bool, true at padding (those rows are left out), or undefined (the plain mean over n).
Tensor masked_mean(const Tensor& h, const Tensor& key_padding_mask);

// A classification head of one's own: pooling and the map to logits in one module.
// h: the encoder's output [B, n, d_model]; key_padding_mask: [B, n] bool, true at padding, or
// undefined; returns logits [B, classes].
class ClassifierHead : public Module {
 public:
  virtual Tensor forward(const Tensor& h, const Tensor& key_padding_mask) = 0;
};

// Classification: TokenEncoder, pooled (the first position, or the mean over real positions),
// then Linear to classes; or TokenEncoder, then a ClassifierHead of one's own.
// tokens [B, n] -> logits [B, classes].
class SequenceClassifier : public Module {
 public:
  SequenceClassifier(const EncoderConfig& config, std::int64_t vocab_size, std::int64_t classes,
                     Pooling pooling = Pooling::mean,
                     PositionEncoding positions = PositionEncoding::learned,
                     const InitConfig& init = {});
  // A custom head, registered as "head" (classifier stays null).
  SequenceClassifier(const EncoderConfig& config, std::int64_t vocab_size,
                     std::shared_ptr<ClassifierHead> head,
                     PositionEncoding positions = PositionEncoding::learned,
                     const InitConfig& init = {});
  Tensor forward(const Tensor& tokens, const Tensor& key_padding_mask = {});
  std::string type_name() const override { return "SequenceClassifier"; }

  std::shared_ptr<TokenEncoder> body;
  std::shared_ptr<Linear> classifier;    // the built-in head's Linear; null with a custom head
  std::shared_ptr<ClassifierHead> head;  // the custom head; null with the built-in one

 private:
  Pooling pooling_ = Pooling::mean;
};

// Everything that builds one of the models above: what a checkpoint records about its model
// (nn/io/model_file.h), so that another program rebuilds it with one call.
// The model classes a description names: MaskedLM, SequenceClassifier and CausalLM
// (nn/causal_lm.h).
enum class ModelKind { masked_lm, sequence_classifier, causal_lm };
const char* model_kind_name(ModelKind kind);  // "MaskedLM", "SequenceClassifier", "CausalLM"
// Where a kind's token embedding, positions and encoder sit in its state dict: "body." (the
// TokenEncoder of MaskedLM and SequenceClassifier) or "" (a CausalLM holds them itself).
const char* model_body_prefix(ModelKind kind);

// The vocabulary the model's token ids index: its size and the tokenizer that produced the ids,
// by name ("byte" for data::ByteTokenizer, "listops" for data::ListOpsVocab; a program's own
// tokenizer names itself; empty when unknown).
struct Vocabulary {
  std::int64_t size = 0;
  std::string tokenizer = "";
};

struct ModelDescription {
  ModelKind kind = ModelKind::masked_lm;
  EncoderConfig encoder = {};
  Vocabulary vocabulary = {};
  PositionEncoding positions = PositionEncoding::learned;
  bool tie_weights = true;          // MaskedLM only (a CausalLM's output is always tied)
  std::int64_t classes = 0;         // SequenceClassifier only
  Pooling pooling = Pooling::mean;  // SequenceClassifier only
};

// One line for people: "MaskedLM over the \"byte\" vocabulary (260 tokens), learned positions,
// tied output; 2 layers, d_model 64, 4 heads, d_ff 256, Linformer k=32 (mean projection)".
std::string describe(const ModelDescription& description);
// The encoder part of that line: "2 layers, d_model 64, 4 heads, d_ff 256, full attention";
// Linformer with its k (one per layer when they differ), projection kind and, for the learned
// linear kind, its sharing and recipe; layers that differ are listed one by one.
std::string describe(const EncoderConfig& config);

// The model `description` describes, freshly initialised as `init` says (from the default
// generator, as the constructors above do). Throws an Error for an invalid description.
std::shared_ptr<Module> make_model(const ModelDescription& description,
                                   const InitConfig& init = {});
// The same as its concrete type, e.g. make_model<MaskedLM>(description); an Error when the
// description is of another kind.
template <typename Model>
std::shared_ptr<Model> make_model(const ModelDescription& description,
                                  const InitConfig& init = {}) {
  auto model = std::dynamic_pointer_cast<Model>(make_model(description, init));
  TF_CHECK(model != nullptr, "make_model: the description is of a ",
           model_kind_name(description.kind), ", not of the type asked for");
  return model;
}

}  // namespace tinyformer::nn
