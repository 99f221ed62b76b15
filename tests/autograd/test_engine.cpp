// The backward engine: accumulation over several consumers, broadcast reduction, retain_graph,
// grad mode, detach, leaf rules, custom functions, and a gradcheck that must catch a wrong
// backward.
#include <doctest/doctest.h>

#include <memory>

#include "autograd/function.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "gradcheck_cases.h"

namespace tf = tinyformer;
using tf::Tensor;

namespace {

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

Tensor leaf(std::initializer_list<double> v, const tf::Shape& shape) {
  Tensor t = tf::from<double>(v, shape);
  t.requires_grad_(true);
  return t;
}

// x^3 with a backward that is off by a factor (2x^2 instead of 3x^2) unless `correct`.
struct Cube : tf::autograd::Function {
  explicit Cube(bool correct_backward) : correct(correct_backward) {}
  bool correct;
  Tensor x;
  Tensor forward(const std::vector<Tensor>& in) override {
    x = in[0];
    return in[0] * in[0] * in[0];
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    return {g * (correct ? 3.0 : 2.0) * x * x};
  }
  std::string name() const override { return "Cube"; }
};

// Returns a gradient of the wrong shape for its input.
struct BadShape : tf::autograd::Function {
  Tensor forward(const std::vector<Tensor>& in) override { return in[0] * 2.0; }
  std::vector<Tensor> backward(const Tensor& g) override { return {tf::sum(g)}; }
  std::string name() const override { return "BadShape"; }
};

// Passes its input through; its backward returns a gradient it keeps (`kept`) for its input,
// so that the engine's sum for that input starts as memory someone else holds.
struct KeepsGradient : tf::autograd::Function {
  Tensor kept;
  Tensor forward(const std::vector<Tensor>& in) override { return in[0] * 1.0; }
  std::vector<Tensor> backward(const Tensor& g) override {
    kept = g * 10.0;
    return {kept};
  }
  std::string name() const override { return "KeepsGradient"; }
};

}  // namespace

TEST_CASE("a tensor used by several consumers accumulates their gradients") {
  Tensor x = leaf({1.0, -2.0, 3.0}, {3});
  // d/dx sum(x * x + x) = 2x + 1
  tf::sum(x * x + x).backward();
  CHECK(values(x.grad()) == std::vector<double>{3.0, -3.0, 7.0});
  // A second, fresh graph adds into the existing gradient.
  tf::sum(x * 2.0).backward();
  CHECK(values(x.grad()) == std::vector<double>{5.0, -1.0, 9.0});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("gradients sum in place only into memory nothing else holds") {
  // y = x * 2 + f(x) + x * 3 + x * 4 with f passing x through and keeping its gradient: the
  // engine's sum for x starts as one of several gradients, some held elsewhere; whichever order
  // they arrive in, the kept one must not change and the sum must be right.
  for (const bool kept_first : {false, true}) {
    CAPTURE(kept_first);
    Tensor x = leaf({1.0, -2.0, 3.0, 0.5}, {2, 2});
    auto keeper = std::make_shared<KeepsGradient>();
    const Tensor through = tf::autograd::apply(keeper, {x});
    const Tensor y = kept_first ? (through + x * 2.0) + (x * 3.0 + x * 4.0)
                                : (x * 2.0 + x * 3.0) + (x * 4.0 + through);
    tf::sum(y * 1.5).backward();
    // d/dx = 1.5 * (2 + 3 + 4) + 15 = 28.5 everywhere; the kept gradient stays 15.
    CHECK(values(x.grad()) == std::vector<double>(4, 28.5));
    CHECK(values(keeper->kept) == std::vector<double>(4, 15.0));
  }
}

TEST_CASE("a leaf's first gradient is its own memory, taken or copied") {
  // add's backward hands the same gradient to both leaves: each must get its own copy, so that
  // updating one in place leaves the other alone.
  Tensor a = leaf({1.0, 2.0}, {2}), b = leaf({3.0, 4.0}, {2});
  tf::sum((a + b) * 3.0).backward();
  tf::raw::fill(a.grad(), 7.0);
  CHECK(values(a.grad()) == std::vector<double>{7.0, 7.0});
  CHECK(values(b.grad()) == std::vector<double>{3.0, 3.0});
  // A gradient the caller still holds (the seed of a leaf's own backward) is copied too.
  Tensor c = leaf({1.0, 2.0}, {2});
  const Tensor seed = tf::from<double>({5.0, 6.0}, {2});
  c.backward(seed);
  CHECK(values(c.grad()) == std::vector<double>{5.0, 6.0});
  tf::raw::fill(c.grad(), 7.0);
  CHECK(values(seed) == std::vector<double>{5.0, 6.0});
  // A gradient only the engine holds (here the product's) is taken without a copy; the next
  // backward adds into it.
  Tensor w = leaf({1.0, 2.0, 3.0, 4.0}, {2, 2});
  const Tensor x = tf::from<double>({1.0, 1.0}, {2, 1});
  tf::sum(tf::matmul(w, x)).backward();
  const Tensor first = w.grad();
  CHECK(values(first) == std::vector<double>{1.0, 1.0, 1.0, 1.0});
  tf::sum(tf::matmul(w, x)).backward();
  CHECK(values(w.grad()) == std::vector<double>{2.0, 2.0, 2.0, 2.0});
  CHECK(values(first) == std::vector<double>{1.0, 1.0, 1.0, 1.0});  // a new tensor, not in place
}

TEST_CASE("broadcast gradients are summed back to each operand's shape") {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  Tensor c = leaf({2}, {});
  tf::sum(a * b * c).backward();
  CHECK(b.grad().shape() == tf::Shape{3});
  CHECK(values(b.grad()) == std::vector<double>{10.0, 14.0, 18.0});  // c * column sums of a
  CHECK(c.grad().shape() == tf::Shape{});
  CHECK(c.grad().item<double>() ==
        doctest::Approx(1 * 10 + 2 * 20 + 3 * 30 + 4 * 10 + 5 * 20 + 6 * 30));
  CHECK(values(a.grad()) == std::vector<double>{20, 40, 60, 20, 40, 60});
}

TEST_CASE("retain_graph") {
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor y = tf::sum(x * x);
  y.backward();
  // The graph was freed: a second backward must say how to keep it.
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("retain_graph"), tf::Error);

  Tensor z = leaf({1.0, 2.0}, {2});
  Tensor w = tf::sum(z * z);
  w.backward({}, /*retain_graph=*/true);
  w.backward();
  CHECK(values(z.grad()) == std::vector<double>{4.0, 8.0});  // 2 * 2z
}

