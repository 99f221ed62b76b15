// In-place methods and the version counter: the values they write, autograd's rules for leaves
// and views, the gradients through a recorded in-place change, the backward that refuses a saved
// tensor changed since the forward, overlapping copies, and a custom function's gradients
// checked for dtype and shape.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/random.h"

namespace tf = tinyformer;
using tf::Shape;
using tf::Tensor;

namespace {

const tf::TensorOptions f64{.dtype = tf::DType::float64};

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

Tensor leaf(std::initializer_list<double> v, const Shape& shape) {
  Tensor t = tf::from<double>(v, shape);
  t.requires_grad_();
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tf::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("in-place methods write the values of their out-of-place forms") {
  Tensor x = tf::from<double>({1, 2, 3, 4}, {2, 2});
  x.add_(tf::from<double>({10, 20}, {2}));  // broadcast over the rows
  CHECK(values(x) == std::vector<double>{11, 22, 13, 24});
  x.sub_(tf::from<double>({1, 2, 3, 4}, {2, 2}), 2.0);
  CHECK(values(x) == std::vector<double>{9, 18, 7, 16});
  x.mul_(tf::from<double>({2, 0.5}, {1, 2}));
  CHECK(values(x) == std::vector<double>{18, 9, 14, 8});
  x.add_(1.0).mul_(2.0).div_(4.0);
  CHECK(values(x) == std::vector<double>{9.5, 5, 7.5, 4.5});
  x.fill_(3.0);
  CHECK(values(x) == std::vector<double>{3, 3, 3, 3});
  x.zero_();
  CHECK(values(x) == std::vector<double>{0, 0, 0, 0});
  // copy_ broadcasts and converts the dtype.
  x.copy_(tf::from<float>({5.f, 6.f}, {2}));
  CHECK(values(x) == std::vector<double>{5, 6, 5, 6});
  CHECK(x.dtype() == tf::DType::float64);
  // A view's change is seen by its base.
  Tensor row = x.select(0, 1);
  row.fill_(-1.0);
  CHECK(values(x) == std::vector<double>{5, 6, -1, -1});
}

TEST_CASE("in-place methods refuse operands that do not fit") {
  Tensor x = tf::zeros({2, 3}, f64);
  CHECK(error_of([&] {
          x.add_(tf::zeros({3, 3}, f64));
        }).find("cannot be broadcast") != std::string::npos);
  CHECK(error_of([&] {
          x.add_(tf::zeros({2, 3}));
        }).find("expected a float64 operand") != std::string::npos);
  CHECK(error_of([&] { x.copy_(tf::zeros({4})); }).find("copy_") != std::string::npos);
  // A smaller tensor that the operand broadcasts over: the result would not fit in place.
  const Tensor row = tf::zeros({3}, f64);
  CHECK(error_of([&] {
          row.add_(tf::zeros({2, 3}, f64));
        }).find("does not broadcast") != std::string::npos);
  Tensor undefined;
  CHECK(error_of([&] { undefined.zero_(); }).find("zero_") != std::string::npos);
}

TEST_CASE("the version counter: bumped by every in-place change, shared by views") {
  Tensor x = tf::zeros({4}, f64);
  const Tensor view = x.slice(0, 1, 3);
  const std::uint64_t v0 = x.version();
  x.add_(1.0);
  CHECK(x.version() == v0 + 1);
  CHECK(view.version() == x.version());
  view.zero_();
  CHECK(x.version() == v0 + 2);
  tf::raw::copy(tf::ones({4}, f64), x);
  CHECK(x.version() == v0 + 3);
  tf::raw::fill(x, 2.0);
  CHECK(x.version() == v0 + 4);
  x.bump_version();
  CHECK(x.version() == v0 + 5);
  // An out-of-place op makes a new storage at version 0 and leaves x's alone.
  const Tensor y = x + 1.0;
  CHECK(y.version() == 0);
  CHECK(x.version() == v0 + 5);
}

TEST_CASE("a backward refuses a saved tensor changed in place after the forward") {
  // The stale-graph case: y = sum(w * w), a retained backward, an update of w, a second backward.
  Tensor w = leaf({1, 2, 3}, {3});
  const Tensor y = tf::sum(w * w);
  y.backward({}, /*retain_graph=*/true);
  CHECK(values(w.grad()) == std::vector<double>{2, 4, 6});
  {
    const tf::NoGradGuard no_grad;
    w.sub_(w.grad(), 0.5);  // an optimizer step
  }
  const std::string message = error_of([&] { y.backward(); });
  CHECK(message.find("'mul' saved for its backward") != std::string::npos);
  CHECK(message.find("modified in place") != std::string::npos);
  CHECK(message.find("version 1, saved at version 0") != std::string::npos);

  // An op that saved nothing of the changed tensor still runs: add's backward reads no values.
  Tensor a = leaf({1, 2}, {2});
  const Tensor z = tf::sum(a + 1.0);
  {
    const tf::NoGradGuard no_grad;
    a.add_(5.0);
  }
  z.backward();
  CHECK(values(a.grad()) == std::vector<double>{1, 1});
}

TEST_CASE("in-place under grad mode: leaves refused, views refused, the rest recorded") {
  Tensor w = leaf({1, 2}, {2});
  CHECK(error_of([&] { w.add_(1.0); }).find("a leaf tensor that requires grad") !=
        std::string::npos);
  {
    const tf::NoGradGuard no_grad;
    w.add_(1.0);  // allowed: an update outside the graph
  }
  CHECK(values(w) == std::vector<double>{2, 3});

  Tensor h = w * 2.0;
  CHECK(error_of([&] { h.slice(0, 0, 1).zero_(); }).find("a view cannot change in place") !=
        std::string::npos);
  // A view of a tensor outside autograd changes freely.
  Tensor buffer = tf::zeros({2}, f64);
  buffer.slice(0, 0, 1).fill_(7.0);
  CHECK(values(buffer) == std::vector<double>{7, 0});
}

TEST_CASE("in-place changes of a non-leaf continue its history: gradients as out of place") {
  tf::manual_seed(5);
  const Tensor a0 = tf::randn({3, 4}, f64), b0 = tf::randn({4}, f64), c0 = tf::randn({3, 4}, f64);
  const Tensor weight = tf::randn({3, 4}, f64);
  // In place: h = a * 3; h += 2 b; h *= c; h -= a; h.mul_(0.5); loss = sum(h * weight)
  Tensor a = a0.clone().requires_grad_(), b = b0.clone().requires_grad_(),
         c = c0.clone().requires_grad_();
  Tensor h = a * 3.0;
  h.add_(b, 2.0).mul_(c).sub_(a).mul_(0.5);
  tf::sum(h * weight).backward();
  // Out of place.
  Tensor a2 = a0.clone().requires_grad_(), b2 = b0.clone().requires_grad_(),
         c2 = c0.clone().requires_grad_();
  const Tensor h2 = ((a2 * 3.0 + b2 * 2.0) * c2 - a2) * 0.5;
  tf::sum(h2 * weight).backward();
  CHECK(values(h) == values(h2));
  for (const auto& [got, want] : {std::pair{a.grad(), a2.grad()}, std::pair{b.grad(), b2.grad()},
                                  std::pair{c.grad(), c2.grad()}}) {
    const std::vector<double> g = values(got), e = values(want);
    REQUIRE(g.size() == e.size());
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(e[i]).epsilon(1e-12));
  }
}

TEST_CASE("copy_ and zero_ under autograd: the source gets the gradient, the old values none") {
  Tensor src = leaf({1, 2}, {2});
  Tensor base = leaf({5, 6, 7, 8}, {2, 2});
  Tensor h = base * 1.0;
  h.copy_(src);  // broadcast over the rows
  CHECK(h.requires_grad());
  tf::sum(h * tf::from<double>({1, 2, 3, 4}, {2, 2})).backward();
  CHECK(values(src.grad()) == std::vector<double>{4, 6});
  CHECK(!base.grad().defined());  // the old values were overwritten

  // A buffer outside autograd takes a history from its source (as PyTorch's copy_ does).
  Tensor buffer = tf::zeros({2}, f64);
  Tensor s = leaf({3, 4}, {2});
  buffer.copy_(s);
  CHECK(buffer.requires_grad());
  tf::sum(buffer * buffer).backward();
  CHECK(values(s.grad()) == std::vector<double>{6, 8});

  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 2.0;
  y.zero_();
  tf::sum(y + x).backward();
  CHECK(values(x.grad()) == std::vector<double>{1, 1});  // only through "+ x"
}

TEST_CASE("mul_ by its own input: the saved operand changed, so the backward refuses") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = x * 1.0;
  h.mul_(h);
  CHECK(error_of([&] { tf::sum(h).backward(); }).find("modified in place") != std::string::npos);
}

