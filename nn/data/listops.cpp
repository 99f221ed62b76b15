// ListOps: generation by seeded random trees, evaluation with an operator stack, batching.
#include "nn/data/listops.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "nn/data/batching.h"
#include "nn/data/data_rng.h"

namespace tinyformer::nn::data {

using Vocab = ListOpsVocab;

namespace {
constexpr const char* operator_names[4] = {"[MIN", "[MAX", "[MED", "[SM"};

// The arguments of one operator as a histogram of digits: enough for all four operators, and
// the same fixed size whatever the number of arguments.
struct Arguments {
  std::int64_t count[10] = {};
  std::int64_t n = 0;

  void add(std::int64_t digit) {
    ++count[digit];
    ++n;
  }
  // The k-th smallest argument (k from 0).
  std::int64_t nth(std::int64_t k) const {
    for (std::int64_t d = 0; d < 10; ++d) {
      if (k < count[d]) return d;
      k -= count[d];
    }
    return 9;  // unreachable for k < n
  }
  std::int64_t apply(std::int64_t op_id) const {
    switch (op_id) {
      case Vocab::min_id:
        return nth(0);
      case Vocab::max_id:
        return nth(n - 1);
      case Vocab::med_id:
        // int(np.median(...)): the middle value, or for an even count the mean of the two middle
        // values truncated (they are non-negative, so rounded down).
        return n % 2 == 1 ? nth(n / 2) : (nth(n / 2 - 1) + nth(n / 2)) / 2;
      default: {  // sm_id
        std::int64_t sum = 0;
        for (std::int64_t d = 0; d < 10; ++d) sum += d * count[d];
        return sum % 10;
      }
    }
  }
};

// Draws one tree as LRA's generate_tree does, appending its tokens to `out`.
class TreeSampler {
 public:
  TreeSampler(const ListOpsOptions& options, Rng& rng, std::vector<std::uint8_t>& out)
      : options_(options), rng_(rng), out_(out) {}

  // The subtree's value, or -1 once the expression has grown past max_len (the tree is then
  // abandoned: it would be rejected anyway).
  std::int64_t node(std::int64_t depth) {
    if (static_cast<std::int64_t>(out_.size()) > options_.max_len) return -1;
    if (depth < options_.max_depth && rng_.bernoulli(options_.operator_prob)) {
      const std::int64_t arity = rng_.uniform_int(2, options_.max_args);
      const std::size_t op_slot = out_.size();
      out_.push_back(0);  // the operator is drawn after its arguments, as in LRA
      Arguments args;
      for (std::int64_t a = 0; a < arity; ++a) {
        const std::int64_t value = node(depth + 1);
        if (value < 0) return -1;
        args.add(value);
      }
      const std::int64_t op = Vocab::min_id + rng_.uniform_int(0, 3);
      out_[op_slot] = static_cast<std::uint8_t>(op);
      out_.push_back(static_cast<std::uint8_t>(Vocab::close_id));
      return args.apply(op);
    }
    const std::int64_t digit = rng_.uniform_int(0, 9);
    out_.push_back(static_cast<std::uint8_t>(Vocab::digit_id(static_cast<int>(digit))));
    return digit;
  }

