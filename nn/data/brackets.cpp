// Balanced brackets: generation from seeded random nestings, the balance check, batching.
#include "nn/data/brackets.h"

#include <utility>

#include "core/error.h"
#include "nn/data/data_rng.h"

namespace tinyformer::nn::data {

using Vocab = BracketVocab;

std::string BracketVocab::token_string(std::int64_t id) {
  static const char* names[vocab_size] = {"[PAD]", "(", ")", "[", "]", "{", "}", "<", ">"};
  TF_CHECK(id >= 0 && id < vocab_size, "BracketVocab: token id ", id, " is outside [0, ",
           vocab_size, ")");
  return names[id];
}

namespace {

// A random nesting of `length` / 2 pairs: open while some must still close, with probability
// 1/2 otherwise; each opener of a random kind, each closer of its opener's.
std::vector<std::int64_t> random_balanced(std::int64_t length, std::int64_t kinds, Rng& rng) {
  std::vector<std::int64_t> tokens, open;
  tokens.reserve(static_cast<std::size_t>(length));
  for (std::int64_t i = 0; i < length; ++i) {
    const auto depth = static_cast<std::int64_t>(open.size());
    const bool opens = depth == 0 || (depth < length - i && rng.bernoulli(0.5));
    if (opens) {
      open.push_back(rng.uniform_int(0, kinds - 1));
      tokens.push_back(Vocab::open_id(open.back()));
    } else {
      tokens.push_back(Vocab::close_id(open.back()));
      open.pop_back();
    }
  }
  return tokens;
}

// Two closers of different kinds exchanged; false when every closer is of one kind.
bool exchange_closers(std::vector<std::int64_t>& tokens, Rng& rng) {
  std::vector<std::size_t> closers;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (Vocab::is_close(tokens[i])) closers.push_back(i);
  }
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (std::size_t a = 0; a < closers.size(); ++a) {
    for (std::size_t b = a + 1; b < closers.size(); ++b) {
      if (tokens[closers[a]] != tokens[closers[b]]) pairs.emplace_back(closers[a], closers[b]);
    }
  }
  if (pairs.empty()) return false;
  const auto [a, b] = pairs[static_cast<std::size_t>(
      rng.uniform_int(0, static_cast<std::int64_t>(pairs.size()) - 1))];
  std::swap(tokens[a], tokens[b]);
  return true;
}

// Two random positions holding different tokens exchanged until the result is unbalanced.
void exchange_positions(std::vector<std::int64_t>& tokens, Rng& rng) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  while (true) {
    const auto a = static_cast<std::size_t>(rng.uniform_int(0, n - 1));
    const auto b = static_cast<std::size_t>(rng.uniform_int(0, n - 1));
    if (tokens[a] == tokens[b]) continue;
    std::swap(tokens[a], tokens[b]);
    if (!is_balanced(tokens)) return;
    std::swap(tokens[a], tokens[b]);
  }
}

}  // namespace

std::vector<BracketExample> balanced_brackets(std::int64_t count, std::int64_t max_len,
                                              std::uint64_t seed, const BracketOptions& options) {
  const char* op = "balanced_brackets";
  TF_CHECK(count >= 0, op, ": expected a count of 0 or more, got ", count);
  TF_CHECK(options.min_len >= 2 && max_len >= options.min_len, op,
           ": expected 2 <= min_len <= max_len, got min_len ", options.min_len, " and max_len ",
           max_len);
  TF_CHECK(options.kinds >= 1 && options.kinds <= Vocab::max_kinds, op, ": expected 1 to ",
           Vocab::max_kinds, " bracket kinds, got ", options.kinds);
  // Lengths 2 * pairs for pairs in [ceil(min_len / 2), floor(max_len / 2)].
  const std::int64_t min_pairs = (options.min_len + 1) / 2, max_pairs = max_len / 2;
  TF_CHECK(min_pairs <= max_pairs, op, ": no even length lies in [", options.min_len, ", ", max_len,
           "]");
  std::vector<BracketExample> examples;
  examples.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    Rng rng(mix_seed(seed, static_cast<std::uint64_t>(i)));
    const std::int64_t length = 2 * rng.uniform_int(min_pairs, max_pairs);
    BracketExample e{random_balanced(length, options.kinds, rng), i % 2 == 0 ? 1 : 0};
    if (e.label == 0 && !(rng.bernoulli(0.5) && exchange_closers(e.tokens, rng))) {
      exchange_positions(e.tokens, rng);
    }
    examples.push_back(std::move(e));
  }
  return examples;
}

bool is_balanced(std::span<const std::int64_t> tokens) {
  std::vector<std::int64_t> open;
  for (const std::int64_t id : tokens) {
    TF_CHECK(Vocab::is_open(id) || Vocab::is_close(id), "is_balanced: token id ", id,
             " is no bracket");
    if (Vocab::is_open(id)) {
      open.push_back(Vocab::kind(id));
    } else {
      if (open.empty() || open.back() != Vocab::kind(id)) return false;
      open.pop_back();
    }
  }
  return open.empty();
}

std::string format_brackets(std::span<const std::int64_t> tokens) {
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += Vocab::token_string(tokens[i]);
  }
  return text;
}

ClassifierBatch bracket_batch(const std::vector<BracketExample>& examples,
                              const std::vector<std::int64_t>& indices, std::int64_t length) {
  TF_CHECK(!indices.empty(), "bracket_batch: expected at least one index, got none");
  std::vector<std::vector<std::int64_t>> rows;
  std::vector<std::int64_t> labels;
  rows.reserve(indices.size());
  for (const std::int64_t i : indices) {
    TF_CHECK(i >= 0 && i < static_cast<std::int64_t>(examples.size()), "bracket_batch: index ", i,
             " is outside [0, ", examples.size(), ")");
    rows.push_back(examples[static_cast<std::size_t>(i)].tokens);
    labels.push_back(examples[static_cast<std::size_t>(i)].label);
  }
  PaddedBatch padded;
  try {
    padded = pad_batch(rows, {.pad_id = Vocab::pad_id, .length = length});
  } catch (const Error& e) {
    fail("bracket_batch: ", e.what());
  }
  const auto batch = static_cast<std::int64_t>(labels.size());
  return {padded.tokens, padded.padding_mask, from(labels, {batch})};
}

}  // namespace tinyformer::nn::data