TEST_CASE("overlapping copies are refused, an identical one is a no-op") {
  Tensor x = tf::arange(0.0, 8.0, 1.0, f64);
  const std::string message = error_of([&] { tf::raw::copy(x.slice(0, 0, 7), x.slice(0, 1, 8)); });
  CHECK(message.find("copy: the source and the destination overlap in memory") !=
        std::string::npos);
  CHECK(values(x) == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7});  // untouched
  // Disjoint parts of one storage copy as they should.
  tf::raw::copy(x.slice(0, 0, 4), x.slice(0, 4, 8));
  CHECK(values(x) == std::vector<double>{0, 1, 2, 3, 0, 1, 2, 3});
  tf::raw::copy(x, x);  // the same elements: nothing to do
  CHECK(values(x) == std::vector<double>{0, 1, 2, 3, 0, 1, 2, 3});
  // The in-place methods go through the same check.
  CHECK(error_of([&] { x.slice(0, 1, 8).copy_(x.slice(0, 0, 7)); }).find("overlap") !=
        std::string::npos);
  // An expanded destination has elements that share memory.
  const Tensor row = tf::zeros({1, 3}, f64);
  CHECK(error_of([&] {
          tf::raw::copy(tf::ones({2, 3}, f64), row.expand({2, 3}));
        }).find("do not share memory") != std::string::npos);
}

