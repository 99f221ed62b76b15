// The fused linear op: float64 gradient checks for every epilogue with and without bias, x of
// shape [B, n, K], [M, K] and [K] in every layout (and as rows of a wider matrix, which the
// backend reads in place); which node records the activation; values against the composite
// matmul + add + activation; and bad input.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "gradcheck_cases.h"

namespace tf = tinyformer;
using doctest::Contains;
using tf::Epilogue;
using tf::Error;
using tf::Tensor;
using tf::testing::check_all_layouts;
using tf::testing::Domain;
using tf::testing::expect_gradcheck;
using tf::testing::make_leaf;

namespace {

// act(x W^T + b) from the primitives the fused op replaces.
Tensor composite(const Tensor& x, const Tensor& w, const Tensor& b, Epilogue epilogue) {
  Tensor y = tf::matmul(x, w.transpose(0, 1));
  if (b.defined()) y = tf::add(y, b);
  return epilogue == Epilogue::none ? y : tf::unary(tf::epilogue_op(epilogue), y);
}

double max_abs(const Tensor& t) {
  return tf::max(tf::abs(t.to(tf::kFloat64))).item<double>();
}
double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max_abs(tf::sub(a.to(tf::kFloat64), b.to(tf::kFloat64)));
}

}  // namespace

TEST_CASE("gradcheck: linear, every epilogue, with and without bias, in every layout") {
  const std::vector<std::pair<const char*, tf::Shape>> xs = {
      {"x [B, n, K]", {2, 3, 4}}, {"x [M, K]", {5, 4}}, {"x [K]", {4}}};
  for (Epilogue epilogue : tf::epilogues) {
    for (bool with_bias : {true, false}) {
      for (const auto& [x_name, x_shape] : xs) {
        const std::string name = std::string("linear ") + tf::epilogue_name(epilogue) + " " +
                                 x_name + (with_bias ? " with bias" : " without bias");
        std::vector<tf::Shape> shapes = {x_shape, {3, 4}};
        if (with_bias) shapes.push_back({3});
        check_all_layouts(
            name,
            [epilogue, with_bias](auto& in) {
              return tf::linear(in[0], in[1], with_bias ? in[2] : Tensor(), epilogue);
            },
            shapes);
      }
    }
  }
}

TEST_CASE("gradcheck: linear with x as rows of a wider matrix, and x also the weight") {
  tf::manual_seed(3);
  for (Epilogue epilogue : tf::epilogues) {
    const std::string e = tf::epilogue_name(epilogue);
    // Columns 2..6 of a [2, 3, 9] leaf: the rows fold into one stride (9), read in place.
    const Tensor wide = make_leaf({2, 3, 9}, Domain::any), w = make_leaf({4, 5}, Domain::any),
                 b = make_leaf({4}, Domain::any);
    expect_gradcheck(
        [epilogue](auto& in) { return tf::linear(in[0].narrow(2, 2, 5), in[1], in[2], epilogue); },
        {wide, w, b}, "linear " + e + ", x rows of a wider matrix");
    // The same leaf as x and as the weight: both gradients land on it.
    const Tensor square = make_leaf({3, 3}, Domain::any);
    expect_gradcheck([epilogue](auto& in) { return tf::linear(in[0], in[0], {}, epilogue); },
                     {square}, "linear " + e + ", x is the weight");
  }
}

TEST_CASE("linear: relu stays fused when training; gelu keeps its pre-activation") {
  tf::manual_seed(5);
  const Tensor x = make_leaf({6, 5}, Domain::any), w = make_leaf({4, 5}, Domain::any),
               b = make_leaf({4}, Domain::any);
  CHECK(tf::linear(x, w, b, Epilogue::relu).grad_fn()->name() == "linear");
  CHECK(tf::linear(x, w, b, Epilogue::none).grad_fn()->name() == "linear");
  // gelu's derivative reads z = x W^T + b: the product stops at the bias, and the activation is
  // the unary op's node, which saves z.
  CHECK(tf::linear(x, w, b, Epilogue::gelu).grad_fn()->name() == "gelu");
  CHECK(tf::linear(x, w, b, Epilogue::gelu_tanh).grad_fn()->name() == "gelu_tanh");
  const Tensor fused_gelu = tf::linear(x, w, b, Epilogue::gelu);
  {
    const tf::NoGradGuard no_grad;
    const Tensor y = tf::linear(x, w, b, Epilogue::gelu);
    CHECK(!y.requires_grad());
    CHECK(max_abs_diff(y, fused_gelu) <= 1e-15);
  }
}

