// Balanced brackets: the generator's classes, lengths, kinds and counts, its determinism, the
// balance check, formatting and batching.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
using namespace tinyformer::nn::data;

namespace {

// The brackets of `text` ("([)]") as token ids.
std::vector<std::int64_t> ids(const std::string& text) {
  const std::string brackets = "()[]{}<>";
  std::vector<std::int64_t> out;
  for (char c : text) out.push_back(static_cast<std::int64_t>(brackets.find(c)) + 1);
  return out;
}

// Whether some prefix closes more brackets than it opened (an order error, whatever the kinds).
bool depth_goes_negative(const std::vector<std::int64_t>& tokens) {
  std::int64_t depth = 0;
  for (std::int64_t id : tokens) {
    depth += BracketVocab::is_open(id) ? 1 : -1;
    if (depth < 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("balanced_brackets: half balanced, the rest with every kind's counts kept") {
  const std::int64_t max_len = 16;
  const std::vector<BracketExample> examples =
      balanced_brackets(2000, max_len, 5, {.min_len = 4, .kinds = 3});
  REQUIRE(examples.size() == 2000);
  std::set<std::size_t> lengths;
  std::int64_t order_errors = 0, nesting_errors = 0;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    const BracketExample& e = examples[i];
    CHECK(e.label == (i % 2 == 0 ? 1 : 0));
    CHECK(is_balanced(e.tokens) == (e.label == 1));
    CHECK(e.tokens.size() % 2 == 0);
    CHECK(e.tokens.size() >= 4);
    CHECK(e.tokens.size() <= static_cast<std::size_t>(max_len));
    lengths.insert(e.tokens.size());
    // Every kind opens as often as it closes, in both classes: counting tells nothing.
    for (std::int64_t kind = 0; kind < BracketVocab::max_kinds; ++kind) {
      const auto opens = std::count(e.tokens.begin(), e.tokens.end(), BracketVocab::open_id(kind));
      const auto closes =
          std::count(e.tokens.begin(), e.tokens.end(), BracketVocab::close_id(kind));
      CHECK(opens == closes);
      if (kind >= 3) CHECK(opens == 0);  // only the kinds asked for
    }
    if (e.label == 0) (depth_goes_negative(e.tokens) ? order_errors : nesting_errors) += 1;
  }
  CHECK(lengths.size() == 7);  // 4, 6, ..., 16
  // Both kinds of error are common: a nesting error keeps the depth profile of a balanced
  // sequence, so only matching the kinds finds it.
  CHECK(order_errors > 200);
  CHECK(nesting_errors > 200);
}

TEST_CASE(
    "balanced_brackets: the same arguments give the same examples, a smaller count a prefix") {
  const auto a = balanced_brackets(50, 12, 3);
  const auto b = balanced_brackets(80, 12, 3);
  const auto c = balanced_brackets(50, 12, 4);
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].tokens == b[i].tokens);
    CHECK(a[i].label == b[i].label);
    differs = differs || a[i].tokens != c[i].tokens;
  }
  CHECK(differs);
  // One kind: every unbalanced sequence is an order error.
  for (const BracketExample& e : balanced_brackets(40, 10, 1, {.kinds = 1})) {
    CHECK(is_balanced(e.tokens) == (e.label == 1));
    if (e.label == 0) CHECK(depth_goes_negative(e.tokens));
  }
  CHECK(balanced_brackets(0, 4, 1).empty());
  CHECK(balanced_brackets(10, 2, 1)[1].tokens.size() == 2);  // ")(" style at the shortest length
}

TEST_CASE("balanced_brackets: bad arguments are Errors") {
  CHECK_THROWS_WITH_AS(balanced_brackets(-1, 8, 0), doctest::Contains("count of 0 or more"), Error);
  CHECK_THROWS_WITH_AS(balanced_brackets(4, 1, 0), doctest::Contains("2 <= min_len <= max_len"),
                       Error);
  CHECK_THROWS_WITH_AS(balanced_brackets(4, 8, 0, {.min_len = 10}),
                       doctest::Contains("2 <= min_len <= max_len"), Error);
  CHECK_THROWS_WITH_AS(balanced_brackets(4, 7, 0, {.min_len = 7}),
                       doctest::Contains("no even length"), Error);
  CHECK_THROWS_WITH_AS(balanced_brackets(4, 8, 0, {.kinds = 0}), doctest::Contains("1 to 4"),
                       Error);
  CHECK_THROWS_WITH_AS(balanced_brackets(4, 8, 0, {.kinds = 5}), doctest::Contains("1 to 4"),
                       Error);
}

TEST_CASE("is_balanced and format_brackets") {
  CHECK(is_balanced(ids("")));
  CHECK(is_balanced(ids("()")));
  CHECK(is_balanced(ids("([]{<>})[]")));
  CHECK_FALSE(is_balanced(ids("([)]")));  // the counts of a balanced one, crossed
  CHECK_FALSE(is_balanced(ids(")(")));
  CHECK_FALSE(is_balanced(ids("((")));
  CHECK_FALSE(is_balanced(ids("(]")));
  CHECK_THROWS_WITH_AS(is_balanced(std::vector<std::int64_t>{1, 0}),
                       doctest::Contains("token id 0 is no bracket"), Error);
  CHECK(format_brackets(ids("([)]<>")) == "( [ ) ] < >");
  CHECK(BracketVocab::token_string(BracketVocab::pad_id) == "[PAD]");
  CHECK_THROWS_AS(BracketVocab::token_string(9), Error);
}

TEST_CASE("bracket_batch pads to the longest sequence and keeps the labels") {
  const std::vector<BracketExample> examples = {{ids("()[]"), 1}, {ids(")("), 0}};
  const ClassifierBatch b = bracket_batch(examples, {1, 0});
  CHECK(b.tokens.shape() == Shape{2, 4});
  CHECK(b.tokens.to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 1, 0, 0, 1, 2, 3, 4});
  CHECK(b.padding_mask.to_vector<bool>() ==
        std::vector<bool>{false, false, true, true, false, false, false, false});
  CHECK(b.labels.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1});
  CHECK(bracket_batch(examples, {0}, 6).tokens.shape() == Shape{1, 6});
  CHECK_THROWS_WITH_AS(bracket_batch(examples, {2}), doctest::Contains("index 2 is outside"),
                       Error);
  CHECK_THROWS_WITH_AS(bracket_batch(examples, {}), doctest::Contains("at least one index"), Error);
  CHECK_THROWS_WITH_AS(bracket_batch(examples, {0}, 2), doctest::Contains("bracket_batch"), Error);
}
