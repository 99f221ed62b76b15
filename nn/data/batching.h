// Turning token sequences into model inputs: padding variable-length sequences into one
// [B, L] batch with its padding mask, and cutting a long token stream into fixed-length examples.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tinyformer::nn::data {

struct PaddedBatch {
  Tensor tokens;        // [B, L] int64
  Tensor padding_mask;  // [B, L] bool, true where a position is padding (the attention key mask)
};

struct PadOptions {
  std::int64_t pad_id = 0;
  // Pad every sequence to this length; 0 pads to the longest sequence of the batch.
  std::int64_t length = 0;
  // A sequence longer than `length` is an error unless truncate is set (then its tail is cut).
  bool truncate = false;
};

// A batch for sequence classification: padded tokens, their padding mask, a label per sequence.
struct ClassifierBatch {
  Tensor tokens;        // [B, L] int64
  Tensor padding_mask;  // [B, L] bool, true = padding
  Tensor labels;        // [B] int64, class indices
};

// Right-pads each sequence with pad_id. Sequences may be empty but the batch may not.
PaddedBatch pad_batch(const std::vector<std::vector<std::int64_t>>& sequences,
                      const PadOptions& options = {});

// A token stream cut into consecutive, non-overlapping examples of `seq_len` tokens. With a CLS
// id (>= 0) each example is that token followed by seq_len - 1 tokens of the stream. The tail
// too short for a whole example is left out. The stream is shared, not copied, between copies.
class TokenChunks {
 public:
  TokenChunks(std::vector<std::int64_t> stream, std::int64_t seq_len, std::int64_t cls_id = -1);

  std::int64_t size() const { return size_; }
  std::int64_t seq_len() const { return seq_len_; }
  // Example i: seq_len tokens.
  std::vector<std::int64_t> example(std::int64_t i) const;
  // Writes example i to out[0 .. seq_len).
  void copy_example(std::int64_t i, std::int64_t* out) const;
  // The examples at `indices`, stacked: [indices.size(), seq_len] int64.
  Tensor batch(const std::vector<std::int64_t>& indices) const;

 private:
  std::shared_ptr<const std::vector<std::int64_t>> stream_;
  std::int64_t seq_len_;
  std::int64_t cls_id_;
  std::int64_t size_;
};

}  // namespace tinyformer::nn::data
