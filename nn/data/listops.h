// ListOps (Long Range Arena; docs/linformer.md section 7): random nested expressions of MIN, MAX,
// MED and SM over digits, e.g. "[MAX 2 9 [MIN 4 7 ] 0 ]" = 9, classified into their value 0-9.
// Generated offline with a seed, evaluated, batched; file reading and writing is in
// listops_file.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "nn/data/batching.h"

namespace tinyformer::nn::data {

// Token ids of the ListOps vocabulary (vocab_size 17):
//   0 [PAD]   1 [CLS]   2..11 the digits 0..9   12 "[MIN"   13 "[MAX"   14 "[MED"   15 "[SM"
//   16 "]" (closes the innermost open operator)
// Unlike LRA's input pipeline, whose tokenizer keeps only alphanumeric runs and so never shows
// its models the brackets, "]" is a token here: without it a prefix expression is ambiguous.
struct ListOpsVocab {
  // The vocabulary's identity in a model's description (nn::Vocabulary::tokenizer).
  static constexpr const char* name = "listops";
  static constexpr std::int64_t pad_id = 0;
  static constexpr std::int64_t cls_id = 1;
  static constexpr std::int64_t digit0_id = 2;
  static constexpr std::int64_t min_id = 12;
  static constexpr std::int64_t max_id = 13;
  static constexpr std::int64_t med_id = 14;
  static constexpr std::int64_t sm_id = 15;
  static constexpr std::int64_t close_id = 16;
  static constexpr std::int64_t vocab_size = 17;
  static constexpr std::int64_t num_classes = 10;

  static std::int64_t digit_id(int digit) { return digit0_id + digit; }
  static bool is_digit(std::int64_t id) { return id >= digit0_id && id < digit0_id + 10; }
  static bool is_operator(std::int64_t id) { return id >= min_id && id <= sm_id; }
  // "[MIN", "7", "]", "[PAD]", ...; throws for an id outside the vocabulary.
  static std::string token_string(std::int64_t id);
};

// One expression as token ids (all below vocab_size, so a byte each) and its value.
struct ListOpsExample {
  std::vector<std::uint8_t> tokens;
  std::int64_t label = 0;
};

struct ListOpsOptions {
  // Keep expressions of min_len..max_len tokens (inclusive; LRA's script keeps 501..1999).
  std::int64_t min_len = 500;
  std::int64_t max_len = 2000;
  // The root has depth 1; a node at depth < max_depth is an operator with probability
  // operator_prob, else a digit; nodes at max_depth are digits.
  std::int64_t max_depth = 10;
  std::int64_t max_args = 10;  // an operator takes 2..max_args arguments
  double operator_prob = 0.25;
  bool unique = true;  // no expression twice (LRA keeps a set)
  // Give up (with an Error) after this many trees; 0 picks a bound from the count.
  std::int64_t max_attempts = 0;

  // Short expressions for quick CPU runs.
  static ListOpsOptions short_sequences() { return {.min_len = 100, .max_len = 400}; }
};

// `count` expressions drawn as LRA draws them (a random tree, kept when its length is within
// bounds). Tree t is drawn from Rng(mix_seed(seed, t)), so the result depends only on the seed
// and the options, and a smaller count gives a prefix of a larger one. A tree is abandoned as
// soon as it exceeds max_len, which keeps rejection cheap.
std::vector<ListOpsExample> generate_listops(std::int64_t count, const ListOpsOptions& options = {},
                                             std::uint64_t seed = 0);

struct ListOpsSplits {
  std::vector<ListOpsExample> train, validation, test;
};
// Three disjoint splits from one generation (LRA: 96,000 / 2,000 / 2,000).
ListOpsSplits generate_listops_splits(std::int64_t train, std::int64_t validation,
                                      std::int64_t test, const ListOpsOptions& options = {},
                                      std::uint64_t seed = 0);

// The value of an expression: MIN, MAX, MED (the median's integer part, as LRA's
// int(np.median(...)): the mean of the two middle values, rounded down, for an even count) and
// SM (sum mod 10). Throws an Error describing the first problem of a malformed expression.
std::int64_t evaluate_listops(std::span<const std::uint8_t> tokens);

// Space-separated tokens <-> ids. Parsing skips "(" and ")" so LRA's own files, which wrap every
// application in parentheses, read as well.
std::vector<std::uint8_t> parse_listops(std::string_view expression);
std::string format_listops(std::span<const std::uint8_t> tokens);

// tokens [B, L] int64, padding_mask [B, L] bool (true = padding), labels [B] int64 values 0..9.
using ListOpsBatch = ClassifierBatch;

// The examples at `indices`, optionally after a [CLS] token, right-padded to `length` (0: the
// longest of the batch). An example longer than `length` is an error unless truncate is set.
ListOpsBatch listops_batch(const std::vector<ListOpsExample>& examples,
                           const std::vector<std::int64_t>& indices, std::int64_t length = 0,
                           bool add_cls = true, bool truncate = false);

}  // namespace tinyformer::nn::data