TEST_CASE("linear: values equal matmul + add + activation") {
  tf::manual_seed(9);
  for (tf::DType dtype : {tf::kFloat32, tf::kFloat64}) {
    // float64 runs the same BLAS call as matmul, then the same additions and activation math;
    // float32 sums in another order (oneDNN against OpenBLAS, the bias added inside).
    const double rtol = dtype == tf::kFloat64 ? 0.0 : 1e-6;
    for (Epilogue epilogue : tf::epilogues) {
      for (const tf::Shape& x_shape : {tf::Shape{3, 7, 33}, tf::Shape{130, 70}, tf::Shape{1, 9}}) {
        const std::int64_t k = x_shape.back();
        const Tensor x = tf::randn(x_shape, {.dtype = dtype});
        const Tensor w = tf::randn({45, k}, {.dtype = dtype});
        const Tensor b = tf::randn({45}, {.dtype = dtype});
        INFO(tf::dtype_name(dtype), " ", tf::epilogue_name(epilogue), " x ",
             tf::shape_str(x_shape));
        const tf::NoGradGuard no_grad;  // the fully fused path, gelu included
        const Tensor expected = composite(x, w, b, epilogue);
        CHECK(max_abs_diff(tf::linear(x, w, b, epilogue), expected) <= rtol * max_abs(expected));
        const Tensor expected_nb = composite(x, w, {}, epilogue);
        CHECK(max_abs_diff(tf::linear(x, w, {}, epilogue), expected_nb) <=
              rtol * max_abs(expected_nb));
      }
    }
  }
}

TEST_CASE("errors: linear names what it expected and what it got") {
  const auto f32 = [](const tf::Shape& shape) { return tf::zeros(shape); };
  const Tensor x = f32({2, 3}), w = f32({4, 3}), b = f32({4});
  CHECK_THROWS_WITH_AS(tf::linear(Tensor(), w, b),
                       Contains("linear: expected defined x and weight"), Error);
  CHECK_THROWS_WITH_AS(tf::linear(x, f32({4, 3, 1}), b),
                       Contains("linear: expected weight of shape [N, K], got [4, 3, 1]"), Error);
  CHECK_THROWS_WITH_AS(
      tf::linear(x, f32({4, 5}), b),
      Contains("linear: expected x of shape [..., 5] for weight [4, 5], got [2, 3]"), Error);
  CHECK_THROWS_WITH_AS(tf::linear(f32({}), w, b), Contains("linear: expected x of shape [..., 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::linear(x, w, f32({3})),
                       Contains("linear: expected bias of shape [4] for weight [4, 3], got [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::linear(x, w, f32({1, 4})), Contains("got [1, 4]"), Error);
  CHECK_THROWS_WITH_AS(tf::linear(x, w.to(tf::kFloat64), b),
                       Contains("linear: expected x and weight of one dtype, got x float32 and "
                                "weight float64"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::linear(x, w, b.to(tf::kFloat64)),
                       Contains("linear: expected bias of dtype float32 (x's and weight's), got "
                                "float64"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::linear(x.to(tf::kInt64), w.to(tf::kInt64), {}),
                       Contains("linear: expected floating tensors, got int64"), Error);
  CHECK_THROWS_WITH_AS(tf::linear(x, w, b, static_cast<Epilogue>(9)),
                       Contains("linear: unknown epilogue 9"), Error);
  if (tf::cuda_available()) {
    CHECK_THROWS_WITH_AS(tf::linear(x, w.to(tf::Device::cuda(0)), b),
                         Contains("linear: expected x and weight on one device"), Error);
  }
}
