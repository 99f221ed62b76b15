// Token embeddings and position encodings (learned and sinusoidal), and the scales the models
// start them at (InitConfig).
#pragma once

#include "nn/module.h"

namespace tinyformer::nn {

// How the models (nn/models.h, nn/causal_lm.h) start their embeddings. An initialisation choice,
// not architecture: a checkpoint's model description does not record it, and a loaded model
// takes the file's weights. docs/training.md ("Defaults") has the measurements behind the values.
struct InitConfig {
  // Token embeddings ~ N(0, token_std^2), as BERT and GPT-2 start them: N(0, 1) would swamp the
  // position encodings and make tied output logits huge.
  double token_std = 0.02;
  // Learned positions ~ N(0, position_std^2), the token scale: at 0.1 a classifier of balanced
  // brackets ends near 68% instead of 90-92% and ListOps fails to learn for one seed in three.
  double position_std = 0.02;

  // Byte-level language-model pretraining (train_mlm, train_causal_lm): positions at five times
  // the token scale, so that full attention tells positions apart before it learns to look at
  // neighbours; at 0.02 masked-LM pretraining sat near the unigram baseline for 1,500 to more than
  // 3,000 steps depending on the seed (docs/linformer.md, "Stable pretraining at this scale").
  static InitConfig language_model() { return {.position_std = 0.1}; }
};
// Throws an Error naming `op` for a std that is negative or not finite.
void validate(const InitConfig& init, const char* op);

// weight: [num_embeddings, dim] ~ N(0, 1) as in PyTorch. indices (int64, any shape S) ->
// S + [dim].
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t dim);
  Tensor forward(const Tensor& indices) const;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  Tensor weight;
};

// Adds a learned vector per position: x [B, n, d] -> x + P[:n]. P: [max_len, d] ~ N(0, std^2),
// std 0.02 unless given (InitConfig::position_std says when to give another).
class LearnedPositionalEncoding : public Module {
 public:
  LearnedPositionalEncoding(std::int64_t max_len, std::int64_t dim, double std = 0.02);
  Tensor forward(const Tensor& x) const;
  std::string type_name() const override { return "LearnedPositionalEncoding"; }

  Tensor weight;
};

// Adds the fixed encoding of "Attention Is All You Need": PE[p, 2i] = sin(p / 10000^(2i/d)),
// PE[p, 2i+1] = cos(p / 10000^(2i/d)). Kept as a buffer (no gradient).
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(std::int64_t max_len, std::int64_t dim);
  Tensor forward(const Tensor& x) const;
  std::string type_name() const override { return "SinusoidalPositionalEncoding"; }

  Tensor table;  // [max_len, dim]
};

}  // namespace tinyformer::nn
