// Linear and FeedForward run the fused linear op (the product with its bias, and fc1's relu, gelu
// or gelu_tanh inside it): their outputs and every gradient equal the composite path they replace
// (matmul with the transposed weight, add the bias, then the activation): in float64 to the last
// few bits (the same BLAS calls and additions; the bias gradient's column sums grouped
// differently) and to float32 rounding in float32.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::max_abs_diff;

namespace {

// The largest |t| (for a tolerance relative to the values' size).
double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(kFloat64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// y = x W^T + b from the primitives, as Linear::forward computed it before it fused.
Tensor composite_linear(const nn::Linear& fc, const Tensor& x) {
  const std::int64_t in = fc.weight.size(1), out = fc.weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = matmul(x.reshape({-1, in}), fc.weight.transpose(0, 1));
  if (fc.bias.defined()) y = add(y, fc.bias);
  return y.reshape(out_shape);
}

// fc2(act(fc1(x))) from the primitives (no dropout).
Tensor composite_feed_forward(const nn::FeedForward& ff, const Tensor& x,
                              nn::Activation activation) {
  return composite_linear(*ff.fc2, nn::activate(composite_linear(*ff.fc1, x), activation));
}

struct Grads {
  Tensor y;
  std::vector<Tensor> grads;  // x's, then each parameter's
};

// The output of `forward` and the gradients of sum(y * r) (r fixed), for x and every parameter.
Grads run(nn::Module& m, const Tensor& x, const Tensor& r,
          const std::function<Tensor(const Tensor&)>& forward) {
  m.zero_grad();
  const Tensor leaf = x.detach().requires_grad_(true);
  Tensor y = forward(leaf);
  sum(mul(y, r)).backward();
  Grads g{y.detach(), {leaf.grad()}};
  for (const Tensor& p : m.parameters()) g.grads.push_back(p.grad());
  return g;
}

// Values and gradients of the fused and composite paths agree within rtol of their size.
void check_same(const Grads& fused, const Grads& composite, double rtol, const std::string& what) {
  INFO(what);
  CHECK(max_abs_diff(fused.y, composite.y) <= rtol * max_abs(composite.y));
  REQUIRE(fused.grads.size() == composite.grads.size());
  for (std::size_t i = 0; i < fused.grads.size(); ++i) {
    INFO("gradient " << i << " (0 is x's, then the parameters')");
    REQUIRE(fused.grads[i].defined());
    CHECK(max_abs_diff(fused.grads[i], composite.grads[i]) <= rtol * max_abs(composite.grads[i]));
  }
}

// float64: to a few units in the last place (the fused layer's bias gradient sums its rows in
// blocks, the composite's sum in one run); float32: the sums run in another order (oneDNN with
// the bias inside against OpenBLAS or oneDNN and a separate addition).
double rtol_of(DType dtype) {
  return dtype == kFloat64 ? 1e-14 : 2e-6;
}

}  // namespace

TEST_CASE("Linear: the fused product equals matmul + add, values and gradients") {
  manual_seed(21);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (bool with_bias : {true, false}) {
      for (const Shape& x_shape : {Shape{4, 9, 33}, Shape{130, 33}, Shape{33}}) {
        nn::Linear fc(33, 70, with_bias);
        fc.to(dtype);
        const Tensor x = randn(x_shape, {.dtype = dtype});
        Shape y_shape = x_shape;
        y_shape.back() = 70;
        const Tensor r = randn(y_shape, {.dtype = dtype});
        const Grads fused = run(fc, x, r, [&](const Tensor& in) { return fc.forward(in); });
        const Grads plain =
            run(fc, x, r, [&](const Tensor& in) { return composite_linear(fc, in); });
        check_same(fused, plain, rtol_of(dtype),
                   std::string(dtype_name(dtype)) + (with_bias ? " with bias" : " without bias") +
                       " x " + shape_str(x_shape));
      }
    }
  }
}