TEST_CASE("backward frees what the graph saved, unless asked to retain it") {
  constexpr std::int64_t n = 1 << 16;
  const std::int64_t bytes = n * 8;
  for (bool retain : {false, true}) {
    Tensor x = tf::zeros({n}, {.dtype = tf::kFloat64, .requires_grad = true});
    // exp keeps its output for backward; nothing else holds it.
    Tensor loss = tf::sum(tf::exp(x));
    const auto before = tf::memory_stats().current_bytes;
    loss.backward({}, retain);
    x.zero_grad();
    const auto after = tf::memory_stats().current_bytes;
    CAPTURE(retain);
    CHECK(after == (retain ? before : before - bytes));
  }
}

TEST_CASE("NoGradGuard records nothing and restores the mode") {
  Tensor x = leaf({1.0, 2.0}, {2});
  {
    tf::NoGradGuard guard;
    CHECK_FALSE(tf::GradMode::is_enabled());
    Tensor y = x * x;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    Tensor v = x.view({2, 1});
    CHECK_FALSE(v.requires_grad());
    CHECK_THROWS_AS(tf::sum(y).backward(), tf::Error);
  }
  CHECK(tf::GradMode::is_enabled());
  CHECK((x * x).requires_grad());
}

TEST_CASE("detach cuts the graph but shares the data") {
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor y = x * 3.0;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.storage() == y.storage());
  // Only the path through y carries a gradient.
  tf::sum(y * d).backward();
  CHECK(values(x.grad()) == std::vector<double>{9.0, 18.0});  // 3 * d
}

