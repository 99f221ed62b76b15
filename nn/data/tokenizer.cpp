// ByteTokenizer: text <-> token ids, one id per byte.
#include "nn/data/tokenizer.h"

#include "core/error.h"

namespace tinyformer::nn::data {

namespace {
constexpr const char* special_names[ByteTokenizer::num_special] = {"[PAD]", "[MASK]", "[CLS]",
                                                                   "[SEP]"};

void check_id(std::int64_t id, const char* op) {
  TF_CHECK(id >= 0 && id < ByteTokenizer::vocab_size, op, ": token id ", id,
           " is outside the byte vocabulary [0, ", ByteTokenizer::vocab_size, ")");
}
}  // namespace

std::vector<std::int64_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<std::int64_t> ids;
  ids.reserve(text.size());
  for (const char c : text) ids.push_back(byte_id(static_cast<unsigned char>(c)));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<std::int64_t>& ids) {
  std::string text;
  text.reserve(ids.size());
  for (const std::int64_t id : ids) {
    check_id(id, "ByteTokenizer::decode");
    if (is_special(id)) {
      text += special_names[id];
    } else {
      text += static_cast<char>(static_cast<unsigned char>(id - first_byte_id));
    }
  }
  return text;
}

std::string ByteTokenizer::token_string(std::int64_t id) {
  check_id(id, "ByteTokenizer::token_string");
  if (is_special(id)) return special_names[id];
  return std::string(1, static_cast<char>(static_cast<unsigned char>(id - first_byte_id)));
}

}  // namespace tinyformer::nn::data
