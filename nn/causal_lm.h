// A GPT-style decoder: token embedding + learned positions + a stack of causal full-attention
// layers + final norm + output logits tied to the token embedding; next-token training and
// text generation (greedy, temperature, top-k).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/embedding.h"
#include "nn/encoder.h"

namespace tinyformer::nn {

// How generate picks each next token from the logits z of the last position.
struct SamplingOptions {
  // 0: greedy, the argmax of z (the first of tied maxima). Above 0: a draw from
  // softmax(z / temperature); below 1 sharpens the distribution, above 1 flattens it.
  double temperature = 1.0;
  // Above 0: draw among the top_k largest logits only (ties with the k-th kept); 0: all.
  std::int64_t top_k = 0;
  // Draws are counter-based (Philox): the same seed gives the same tokens.
  std::uint64_t seed = 0;
};

// tokens [B, n] int64 -> logits [B, n, vocab]; the logits at position i see tokens 0..i only,
// so they predict token i + 1. Every layer's attention must be full: Linformer's projected rows
// mix all positions, the future included (docs/linformer.md, section 6), and the constructor
// rejects it. A pre-norm stack (the default) ends with the encoder's final LayerNorm.
class CausalLM : public Module {
 public:
  // `init`: the embeddings' starting scales (InitConfig).
  CausalLM(const EncoderConfig& config, std::int64_t vocab_size, const InitConfig& init = {});
  Tensor forward(const Tensor& tokens);
  std::string type_name() const override { return "CausalLM"; }

  // Continues `prompt` by max_new_tokens tokens and returns the new tokens only. Runs without a
  // graph and in eval mode (no dropout), restoring the training mode afterwards. The context
  // the model sees is the last max_seq_len tokens. Throws an Error naming
  // "CausalLM::generate" for an empty prompt or one longer than max_seq_len, a token outside
  // the vocabulary, a negative max_new_tokens, a negative or non-finite temperature or a
  // top_k outside [0, vocab].
  std::vector<std::int64_t> generate(const std::vector<std::int64_t>& prompt,
                                     std::int64_t max_new_tokens,
                                     const SamplingOptions& sampling = {});

  const EncoderConfig& config() const { return encoder->config(); }
  std::int64_t vocab_size() const { return vocab_size_; }

  std::shared_ptr<Embedding> token_embedding;  // [vocab, d_model], also the output matrix
  std::shared_ptr<LearnedPositionalEncoding> positions;
  std::shared_ptr<TransformerEncoder> encoder;

 private:
  std::int64_t vocab_size_;
  double dropout_;
};

// The index of the next token drawn from `logits` ([vocab] values) under `sampling`, with
// `uniform` a number in [0, 1) (ignored when greedy). Exposed for tests and for callers that
// run the model themselves. Throws an Error naming "sample_token" for no logits, a NaN logit, a
// negative or non-finite temperature, a negative top_k or a draw outside [0, 1).
std::int64_t sample_token(const std::vector<double>& logits, const SamplingOptions& sampling,
                          double uniform);

}  // namespace tinyformer::nn