TEST_CASE("leaf rules: requires_grad_ and backward's preconditions") {
  Tensor i = tf::arange(4);
  CHECK_THROWS_WITH_AS(i.requires_grad_(), doctest::Contains("floating"), tf::Error);
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor y = x * 2.0;
  CHECK_FALSE(y.is_leaf());
  CHECK_THROWS_WITH_AS(y.requires_grad_(), doctest::Contains("leaf"), tf::Error);
  // A non-scalar needs an explicit gradient.
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("one element"), tf::Error);
  y.backward(tf::from<double>({1.0, 0.5}, {2}));
  CHECK(values(x.grad()) == std::vector<double>{2.0, 1.0});
  // A gradient of the wrong shape is refused.
  CHECK_THROWS_AS((x * 2.0).backward(tf::ones({3}, {.dtype = tf::kFloat64})), tf::Error);
  // A tensor outside any graph cannot run backward.
  CHECK_THROWS_AS(tf::ones({1}).backward(), tf::Error);
  CHECK_THROWS_AS(Tensor().backward(), tf::Error);
}

TEST_CASE("int and bool results end the graph") {
  Tensor x = leaf({1.5, -2.0}, {2});
  CHECK_FALSE(tf::gt(x, tf::zeros({2}, {.dtype = tf::kFloat64})).requires_grad());
  CHECK_FALSE(x.to(tf::kInt64).requires_grad());
  CHECK_FALSE(tf::argmax(x, 0).requires_grad());
  auto [values_, indices] = tf::max(x, 0);
  CHECK(values_.requires_grad());
  CHECK_FALSE(indices.requires_grad());
}

TEST_CASE("to(dtype) sends the gradient back in the input's dtype") {
  Tensor x = tf::from<float>({1.0f, 2.0f}, {2});
  x.requires_grad_(true);
  Tensor y = x.to(tf::kFloat64);
  CHECK(y.dtype() == tf::kFloat64);
  tf::sum(y * y).backward();
  CHECK(x.grad().dtype() == tf::kFloat32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2.0f, 4.0f});
  // The same dtype or device is the tensor itself, as in PyTorch.
  CHECK(x.to(tf::kFloat32).is_same(x));
  CHECK(x.to(tf::Device::cpu()).is_same(x));
}

TEST_CASE("custom function: forward and backward, checked by gradcheck") {
  Tensor x = leaf({0.5, -1.0, 2.0}, {3});
  Tensor y = tf::autograd::apply(std::make_shared<Cube>(true), {x});
  CHECK(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "Cube");
  tf::sum(y).backward();
  CHECK(values(x.grad()) == std::vector<double>{0.75, 3.0, 12.0});
  tf::testing::expect_gradcheck(
      [](auto& in) { return tf::autograd::apply(std::make_shared<Cube>(true), {in[0]}); }, {x},
      "Cube");
}

TEST_CASE("gradcheck catches a wrong backward") {
  Tensor x = leaf({0.5, -1.0, 2.0}, {3});
  auto wrong = [](const std::vector<Tensor>& in) {
    return tf::autograd::apply(std::make_shared<Cube>(false), {in[0]});
  };
  CHECK_THROWS_WITH_AS(tf::gradcheck(wrong, {x}), doctest::Contains("finite differences"),
                       tf::Error);
}

TEST_CASE("custom function: a gradient of the wrong shape is an Error") {
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor y = tf::autograd::apply(std::make_shared<BadShape>(), {x});
  CHECK_THROWS_WITH_AS(tf::sum(y).backward(), doctest::Contains("BadShape"), tf::Error);
  CHECK_THROWS_AS(tf::autograd::apply(nullptr, {x}), tf::Error);
}

TEST_CASE("gradients flow through views into the base") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  // Two views of x, both used: their gradients add up on x.
  Tensor col = x.select(1, 2);    // [3, 6]
  Tensor row = x.slice(0, 0, 1);  // [[1, 2, 3]]
  tf::sum(col * 10.0).backward();
  tf::sum(row * row).backward();
  CHECK(values(x.grad()) == std::vector<double>{2, 4, 16, 0, 0, 10});
}

TEST_CASE("intermediate results keep no gradient, leaves do") {
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor y = x * 2.0;
  tf::sum(y).backward();
  CHECK_FALSE(y.grad().defined());
  CHECK(x.grad().defined());
  CHECK(x.grad().is_contiguous());
}

TEST_CASE("an unused branch gets no gradient") {
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor unused = leaf({3.0}, {1});
  Tensor y = tf::where(tf::from<bool>({true, true}, {2}), x, unused);
  tf::sum(y).backward();
  CHECK(values(x.grad()) == std::vector<double>{1.0, 1.0});
  CHECK(values(unused.grad()) == std::vector<double>{0.0});
}
