// A byte-level tokenizer: every byte of the text is one token, after four special tokens, so any
// file (UTF-8 or not) round-trips exactly and nothing is ever "unknown".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tinyformer::nn::data {

// Token ids:
//   0 [PAD]   padding; never attended to, never a masked-LM target
//   1 [MASK]  replaces a masked-LM target
//   2 [CLS]   first token of a sequence, its output feeds a classification head
//   3 [SEP]   separates documents or segments
//   4 + b     the byte b (0..255); vocab_size = 260
// Decoding renders the special tokens as their bracketed names ("[MASK]").
class ByteTokenizer {
 public:
  // The tokenizer's identity in a model's description (nn::Vocabulary::tokenizer).
  static constexpr const char* name = "byte";
  static constexpr std::int64_t pad_id = 0;
  static constexpr std::int64_t mask_id = 1;
  static constexpr std::int64_t cls_id = 2;
  static constexpr std::int64_t sep_id = 3;
  static constexpr std::int64_t num_special = 4;
  static constexpr std::int64_t first_byte_id = num_special;
  static constexpr std::int64_t vocab_size = num_special + 256;

  static std::int64_t byte_id(unsigned char byte) { return first_byte_id + byte; }
  static bool is_special(std::int64_t id) { return id >= 0 && id < num_special; }

  static std::vector<std::int64_t> encode(std::string_view text);
  // Throws an Error for an id outside [0, vocab_size).
  static std::string decode(const std::vector<std::int64_t>& ids);
  // One token as text: a special token's name, or the byte itself.
  static std::string token_string(std::int64_t id);
};

}  // namespace tinyformer::nn::data
