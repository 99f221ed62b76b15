// Token embeddings and position encodings (learned and sinusoidal).
#pragma once

#include "nn/module.h"

namespace tinyformer::nn {

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

// Adds a learned vector per position: x [B, n, d] -> x + P[:n]. P: [max_len, d] ~ N(0, std^2).
// The default std, 0.1, is five times the token embeddings' 0.02 (TokenEncoder): attention must
// tell positions apart before it can learn to look at neighbours, and with positions as small
// as the tokens byte-level masked-LM pretraining sat near the unigram baseline for 1,500 to
// more than 3,000 steps depending on the seed (docs/linformer.md, "Learning E").
class LearnedPositionalEncoding : public Module {
 public:
  LearnedPositionalEncoding(std::int64_t max_len, std::int64_t dim, double std = 0.1);
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
