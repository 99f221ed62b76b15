// Masked-LM corruption of token rows, deterministic per (seed, row) through counter-based draws.
#include "nn/data/mlm.h"

#include <memory>

#include "core/error.h"

namespace tinyformer::nn::data {

namespace {
void check_config(const MlmConfig& c, const char* op) {
  TF_CHECK(c.vocab_size > c.first_regular_id && c.first_regular_id >= 0, op,
           ": expected 0 <= first_regular_id < vocab_size, got first_regular_id ",
           c.first_regular_id, " and vocab_size ", c.vocab_size);
  TF_CHECK(c.mask_id >= 0 && c.mask_id < c.vocab_size, op, ": mask_id ", c.mask_id,
           " is outside the vocabulary [0, ", c.vocab_size, ")");
  TF_CHECK(c.mask_prob >= 0.0 && c.mask_prob <= 1.0, op, ": expected mask_prob in [0, 1], got ",
           c.mask_prob);
  TF_CHECK(
      c.replace_mask >= 0.0 && c.replace_random >= 0.0 && c.replace_mask + c.replace_random <= 1.0,
      op, ": expected replace_mask, replace_random >= 0 with a sum <= 1, got ", c.replace_mask,
      " and ", c.replace_random);
  TF_CHECK(c.ignore_index < 0 || c.ignore_index >= c.vocab_size, op, ": ignore_index ",
           c.ignore_index, " is a token id of the vocabulary; use one outside [0, ", c.vocab_size,
           ")");
}

// Turns a picked position into its corrupted token (80/10/10 by default).
std::int64_t corrupt(std::int64_t original, const MlmConfig& c, Rng& rng) {
  const double u = rng.uniform();
  if (u < c.replace_mask) return c.mask_id;
  if (u < c.replace_mask + c.replace_random) {
    return rng.uniform_int(c.first_regular_id, c.vocab_size - 1);
  }
  return original;
}

MlmBatch masked(const Tensor& tokens_in, const Tensor& padding_in,
                const std::vector<std::uint64_t>& row_seeds, const MlmConfig& config,
                const char* op) {
  TF_CHECK(tokens_in.defined() && tokens_in.dtype() == DType::int64 && tokens_in.dim() == 2, op,
           ": expected tokens of shape [B, n] and dtype int64");
  const std::int64_t rows = tokens_in.size(0), n = tokens_in.size(1);
  // Host copies: the caller's tensors stay untouched.
  std::vector<std::int64_t> tokens = tokens_in.to_vector<std::int64_t>();
  const auto count = static_cast<std::size_t>(rows * n);
  std::unique_ptr<bool[]> padding(new bool[count]());
  if (padding_in.defined()) {
    TF_CHECK(padding_in.dtype() == DType::boolean && padding_in.shape() == tokens_in.shape(), op,
             ": expected a bool padding mask of shape ", shape_str(tokens_in.shape()), ", got ",
             padding_in.dtype(), " ", shape_str(padding_in.shape()));
    const std::vector<bool> mask = padding_in.to_vector<bool>();
    for (std::size_t i = 0; i < count; ++i) padding[i] = mask[i];
  }
  std::vector<std::int64_t> labels(count);
  for (std::int64_t r = 0; r < rows; ++r) {
    Rng rng(row_seeds[static_cast<std::size_t>(r)]);
    mask_sequence(tokens.data() + r * n, labels.data() + r * n, padding.get() + r * n, n, config,
                  rng);
  }
  std::vector<bool> mask(padding.get(), padding.get() + count);
  return {from(tokens, {rows, n}), from(labels, {rows, n}), from(mask, {rows, n})};
}
}  // namespace

void mask_sequence(std::int64_t* tokens, std::int64_t* labels, const bool* padding, std::int64_t n,
                   const MlmConfig& config, Rng& rng) {
  check_config(config, "mask_sequence");
  TF_CHECK(tokens != nullptr && labels != nullptr && n >= 0,
           "mask_sequence: expected token and label buffers and a length >= 0");
  std::int64_t picked = 0, eligible = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t id = tokens[i];
    TF_CHECK(id >= 0 && id < config.vocab_size, "mask_sequence: token id ", id, " at position ", i,
             " is outside the vocabulary [0, ", config.vocab_size, ")");
    labels[i] = config.ignore_index;
    const bool regular = id >= config.first_regular_id && (padding == nullptr || !padding[i]);
    if (!regular) continue;
    ++eligible;
    if (!rng.bernoulli(config.mask_prob)) continue;
    ++picked;
    labels[i] = id;
    tokens[i] = corrupt(id, config, rng);
  }
  if (picked == 0 && eligible > 0 && config.at_least_one && config.mask_prob > 0.0) {
    std::int64_t target = rng.uniform_int(0, eligible - 1);
    for (std::int64_t i = 0; i < n; ++i) {
      const bool regular =
          tokens[i] >= config.first_regular_id && (padding == nullptr || !padding[i]);
      if (regular && target-- == 0) {
        labels[i] = tokens[i];
        tokens[i] = corrupt(tokens[i], config, rng);
        break;
      }
    }
  }
}

MlmBatch mask_tokens(const PaddedBatch& batch, const MlmConfig& config, std::uint64_t seed) {
  check_config(config, "mask_tokens");
  TF_CHECK(batch.tokens.defined() && batch.tokens.dim() == 2,
           "mask_tokens: expected tokens of shape [B, n]");
  std::vector<std::uint64_t> seeds(static_cast<std::size_t>(batch.tokens.size(0)));
  for (std::size_t r = 0; r < seeds.size(); ++r) seeds[r] = mix_seed(seed, r);
  return masked(batch.tokens, batch.padding_mask, seeds, config, "mask_tokens");
}

MlmBatch mlm_batch(const TokenChunks& data, const std::vector<std::int64_t>& indices,
                   const MlmConfig& config, std::uint64_t seed, std::int64_t epoch) {
  check_config(config, "mlm_batch");
  TF_CHECK(epoch >= 0, "mlm_batch: expected an epoch >= 0, got ", epoch);
  const std::uint64_t epoch_seed = mix_seed(seed, static_cast<std::uint64_t>(epoch));
  std::vector<std::uint64_t> seeds;
  seeds.reserve(indices.size());
  for (const std::int64_t i : indices)
    seeds.push_back(mix_seed(epoch_seed, static_cast<std::uint64_t>(i)));
  return masked(data.batch(indices), Tensor(), seeds, config, "mlm_batch");
}

}  // namespace tinyformer::nn::data