namespace {

// Returns a gradient of a fixed dtype and shape, whatever the input.
struct BadGradient : tf::autograd::Function {
  BadGradient(tf::DType dtype_in, Shape shape_in) : dtype(dtype_in), shape(std::move(shape_in)) {}
  tf::DType dtype;
  Shape shape;
  Tensor forward(const std::vector<Tensor>& in) override { return in[0] * 2.0; }
  std::vector<Tensor> backward(const Tensor&) override {
    return {tf::zeros(shape, {.dtype = dtype})};
  }
  std::string name() const override { return "BadGradient"; }
};

// Keeps its input for the backward: x^2.
struct Square : tf::autograd::Function {
  Tensor x;
  Tensor forward(const std::vector<Tensor>& in) override {
    x = in[0];
    return in[0] * in[0];
  }
  std::vector<Tensor> backward(const Tensor& g) override { return {g * 2.0 * x}; }
  std::string name() const override { return "Square"; }
};

}  // namespace

TEST_CASE("custom function: a gradient of another dtype or shape is an Error") {
  Tensor x = tf::zeros({3});
  x.requires_grad_();
  const Tensor y =
      tf::autograd::apply(std::make_shared<BadGradient>(tf::DType::int64, Shape{3}), {x});
  const std::string message = error_of([&] { tf::sum(y).backward(); });
  CHECK(message.find("BadGradient: backward returned a int64 gradient for input 0, a float32") !=
        std::string::npos);
  CHECK(!x.grad().defined());

  const Tensor y2 =
      tf::autograd::apply(std::make_shared<BadGradient>(tf::DType::float32, Shape{4}), {x});
  CHECK(error_of([&] { tf::sum(y2).backward(); }).find("of shape [4] for input 0") !=
        std::string::npos);
}

TEST_CASE("custom function: an input it kept and that changed in place stops its backward") {
  Tensor x = leaf({1, 2}, {2});
  const Tensor y = tf::autograd::apply(std::make_shared<Square>(), {x});
  {
    const tf::NoGradGuard no_grad;
    x.mul_(3.0);
  }
  CHECK(error_of([&] { tf::sum(y).backward(); }).find("'Square' saved for its backward") !=
        std::string::npos);
}

TEST_CASE("var of an empty reduction is NaN, as PyTorch's") {
  const Tensor empty = tf::zeros({0}, f64);
  CHECK(std::isnan(tf::var(empty, {0}).item<double>()));
  CHECK(std::isnan(tf::var(empty, {0}, /*unbiased=*/false).item<double>()));
  CHECK(std::isnan(tf::var(tf::ones({1}, f64), {0}).item<double>()));
  CHECK(tf::var(tf::from<double>({1, 3}, {2}), {0}).item<double>() == 2.0);
}

TEST_CASE("cross_entropy and log_softmax are never positive in float32") {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor logits = tf::from<float>({0.f, static_cast<float>(-inf)}, {1, 2});
  const Tensor target = tf::from<std::int64_t>({0}, {1});
  CHECK(tf::cross_entropy(logits, target).item<double>() == 0.0);
  tf::manual_seed(9);
  const Tensor scaled = tf::randn({520, 128}) * 30.0;
  CHECK(tf::max(tf::log_softmax(scaled, -1)).item<double>() <= 0.0);
}
