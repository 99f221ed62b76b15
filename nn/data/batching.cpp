// pad_batch and TokenChunks: sequences of token ids to [B, L] tensors.
#include "nn/data/batching.h"

#include <algorithm>

#include "core/checked.h"
#include "core/error.h"

namespace tinyformer::nn::data {

PaddedBatch pad_batch(const std::vector<std::vector<std::int64_t>>& sequences,
                      const PadOptions& options) {
  TF_CHECK(!sequences.empty(), "pad_batch: expected at least one sequence, got none");
  TF_CHECK(options.length >= 0, "pad_batch: expected a length >= 0 (0 = longest), got ",
           options.length);
  std::int64_t longest = 0;
  for (const auto& s : sequences) longest = std::max(longest, static_cast<std::int64_t>(s.size()));
  const std::int64_t length = options.length > 0 ? options.length : longest;
  TF_CHECK(length > 0, "pad_batch: every sequence is empty, so the batch would have length 0");

  const auto batch = static_cast<std::int64_t>(sequences.size());
  // The tokens are gathered in a host vector first, so their size is checked before it is.
  storage_bytes({batch, length}, DType::int64, "pad_batch");
  std::vector<std::int64_t> tokens(static_cast<std::size_t>(batch * length), options.pad_id);
  std::vector<bool> mask(static_cast<std::size_t>(batch * length), true);
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& s = sequences[static_cast<std::size_t>(b)];
    const auto size = static_cast<std::int64_t>(s.size());
    TF_CHECK(size <= length || options.truncate, "pad_batch: sequence ", b, " has ", size,
             " tokens, more than the length ", length, "; set truncate or raise the length");
    const std::int64_t kept = std::min(size, length);
    for (std::int64_t t = 0; t < kept; ++t) {
      tokens[static_cast<std::size_t>(b * length + t)] = s[static_cast<std::size_t>(t)];
      mask[static_cast<std::size_t>(b * length + t)] = false;
    }
  }
  return {from(tokens, {batch, length}), from(mask, {batch, length})};
}

TokenChunks::TokenChunks(std::vector<std::int64_t> stream, std::int64_t seq_len,
                         std::int64_t cls_id)
    : seq_len_(seq_len), cls_id_(cls_id) {
  const std::int64_t body = cls_id >= 0 ? seq_len - 1 : seq_len;
  TF_CHECK(body >= 1, "TokenChunks: expected seq_len >= ", cls_id >= 0 ? 2 : 1,
           (cls_id >= 0 ? " (one CLS token plus at least one stream token)" : ""), ", got ",
           seq_len);
  size_ = static_cast<std::int64_t>(stream.size()) / body;
  TF_CHECK(size_ >= 1, "TokenChunks: a stream of ", stream.size(),
           " tokens is too short for one example of ", body,
           " stream tokens; use a longer text or a shorter seq_len");
  stream_ = std::make_shared<const std::vector<std::int64_t>>(std::move(stream));
}

void TokenChunks::copy_example(std::int64_t i, std::int64_t* out) const {
  TF_CHECK(i >= 0 && i < size_, "TokenChunks: example index ", i, " is outside [0, ", size_, ")");
  const std::int64_t body = cls_id_ >= 0 ? seq_len_ - 1 : seq_len_;
  if (cls_id_ >= 0) *out++ = cls_id_;
  const auto begin = stream_->begin() + i * body;
  std::copy(begin, begin + body, out);
}

std::vector<std::int64_t> TokenChunks::example(std::int64_t i) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(seq_len_));
  copy_example(i, out.data());
  return out;
}

Tensor TokenChunks::batch(const std::vector<std::int64_t>& indices) const {
  TF_CHECK(!indices.empty(), "TokenChunks::batch: expected at least one index, got none");
  const auto rows = static_cast<std::int64_t>(indices.size());
  std::vector<std::int64_t> tokens(static_cast<std::size_t>(rows * seq_len_));
  for (std::int64_t r = 0; r < rows; ++r) {
    copy_example(indices[static_cast<std::size_t>(r)], tokens.data() + r * seq_len_);
  }
  return from(tokens, {rows, seq_len_});
}

}  // namespace tinyformer::nn::data