TEST_CASE("Linear: a transposed input is read through a copy, with the same result") {
  manual_seed(22);
  nn::Linear fc(6, 5);
  fc.to(kFloat64);
  const Tensor x = randn({3, 6, 4}, {.dtype = kFloat64}).transpose(1, 2);  // [3, 4, 6], strided
  const Tensor r = randn({3, 4, 5}, {.dtype = kFloat64});
  const Grads fused = run(fc, x, r, [&](const Tensor& in) { return fc.forward(in); });
  const Grads plain = run(fc, x, r, [&](const Tensor& in) { return composite_linear(fc, in); });
  check_same(fused, plain, 0.0, "transposed x");
}

TEST_CASE("FeedForward: relu, gelu and gelu_tanh fused into fc1 equal the composite path") {
  manual_seed(23);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (nn::Activation activation : {nn::Activation::relu, nn::Activation::gelu,
                                      nn::Activation::gelu_tanh, nn::Activation::tanh}) {
      nn::FeedForward ff(24, 66, activation);
      ff.to(dtype);
      const Tensor x = randn({3, 5, 24}, {.dtype = dtype});
      const Tensor r = randn({3, 5, 24}, {.dtype = dtype});
      const std::string what =
          std::string(dtype_name(dtype)) + " " + nn::activation_name(activation);
      // Training: gradients of x and of all four parameters.
      const Grads fused = run(ff, x, r, [&](const Tensor& in) { return ff.forward(in); });
      const Grads plain = run(
          ff, x, r, [&](const Tensor& in) { return composite_feed_forward(ff, in, activation); });
      check_same(fused, plain, rtol_of(dtype), what);
      // Inference: the activation runs inside fc1's product, gelu included.
      const NoGradGuard no_grad;
      const Tensor y = ff.forward(x), expected = composite_feed_forward(ff, x, activation);
      INFO(what << " without gradients");
      CHECK(max_abs_diff(y, expected) <= (dtype == kFloat64 ? 1e-15 : 2e-6) * max_abs(expected));
    }
  }
}

TEST_CASE("Linear and FeedForward: float64 gradient checks through the fused op") {
  manual_seed(24);
  for (nn::Activation activation :
       {nn::Activation::relu, nn::Activation::gelu, nn::Activation::gelu_tanh}) {
    nn::FeedForward ff(4, 7, activation);
    INFO(nn::activation_name(activation));
    CHECK(test::gradcheck_module(ff, test::randn64({2, 3, 4}),
                                 [&](const Tensor& x) { return ff.forward(x); }));
  }
  nn::Linear fc(5, 3);
  CHECK(test::gradcheck_module(fc, test::randn64({4, 5}),
                               [&](const Tensor& x) { return fc.forward(x, Epilogue::gelu); }));
}

namespace {

// The calls each op made while `run` ran, by the profiler's row name ("linear gelu", "unary
// gelu", "binary add").
std::map<std::string, std::int64_t> calls_of(const std::function<void()>& run) {
  const Profiler profiler;
  run();
  std::map<std::string, std::int64_t> calls;
  for (const OpProfile& row : profiler.ops()) calls[row.name] += row.calls;
  return calls;
}

}  // namespace

TEST_CASE("FeedForward: one backend call per layer, with the bias and activation inside it") {
  manual_seed(25);
  const Tensor x = randn({2, 3, 8});
  using Calls = std::map<std::string, std::int64_t>;
  nn::FeedForward gelu_ff(8, 16, nn::Activation::gelu);
  nn::FeedForward relu_ff(8, 16, nn::Activation::relu);
  nn::FeedForward tanh_ff(8, 16, nn::Activation::tanh);
  // Inference: gelu inside fc1's product, then fc2 with its bias.
  {
    const NoGradGuard no_grad;
    CHECK(calls_of([&] { gelu_ff.forward(x); }) == Calls{{"linear gelu", 1}, {"linear", 1}});
  }
  // Training: relu stays fused; gelu's product stops at the bias and the unary op keeps z.
  CHECK(calls_of([&] { relu_ff.forward(x); }) == Calls{{"linear relu", 1}, {"linear", 1}});
  CHECK(calls_of([&] { gelu_ff.forward(x); }) == Calls{{"linear", 2}, {"unary gelu", 1}});
  // An activation no epilogue applies runs after fc1.
  CHECK(calls_of([&] { tanh_ff.forward(x); }) == Calls{{"linear", 2}, {"unary tanh", 1}});
}