 private:
  const ListOpsOptions& options_;
  Rng& rng_;
  std::vector<std::uint8_t>& out_;
};

// The longest expression the options allow (saturating), to reject impossible bounds early.
std::int64_t longest_possible(const ListOpsOptions& o) {
  if (o.operator_prob <= 0.0) return 1;
  std::int64_t length = 1;  // a subtree at max_depth is one digit
  const std::int64_t cap = std::numeric_limits<std::int64_t>::max() / (o.max_args + 1) - 2;
  for (std::int64_t d = o.max_depth - 1; d >= 1; --d) {
    length = length >= cap ? cap : 2 + o.max_args * length;
  }
  return length;
}

void check_options(const ListOpsOptions& o, const char* op) {
  TF_CHECK(o.min_len >= 1 && o.min_len <= o.max_len, op,
           ": expected 1 <= min_len <= max_len, got min_len ", o.min_len, " and max_len ",
           o.max_len);
  TF_CHECK(o.max_depth >= 1, op, ": expected max_depth >= 1, got ", o.max_depth);
  TF_CHECK(o.max_args >= 2 && o.max_args <= 1000, op, ": expected 2 <= max_args <= 1000, got ",
           o.max_args);
  TF_CHECK(o.operator_prob >= 0.0 && o.operator_prob <= 1.0, op,
           ": expected operator_prob in [0, 1], got ", o.operator_prob);
  TF_CHECK(o.max_attempts >= 0, op, ": expected max_attempts >= 0 (0 = automatic), got ",
           o.max_attempts);
  const std::int64_t longest = longest_possible(o);
  TF_CHECK(o.min_len <= longest, op, ": no expression reaches min_len ", o.min_len,
           " with max_depth ", o.max_depth, ", max_args ", o.max_args, " and operator_prob ",
           o.operator_prob, " (the longest has ", longest, " tokens)");
}

std::int64_t token_id(std::string_view token) {
  if (token.size() == 1 && token[0] >= '0' && token[0] <= '9')
    return Vocab::digit_id(token[0] - '0');
  if (token == "]") return Vocab::close_id;
  for (int i = 0; i < 4; ++i) {
    if (token == operator_names[i]) return Vocab::min_id + i;
  }
  return -1;
}
}  // namespace

std::string ListOpsVocab::token_string(std::int64_t id) {
  TF_CHECK(id >= 0 && id < vocab_size, "ListOpsVocab::token_string: id ", id,
           " is outside the ListOps vocabulary [0, ", vocab_size, ")");
  if (id == pad_id) return "[PAD]";
  if (id == cls_id) return "[CLS]";
  if (is_digit(id)) return std::string(1, static_cast<char>('0' + (id - digit0_id)));
  if (id == close_id) return "]";
  return operator_names[id - min_id];
}

std::vector<ListOpsExample> generate_listops(std::int64_t count, const ListOpsOptions& options,
                                             std::uint64_t seed) {
  check_options(options, "generate_listops");
  TF_CHECK(count >= 0, "generate_listops: expected a count >= 0, got ", count);
  // About 1 tree in 12 lands in 500..2000 with LRA's settings (most rejected trees are tiny);
  // the automatic bound leaves a wide margin and still stops hopeless settings in seconds.
  const std::int64_t max_attempts =
      options.max_attempts > 0 ? options.max_attempts : 1'000'000 + 10'000 * count;

  std::vector<ListOpsExample> examples;
  examples.reserve(static_cast<std::size_t>(count));
  std::unordered_set<std::string> seen;
  std::vector<std::uint8_t> tokens;
  std::int64_t attempt = 0;
  for (; static_cast<std::int64_t>(examples.size()) < count && attempt < max_attempts; ++attempt) {
    Rng rng(mix_seed(seed, static_cast<std::uint64_t>(attempt)));
    tokens.clear();
    const std::int64_t value = TreeSampler(options, rng, tokens).node(1);
    const auto length = static_cast<std::int64_t>(tokens.size());
    if (value < 0 || length < options.min_len || length > options.max_len) continue;
    if (options.unique &&
        !seen.emplace(reinterpret_cast<const char*>(tokens.data()), tokens.size()).second) {
      continue;
    }
    examples.push_back({tokens, value});
  }
  TF_CHECK(static_cast<std::int64_t>(examples.size()) == count, "generate_listops: found only ",
           examples.size(), " of ", count, " expressions of ", options.min_len, "..",
           options.max_len, " tokens in ", max_attempts,
           " trees; widen the length bounds, raise operator_prob or raise max_attempts");
  return examples;
}

ListOpsSplits generate_listops_splits(std::int64_t train, std::int64_t validation,
                                      std::int64_t test, const ListOpsOptions& options,
                                      std::uint64_t seed) {
  TF_CHECK(train >= 0 && validation >= 0 && test >= 0,
           "generate_listops_splits: expected sizes >= 0, got ", train, ", ", validation, ", ",
           test);
  std::vector<ListOpsExample> all = generate_listops(train + validation + test, options, seed);
  ListOpsSplits splits;
  const auto a = all.begin() + train, b = a + validation;
  splits.train.assign(std::make_move_iterator(all.begin()), std::make_move_iterator(a));
  splits.validation.assign(std::make_move_iterator(a), std::make_move_iterator(b));
  splits.test.assign(std::make_move_iterator(b), std::make_move_iterator(all.end()));
  return splits;
}

std::int64_t evaluate_listops(std::span<const std::uint8_t> tokens) {
  TF_CHECK(!tokens.empty(), "evaluate_listops: the expression is empty");
  // One frame per open operator: its id and the values of its arguments so far.
  std::vector<std::pair<std::int64_t, Arguments>> open;
  std::int64_t result = -1;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int64_t id = tokens[i];
    TF_CHECK(result < 0, "evaluate_listops: token ", i, " (",
             id < Vocab::vocab_size ? Vocab::token_string(id) : std::to_string(id),
             ") follows a complete expression");
    std::int64_t value = -1;
    if (Vocab::is_operator(id)) {
      open.push_back({id, Arguments{}});
      continue;
    } else if (Vocab::is_digit(id)) {
      value = id - Vocab::digit0_id;
    } else if (id == Vocab::close_id) {
      TF_CHECK(!open.empty(), "evaluate_listops: token ", i, " is a ']' with no open operator");
      const auto [op, args] = open.back();
      TF_CHECK(args.n >= 1, "evaluate_listops: token ", i, " closes ", Vocab::token_string(op),
               " with no arguments");
      open.pop_back();
      value = args.apply(op);
    } else {
      fail("evaluate_listops: token ", i, " has id ", id,
           ", which is no operator, digit or ']' (ids 2..16)");
    }
    if (open.empty()) {
      result = value;
    } else {
      open.back().second.add(value);
    }
  }
  TF_CHECK(open.empty(), "evaluate_listops: ", open.size(),
           " operator(s) not closed at the end of the expression (missing ']')");
  return result;
}

