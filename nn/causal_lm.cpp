// The causal language model and its sampling loop.
#include "nn/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/random.h"
#include "nn/init.h"

namespace tinyformer::nn {

CausalLM::CausalLM(const EncoderConfig& config, std::int64_t vocab_size, const InitConfig& start)
    : vocab_size_(vocab_size), dropout_(config.dropout) {
  TF_CHECK(vocab_size > 0, "CausalLM: expected a positive vocabulary size, got ", vocab_size);
  validate(config);
  validate(start, "CausalLM");
  for (std::int64_t l = 0; l < config.layers; ++l) {
    TF_CHECK(layer_spec(config, l).attention == AttentionKind::full, "CausalLM: layer ", l,
             " asks for Linformer attention, which cannot be causal: each projected row mixes "
             "all n positions, so every query would see the future. Use AttentionKind::full");
  }
  token_embedding =
      register_module("token_embedding", std::make_shared<Embedding>(vocab_size, config.d_model));
  // Small (InitConfig's 0.02, as GPT-2 and BERT start token embeddings): the tied output logits
  // then start near 0, a loss near log(vocab).
  init::normal_(token_embedding->weight, 0.0, start.token_std);
  positions =
      register_module("positions", std::make_shared<LearnedPositionalEncoding>(
                                       config.max_seq_len, config.d_model, start.position_std));
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(config));
}

Tensor CausalLM::forward(const Tensor& tokens) {
  TF_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.dtype() == DType::int64,
           "CausalLM: expected int64 tokens [B, n], got ",
           tokens.defined() ? shape_str(tokens.shape()) + " " + dtype_name(tokens.dtype())
                            : std::string("an undefined Tensor"));
  TF_CHECK(tokens.size(1) >= 1 && tokens.size(1) <= config().max_seq_len,
           "CausalLM: the sequence has ", tokens.size(1),
           " tokens, expected 1 to max_seq_len = ", config().max_seq_len);
  Tensor h = positions->forward(token_embedding->forward(tokens));  // [B, n, d_model]
  h = encoder->forward(dropout(h, dropout_, is_training()), {}, /*causal=*/true);
  // Tied output: logits = h E^T with the token embedding E [vocab, d_model].
  return matmul(h, token_embedding->weight.transpose(0, 1));  // [B, n, vocab]
}

std::int64_t sample_token(const std::vector<double>& logits, const SamplingOptions& sampling,
                          double uniform) {
  const char* op = "sample_token";
  TF_CHECK(!logits.empty(), op, ": expected at least one logit");
  TF_CHECK(std::isfinite(sampling.temperature) && sampling.temperature >= 0, op,
           ": expected a finite temperature >= 0 (0: greedy), got ", sampling.temperature);
  TF_CHECK(sampling.top_k >= 0, op, ": expected top_k >= 0 (0: all tokens), got ", sampling.top_k);
  TF_CHECK(uniform >= 0 && uniform < 1, op, ": expected a uniform draw in [0, 1), got ", uniform);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    TF_CHECK(!std::isnan(logits[i]), op, ": logit ", i, " is NaN (has the model diverged?)");
  }
  const auto first_max = std::max_element(logits.begin(), logits.end());
  if (sampling.temperature == 0) return first_max - logits.begin();
  // Top-k: the k-th largest logit is the threshold; everything at or above it stays.
  double threshold = -INFINITY;
  const std::int64_t vocab = static_cast<std::int64_t>(logits.size());
  if (sampling.top_k > 0 && sampling.top_k < vocab) {
    std::vector<double> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (sampling.top_k - 1), sorted.end(),
                     std::greater<double>());
    threshold = sorted[static_cast<std::size_t>(sampling.top_k - 1)];
  }
  // softmax(z / T) over the kept logits, in double, shifted by the max so exp never overflows.
  std::vector<double> weights(logits.size(), 0.0);
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] < threshold) continue;
    weights[i] = std::exp((logits[i] - *first_max) / sampling.temperature);
    total += weights[i];
  }
  // Inverse CDF: the first token whose cumulative weight exceeds uniform * total. A draw that
  // rounding carries past the last kept token takes the most likely one.
  double running = 0;
  const double target = uniform * total;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    running += weights[i];
    if (weights[i] > 0 && running > target) return static_cast<std::int64_t>(i);
  }
  return first_max - logits.begin();
}

std::vector<std::int64_t> CausalLM::generate(const std::vector<std::int64_t>& prompt,
                                             std::int64_t max_new_tokens,
                                             const SamplingOptions& sampling) {
  const char* op = "CausalLM::generate";
  const std::int64_t max_len = config().max_seq_len;
  const auto length = static_cast<std::int64_t>(prompt.size());
  TF_CHECK(length >= 1, op, ": expected a prompt of at least one token");
  TF_CHECK(length <= max_len, op, ": the prompt has ", length,
           " tokens, more than the model's max_seq_len = ", max_len);
  for (std::int64_t id : prompt) {
    TF_CHECK(id >= 0 && id < vocab_size_, op, ": prompt token ", id, " is outside [0, ",
             vocab_size_, ")");
  }
  TF_CHECK(max_new_tokens >= 0, op, ": expected max_new_tokens >= 0, got ", max_new_tokens);
  TF_CHECK(std::isfinite(sampling.temperature) && sampling.temperature >= 0, op,
           ": expected a finite temperature >= 0 (0: greedy), got ", sampling.temperature);
  TF_CHECK(sampling.top_k >= 0 && sampling.top_k <= vocab_size_, op, ": expected top_k in [0, ",
           vocab_size_, "] (0: all tokens), got ", sampling.top_k);

  // Eval mode for the loop, and the caller's mode back afterwards, even after an exception.
  struct ModeGuard {
    Module& m;
    bool was_training;
    ~ModeGuard() { m.train(was_training); }
  } mode_guard{*this, is_training()};
  eval();
  NoGradGuard no_grad;
  const Device device = token_embedding->weight.device();
  std::vector<std::int64_t> context = prompt;
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(max_new_tokens));
  for (std::int64_t t = 0; t < max_new_tokens; ++t) {
    // The whole context again at each step (no key-value cache): simple, and cheap at the
    // lengths this model is meant for.
    const auto n = static_cast<std::int64_t>(context.size());
    const Tensor tokens = from<std::int64_t>(context, {1, n}, device);
    const Tensor last = forward(tokens).select(1, n - 1).reshape({vocab_size_});  // [vocab]
    // One Philox counter per step: the draw of step t depends on (seed, t) only.
    std::uint32_t words[4];
    Philox::generate(sampling.seed, static_cast<std::uint64_t>(t), words);
    const std::int64_t next =
        sample_token(last.to_vector<double>(), sampling, Philox::to_unit(words[0], words[1]));
    out.push_back(next);
    context.push_back(next);
    if (static_cast<std::int64_t>(context.size()) > max_len) context.erase(context.begin());
  }
  return out;
}

}  // namespace tinyformer::nn
