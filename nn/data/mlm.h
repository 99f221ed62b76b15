// Masked language modelling inputs (BERT's recipe, used by the Linformer paper's pretraining):
// pick ~15% of the regular tokens; of those, 80% become [MASK], 10% a random token, 10% stay;
// the labels hold the original token at the picked positions and ignore_index elsewhere.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/data/batching.h"
#include "nn/data/data_rng.h"
#include "nn/data/tokenizer.h"

namespace tinyformer::nn::data {

// The defaults fit ByteTokenizer; another vocabulary sets its own ids.
struct MlmConfig {
  std::int64_t mask_id = ByteTokenizer::mask_id;
  std::int64_t pad_id = ByteTokenizer::pad_id;
  // Ids below this are special ([PAD], [CLS], ...): never picked, never drawn as a replacement.
  std::int64_t first_regular_id = ByteTokenizer::first_byte_id;
  // Random replacements are drawn uniformly from [first_regular_id, vocab_size).
  std::int64_t vocab_size = ByteTokenizer::vocab_size;
  double mask_prob = 0.15;    // each regular position is picked independently with this probability
  double replace_mask = 0.8;  // of the picked: share turned into mask_id
  double replace_random = 0.1;  // of the picked: share given a random token (the rest stays)
  std::int64_t ignore_index = -100;
  // A row where no position was picked gets one picked at random (when it has a regular token),
  // so that no sequence contributes nothing; this raises the rate noticeably only for short rows.
  bool at_least_one = true;
};

struct MlmBatch {
  Tensor tokens;        // [B, n] int64, the corrupted input
  Tensor labels;        // [B, n] int64, the original token where picked, ignore_index elsewhere
  Tensor padding_mask;  // [B, n] bool, true = padding
};

// Corrupts one row in place and writes its labels (both of length n); positions where `padding`
// (may be null) is true are never picked. Throws for ids outside [0, vocab_size).
void mask_sequence(std::int64_t* tokens, std::int64_t* labels, const bool* padding, std::int64_t n,
                   const MlmConfig& config, Rng& rng);

// Masks a padded batch; row r draws from Rng(mix_seed(seed, r)).
MlmBatch mask_tokens(const PaddedBatch& batch, const MlmConfig& config, std::uint64_t seed);

// The masked-LM batch of examples `indices` of `data` in `epoch`. Example i is masked with
// Rng(mix_seed(mix_seed(seed, epoch), i)): a fresh mask every epoch (dynamic masking), and the
// same one whenever the same (seed, epoch, example) comes round again, e.g. after a resume.
MlmBatch mlm_batch(const TokenChunks& data, const std::vector<std::int64_t>& indices,
                   const MlmConfig& config, std::uint64_t seed, std::int64_t epoch);

}  // namespace tinyformer::nn::data