std::vector<std::uint8_t> parse_listops(std::string_view expression) {
  std::vector<std::uint8_t> tokens;
  std::size_t i = 0;
  std::int64_t index = 0;
  while (i < expression.size()) {
    if (expression[i] == ' ' || expression[i] == '\t' || expression[i] == '\n' ||
        expression[i] == '\r') {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < expression.size() && expression[end] != ' ' && expression[end] != '\t' &&
           expression[end] != '\n' && expression[end] != '\r') {
      ++end;
    }
    const std::string_view token = expression.substr(i, end - i);
    i = end;
    ++index;
    if (token == "(" || token == ")") continue;
    const std::int64_t id = token_id(token);
    TF_CHECK(id >= 0, "parse_listops: token ", index, " '",
             token.size() > 20 ? std::string(token.substr(0, 20)) + "..." : std::string(token),
             "' is not one of [MIN [MAX [MED [SM ] 0..9");
    tokens.push_back(static_cast<std::uint8_t>(id));
  }
  return tokens;
}

std::string format_listops(std::span<const std::uint8_t> tokens) {
  std::string text;
  text.reserve(tokens.size() * 2);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += Vocab::token_string(tokens[i]);
  }
  return text;
}

ListOpsBatch listops_batch(const std::vector<ListOpsExample>& examples,
                           const std::vector<std::int64_t>& indices, std::int64_t length,
                           bool add_cls, bool truncate) {
  TF_CHECK(!indices.empty(), "listops_batch: expected at least one index, got none");
  std::vector<std::vector<std::int64_t>> rows;
  std::vector<std::int64_t> labels;
  rows.reserve(indices.size());
  for (const std::int64_t i : indices) {
    TF_CHECK(i >= 0 && i < static_cast<std::int64_t>(examples.size()), "listops_batch: index ", i,
             " is outside [0, ", examples.size(), ")");
    const ListOpsExample& e = examples[static_cast<std::size_t>(i)];
    std::vector<std::int64_t> row;
    row.reserve(e.tokens.size() + 1);
    if (add_cls) row.push_back(Vocab::cls_id);
    row.insert(row.end(), e.tokens.begin(), e.tokens.end());
    rows.push_back(std::move(row));
    labels.push_back(e.label);
  }
  PaddedBatch padded;
  try {
    padded = pad_batch(rows, {.pad_id = Vocab::pad_id, .length = length, .truncate = truncate});
  } catch (const Error& e) {
    fail("listops_batch: ", e.what());
  }
  const auto batch = static_cast<std::int64_t>(labels.size());
  return {padded.tokens, padded.padding_mask, from(labels, {batch})};
}

}  // namespace tinyformer::nn::data
