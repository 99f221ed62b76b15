// The tensor API users reach for first: comparison operators, sums of bools and integers,
// factories that follow another tensor, and the embedding's out-of-range message.
#include <doctest/doctest.h>
#include <tinyformer/tinyformer.h>

#include <cmath>
#include <vector>

using namespace tinyformer;

namespace {
std::vector<bool> bools(const Tensor& t) {
  REQUIRE(t.dtype() == DType::boolean);
  std::vector<bool> out;
  for (auto v : t.to(DType::int64).to_vector<std::int64_t>()) out.push_back(v != 0);
  return out;
}
using B = std::vector<bool>;
}  // namespace

TEST_CASE("comparison operators: tensors with broadcasting, bool results, no gradient") {
  Tensor a = from<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from<float>({2, 2, 2}, {3});  // broadcasts over the rows
  CHECK(bools(a == b) == B{false, true, false, false, false, false});
  CHECK(bools(a != b) == B{true, false, true, true, true, true});
  CHECK(bools(a < b) == B{true, false, false, false, false, false});
  CHECK(bools(a <= b) == B{true, true, false, false, false, false});
  CHECK(bools(a > b) == B{false, false, true, true, true, true});
  CHECK(bools(a >= b) == B{false, true, true, true, true, true});
  CHECK((a < b).shape() == Shape{2, 3});

  Tensor w = from<float>({1, 2, 3}, {3}).requires_grad_();
  Tensor c = w > 1.5;
  CHECK(c.dtype() == DType::boolean);
  CHECK_FALSE(c.requires_grad());
  CHECK(bools(c) == B{false, true, true});

  // Mismatched shapes or dtypes are errors that name the op.
  CHECK_THROWS_WITH_AS(static_cast<void>(a == from<float>({1, 2}, {2})), doctest::Contains("eq"),
                       Error);
  CHECK_THROWS_WITH_AS(static_cast<void>(a < from<double>({1, 2, 3}, {3})),
                       doctest::Contains("lt: dtypes differ"), Error);
}

TEST_CASE("comparison operators: a scalar on either side") {
  Tensor x = from<double>({-1, 0, 0.5, 2}, {4});
  CHECK(bools(x < 0.5) == B{true, true, false, false});
  CHECK(bools(0.5 < x) == B{false, false, false, true});
  CHECK(bools(x >= 0) == B{false, true, true, true});
  CHECK(bools(0 >= x) == B{true, true, false, false});
  CHECK(bools(x == 2) == B{false, false, false, true});
  CHECK(bools(2 != x) == B{true, true, true, false});
  CHECK(bools(x <= -1) == B{true, false, false, false});
  CHECK(bools(1 > x) == B{true, true, true, false});

  // Integers: an integral scalar compares as int64, another value mathematically (in float64),
  // never as a truncated int (0 < 0.5 is true, and 0 == 0.5 false).
  Tensor labels = from<std::int64_t>({0, 1, 2, -100}, {4});
  CHECK(bools(labels == 1) == B{false, true, false, false});
  CHECK(bools(labels != -100) == B{true, true, true, false});
  CHECK(bools(labels < 0.5) == B{true, false, false, true});
  CHECK(bools(labels == 0.5) == B{false, false, false, false});
  CHECK(bools(1.5 < labels) == B{false, false, true, false});
  CHECK(bools(labels < 1e30) == B{true, true, true, true});
  // Large int64 values compare exactly when the scalar is an int64 value.
  Tensor big = from<std::int64_t>({(std::int64_t{1} << 53) + 1}, {1});
  CHECK(bools(big == 9007199254740992.0) == B{false});

  // Bools: 0 and 1 as bool, anything else in float64.
  Tensor mask = from<bool>({false, true}, {2});
  CHECK(bools(mask == 1) == B{false, true});
  CHECK(bools(mask == 0) == B{true, false});
  CHECK(bools(mask < 0.5) == B{true, false});
  CHECK(bools(mask == 2) == B{false, false});
}

TEST_CASE("sum of bools and integers is an int64 count; mean of them is an error") {
  Tensor mask = from<bool>({true, false, true, true, false, true}, {2, 3});
  Tensor n = sum(mask);
  CHECK(n.dtype() == DType::int64);
  CHECK(n.item<std::int64_t>() == 4);
  Tensor rows = sum(mask, {1});
  CHECK(rows.dtype() == DType::int64);
  CHECK(rows.to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 2});
  CHECK(sum(mask, {0}, /*keepdim=*/true).shape() == Shape{1, 3});
  CHECK(mask.sum().item<std::int64_t>() == 4);

  Tensor ints = from<std::int64_t>({3, -1, 7, 10}, {2, 2});
  CHECK(sum(ints).dtype() == DType::int64);
  CHECK(sum(ints).item<std::int64_t>() == 19);
  CHECK(sum(ints, {0}).to_vector<std::int64_t>() == std::vector<std::int64_t>{10, 9});
  // Beyond 2^53 the count stays exact: the sum runs in integers.
  Tensor large = full({2}, 4503599627370497.0, {.dtype = DType::int64});
  CHECK(sum(large).item<std::int64_t>() == 9007199254740994);
  CHECK(sum(zeros({0}, {.dtype = DType::boolean})).item<std::int64_t>() == 0);

  CHECK_THROWS_WITH_AS(mean(ints), doctest::Contains("mean: expected a floating tensor, got int64"),
                       Error);
  CHECK_THROWS_WITH_AS(mean(mask, {1}), doctest::Contains("x.to(kFloat32)"), Error);
  CHECK(mean(mask.to(DType::float32)).item<float>() == doctest::Approx(4.0 / 6));
}

TEST_CASE("factories that follow another tensor: options() and the *_like family") {
  Tensor x = from<std::int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const TensorOptions o = x.options();
  CHECK(o.dtype == DType::int64);
  CHECK(o.device == Device::cpu());
  CHECK_FALSE(o.requires_grad);
  Tensor z = zeros({4}, x.options());
  CHECK(z.dtype() == DType::int64);

  Tensor w = randn({2, 3}, {.dtype = kFloat64, .requires_grad = true});
  CHECK_FALSE(w.options().requires_grad);  // a gradient is not inherited
  for (const Tensor& t : {zeros_like(w), ones_like(w), full_like(w, 2.5), empty_like(w)}) {
    CHECK(t.shape() == w.shape());
    CHECK(t.dtype() == kFloat64);
    CHECK(t.device() == w.device());
    CHECK_FALSE(t.requires_grad());
  }
  CHECK(full_like(x, 7).to_vector<std::int64_t>() == std::vector<std::int64_t>(6, 7));
  CHECK(ones_like(from<bool>({false, false}, {2})).dtype() == DType::boolean);
  CHECK_THROWS_AS(Tensor().options(), Error);
}

TEST_CASE("an out-of-range token id names the embedding, the id, where it is and the range") {
  nn::Embedding emb(256, 4);
  Tensor tokens = from<std::int64_t>({1, 2, 3, 70000, 5, 6}, {2, 3});
  CHECK_THROWS_WITH_AS(
      emb.forward(tokens),
      "Embedding: token id 70000 at [1, 0] is out of range [0, 256) (the embedding has 256 rows)",
      Error);
  CHECK_THROWS_WITH_AS(emb.forward(from<std::int64_t>({-1}, {1})),
                       doctest::Contains("Embedding: token id -1 at [0] is out of range [0, 256)"),
                       Error);
  CHECK(emb.forward(from<std::int64_t>({255}, {1})).shape() == Shape{1, 4});
}
