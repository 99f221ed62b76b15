// Balanced brackets: a generated binary classification task (is every bracket closed by one of
// its own kind, in the right order?) whose unbalanced half keeps each kind's counts, so that only
// the order and the nesting tell the classes apart.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nn/data/batching.h"

namespace tinyformer::nn::data {

// Token ids (vocab_size 9): 0 [PAD]; then for kind c = 0..3 the opening bracket 1 + 2c and its
// closing bracket 2 + 2c: "(" ")" "[" "]" "{" "}" "<" ">".
struct BracketVocab {
  // The vocabulary's identity in a model's description (nn::Vocabulary::tokenizer).
  static constexpr const char* name = "brackets";
  static constexpr std::int64_t pad_id = 0;
  static constexpr std::int64_t max_kinds = 4;
  static constexpr std::int64_t vocab_size = 1 + 2 * max_kinds;
  static constexpr std::int64_t num_classes = 2;  // label 1: balanced, 0: unbalanced

  static std::int64_t open_id(std::int64_t kind) { return 1 + 2 * kind; }
  static std::int64_t close_id(std::int64_t kind) { return 2 + 2 * kind; }
  static bool is_open(std::int64_t id) { return id >= 1 && id < vocab_size && id % 2 == 1; }
  static bool is_close(std::int64_t id) { return id >= 2 && id < vocab_size && id % 2 == 0; }
  static std::int64_t kind(std::int64_t id) { return (id - 1) / 2; }
  // "(", "]", "[PAD]", ...; throws for an id outside the vocabulary.
  static std::string token_string(std::int64_t id);
};

struct BracketExample {
  std::vector<std::int64_t> tokens;  // brackets only, no padding
  std::int64_t label = 0;            // 1: balanced, 0: unbalanced
};

struct BracketOptions {
  // Sequence lengths are the even numbers in [min_len, max_len], drawn uniformly.
  std::int64_t min_len = 2;
  std::int64_t kinds = 3;  // bracket kinds used, 1 to BracketVocab::max_kinds
};

// `count` sequences of at most `max_len` brackets; example i is balanced when i is even, so any
// even prefix holds as many of each class. A balanced sequence is a random nesting of random
// kinds. An unbalanced one is a balanced one with two of its brackets exchanged, so it has the
// same number of openers and closers of every kind: half of them (where at least two kinds close)
// exchange two closers of different kinds, which leaves the depth profile intact and breaks the
// matching only; the others exchange two random positions (often a closer before its opener),
// redrawn until the result is unbalanced. Example i is drawn from Rng(mix_seed(seed, i)), so the
// result depends only on the arguments and a smaller count gives a prefix of a larger one.
// Throws an Error for a negative count, max_len or min_len below 2, min_len above max_len or
// kinds outside [1, max_kinds].
std::vector<BracketExample> balanced_brackets(std::int64_t count, std::int64_t max_len,
                                              std::uint64_t seed,
                                              const BracketOptions& options = {});

// Whether every closer closes the innermost open bracket of its kind and none stays open (the
// empty sequence is balanced). Throws an Error for an id that is no bracket.
bool is_balanced(std::span<const std::int64_t> tokens);

// "( [ ] ) { }": the brackets, space-separated.
std::string format_brackets(std::span<const std::int64_t> tokens);

// The examples at `indices`, right-padded with pad_id to `length` (0: the longest of the batch);
// labels [B] int64. An example longer than `length` is an Error.
ClassifierBatch bracket_batch(const std::vector<BracketExample>& examples,
                              const std::vector<std::int64_t>& indices, std::int64_t length = 0);

}  // namespace tinyformer::nn::data
