// Bad input to every op family: each must throw tinyformer::Error naming the op and what was
// wrong, never crash or return garbage.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops.h"
#include "core/backend.h"

namespace tf = tinyformer;
using doctest::Contains;
using tf::Error;
using tf::Tensor;

namespace {
Tensor f64(const tf::Shape& shape) {
  return tf::zeros(shape, {.dtype = tf::kFloat64});
}
}  // namespace

TEST_CASE("errors: undefined tensors") {
  const Tensor u;
  const Tensor x = f64({2, 3});
  CHECK_THROWS_WITH_AS(tf::add(u, x), Contains("add: expected defined tensors"), Error);
  CHECK_THROWS_WITH_AS(tf::exp(u), Contains("exp"), Error);
  CHECK_THROWS_WITH_AS(tf::view(u, {6}), Contains("view: expected a defined tensor"), Error);
  CHECK_THROWS_WITH_AS(tf::sum(u), Contains("sum: expected a defined tensor"), Error);
  CHECK_THROWS_WITH_AS(tf::matmul(x, u), Contains("matmul: expected defined tensors"), Error);
  CHECK_THROWS_WITH_AS(tf::softmax(u, 0), Contains("softmax"), Error);
  CHECK_THROWS_WITH_AS(tf::layer_norm(u, {3}), Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(tf::cat({x, u}, 0), Contains("cat: tensor 1 is undefined"), Error);
  CHECK_THROWS_WITH_AS(tf::conv1d(f64({1, 2, 4}), u), Contains("conv1d"), Error);
  CHECK_THROWS_WITH_AS(tf::embedding(u, tf::arange(2)), Contains("embedding"), Error);
  CHECK_THROWS_WITH_AS(tf::dropout(u, 0.5, true), Contains("dropout"), Error);
  CHECK_THROWS_WITH_AS(tf::cross_entropy(x, u), Contains("cross_entropy"), Error);
}

TEST_CASE("errors: dims out of range") {
  const Tensor x = f64({2, 3});
  CHECK_THROWS_WITH_AS(tf::transpose(x, 0, 2), Contains("transpose: dim 2 is out of range"), Error);
  CHECK_THROWS_WITH_AS(tf::sum(x, {-3}), Contains("sum: dim -3 is out of range"), Error);
  CHECK_THROWS_WITH_AS(tf::mean(x, {2}), Contains("mean"), Error);
  CHECK_THROWS_WITH_AS(tf::softmax(x, 2), Contains("softmax: dim 2"), Error);
  CHECK_THROWS_WITH_AS(tf::select(x, 2, 0), Contains("select"), Error);
  CHECK_THROWS_WITH_AS(tf::select(x, 0, 2), Contains("select: index 2 is out of range"), Error);
  CHECK_THROWS_WITH_AS(tf::select(x, 1, -4), Contains("select: index -4"), Error);
  CHECK_THROWS_WITH_AS(tf::unsqueeze(x, 3), Contains("unsqueeze"), Error);
  CHECK_THROWS_WITH_AS(tf::squeeze(x, -3), Contains("squeeze"), Error);
  CHECK_THROWS_WITH_AS(tf::slice(x, 2, 0, 1), Contains("slice"), Error);
  CHECK_THROWS_WITH_AS(tf::max(x, 5), Contains("max"), Error);
  CHECK_THROWS_WITH_AS(tf::argmax(x, -3), Contains("argmax"), Error);
  CHECK_THROWS_WITH_AS(tf::cat({x, x}, 2), Contains("cat"), Error);
  CHECK_THROWS_WITH_AS(tf::stack({x, x}, 3), Contains("stack"), Error);
  CHECK_THROWS_WITH_AS(tf::split(x, 1, 2), Contains("split"), Error);
  CHECK_THROWS_WITH_AS(tf::flatten(x, 1, 0), Contains("flatten: start_dim 1 comes after"), Error);
  CHECK_THROWS_WITH_AS(tf::permute(x, {0, 0}), Contains("permute: dim 0 appears more than once"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::permute(x, {0}), Contains("permute: expected 2 dims"), Error);
  CHECK_THROWS_WITH_AS(tf::select(f64({}), 0, 0), Contains("0-dim"), Error);
}

TEST_CASE("errors: duplicate reduction dims") {
  const Tensor x = f64({2, 3});
  CHECK_THROWS_WITH_AS(tf::sum(x, {1, -1}), Contains("sum: dim 1 appears more than once"), Error);
  CHECK_THROWS_WITH_AS(tf::mean(x, {0, 0}), Contains("more than once"), Error);
  CHECK_THROWS_WITH_AS(tf::var(x, {0, -2}), Contains("var"), Error);
}

TEST_CASE("errors: view and reshape shapes") {
  const Tensor x = f64({2, 3});
  CHECK_THROWS_WITH_AS(tf::view(x, {4, -1}),
                       Contains("view: shape [4, -1] is invalid for a tensor of 6"), Error);
  CHECK_THROWS_WITH_AS(tf::reshape(x, {-1, -1}), Contains("only one dim can be -1"), Error);
  CHECK_THROWS_WITH_AS(tf::reshape(x, {7}), Contains("reshape"), Error);
  CHECK_THROWS_WITH_AS(tf::reshape(x, {-2, 3}), Contains("reshape"), Error);
  // A transpose is not viewable as one flat dim: view refuses and points at reshape.
  CHECK_THROWS_WITH_AS(tf::view(x.transpose(0, 1), {6}), Contains("use reshape"), Error);
  CHECK_NOTHROW(tf::reshape(x.transpose(0, 1), {6}));
  CHECK_THROWS_WITH_AS(tf::expand(x, {3, 3}), Contains("expand"), Error);
  CHECK_THROWS_WITH_AS(tf::expand(x, {3}), Contains("expand"), Error);
  CHECK_THROWS_WITH_AS(tf::expand(x, {-1, 2, 3}), Contains("expand: -1 is not allowed"), Error);
}

TEST_CASE("errors: slice, narrow, split arguments") {
  const Tensor x = f64({4, 3});
  CHECK_THROWS_WITH_AS(tf::slice(x, 0, 0, 4, 0), Contains("slice: expected a positive step, got 0"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::slice(x, 0, 0, 4, -1), Contains("positive step"), Error);
  CHECK_THROWS_WITH_AS(tf::narrow(x, 0, 3, 2), Contains("narrow"), Error);
  CHECK_THROWS_WITH_AS(tf::narrow(x, 0, 5, 0), Contains("narrow: start 5"), Error);
  CHECK_THROWS_WITH_AS(tf::narrow(x, 0, 0, -1), Contains("narrow"), Error);
  CHECK_THROWS_WITH_AS(tf::split(x, 0, 0), Contains("split: expected a positive split_size"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::chunk(x, 0, 0), Contains("chunk"), Error);
}

TEST_CASE("errors: elementwise shapes, dtypes and devices") {
  CHECK_THROWS_WITH_AS(tf::add(f64({2, 3}), f64({4})), Contains("add: shapes [2, 3] and [4]"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::mul(f64({2}), tf::zeros({2})), Contains("mul: dtypes differ"), Error);
  // No type promotion (PyTorch would promote to float64): the message says what to do.
  CHECK_THROWS_WITH_AS(tf::add(tf::zeros({2}), f64({2})),
                       Contains("add: dtypes differ: float32 and float64 (no type promotion: "
                                "convert one side with .to()"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::exp(tf::arange(3)), Contains("exp: expected a floating tensor"), Error);
  CHECK_THROWS_WITH_AS(tf::where(f64({2}), f64({2}), f64({2})),
                       Contains("where: expected a bool condition"), Error);
  CHECK_THROWS_WITH_AS(tf::masked_fill(f64({2}), tf::ones({3, 2}, {.dtype = tf::kBool}), 0.0),
                       Contains("masked_fill"), Error);
}

TEST_CASE("errors: matmul") {
  CHECK_THROWS_WITH_AS(tf::matmul(f64({2, 3}), f64({4, 5})),
                       Contains("matmul: inner dimensions differ: [2, 3] @ [4, 5]"), Error);
  CHECK_THROWS_WITH_AS(tf::matmul(f64({3}), f64({4})),
                       Contains("matmul: inner dimensions differ: [3] @ [4]"), Error);
  CHECK_THROWS_WITH_AS(tf::matmul(f64({2, 2, 3}), f64({3, 3, 2})),
                       Contains("matmul: shapes [2] and [3] cannot be broadcast"), Error);
  CHECK_THROWS_WITH_AS(tf::matmul(f64({}), f64({3})),
                       Contains("matmul: expected tensors with at least one dim"), Error);
  CHECK_THROWS_WITH_AS(tf::matmul(f64({2, 3}), tf::zeros({3, 2})),
                       Contains("matmul: dtypes differ: float64 and float32"), Error);
  CHECK_THROWS_WITH_AS(tf::matmul(tf::arange(3), tf::arange(3)),
                       Contains("matmul: expected floating tensors, got int64"), Error);
}

TEST_CASE("errors: reductions") {
  // The sum of integers is an int64 count (tests/autograd/test_tensor_api.cpp); their mean is
  // refused, as in PyTorch.
  CHECK_THROWS_WITH_AS(tf::mean(tf::arange(3)), Contains("mean: expected a floating tensor"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::sum(tf::Tensor()), Contains("sum: expected a defined tensor"), Error);
  CHECK_THROWS_WITH_AS(tf::max(f64({0, 3})), Contains("max: expected a non-empty tensor"), Error);
  CHECK_THROWS_WITH_AS(tf::max(f64({2, 0}), 1), Contains("max: expected a non-empty dim"), Error);
  CHECK_THROWS_WITH_AS(tf::argmax(f64({2, 0}), 1), Contains("non-empty"), Error);
}

TEST_CASE("errors: softmax and layer_norm") {
  CHECK_THROWS_WITH_AS(tf::softmax(tf::arange(3), 0), Contains("softmax: expected a floating"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::log_softmax(tf::arange(3), 0), Contains("log_softmax"), Error);
  const Tensor x = f64({2, 3});
  CHECK_THROWS_WITH_AS(tf::layer_norm(x, {2}),
                       Contains("layer_norm: expected an input whose trailing dims are [2]"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::layer_norm(x, {1, 2, 3}), Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(tf::layer_norm(x, {}), Contains("non-empty normalized_shape"), Error);
  CHECK_THROWS_WITH_AS(tf::layer_norm(x, {3}, f64({4})),
                       Contains("layer_norm: expected a weight of shape [3], got [4]"), Error);
  CHECK_THROWS_WITH_AS(tf::layer_norm(x, {3}, {}, tf::zeros({3})),
                       Contains("layer_norm: the bias is float32"), Error);
  CHECK_THROWS_WITH_AS(tf::layer_norm(x, {3}, {}, {}, -1.0), Contains("eps"), Error);
}

TEST_CASE("errors: losses") {
  const Tensor logits = f64({3, 4});
  const Tensor targets = tf::from<std::int64_t>({0, 1, 2}, {3});
  CHECK_THROWS_WITH_AS(
      tf::cross_entropy(logits, tf::zeros({3})),
      Contains("cross_entropy: expected int64 class indices as targets, got float32"), Error);
  CHECK_THROWS_WITH_AS(tf::cross_entropy(logits, tf::from<std::int64_t>({0, 1}, {2})),
                       Contains("cross_entropy: expected targets of shape [3]"), Error);
  CHECK_THROWS_WITH_AS(tf::cross_entropy(logits, tf::zeros({3, 1}, {.dtype = tf::kInt64})),
                       Contains("got [3, 1]"), Error);
  CHECK_THROWS_WITH_AS(tf::cross_entropy(f64({2, 3, 4}), targets),
                       Contains("cross_entropy: expected scores of shape [N, C] or [C]"), Error);
  CHECK_THROWS_WITH_AS(tf::cross_entropy(tf::arange(3), targets),
                       Contains("cross_entropy: expected floating scores"), Error);
  CHECK_THROWS_WITH_AS(tf::cross_entropy(f64({3, 0}), targets), Contains("at least one class"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::nll_loss(logits, tf::zeros({3})), Contains("nll_loss: expected int64"),
                       Error);
  // A class index outside [0, C) is caught by the kernel, which names the row.
  CHECK_THROWS_AS(tf::cross_entropy(logits, tf::from<std::int64_t>({0, 4, 1}, {3})), Error);
  CHECK_THROWS_AS(tf::nll_loss(logits, tf::from<std::int64_t>({0, 1, -1}, {3})), Error);
}

TEST_CASE("errors: conv1d and pooling") {
  const Tensor x = f64({2, 3, 5});
  const Tensor w = f64({4, 3, 2});
  CHECK_THROWS_WITH_AS(tf::conv1d(x, f64({4, 2, 2})), Contains("conv1d: the input has 3 channels"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::conv1d(x, f64({4, 3})),
                       Contains("conv1d: expected a weight of shape [Cout, Cin, K]"), Error);
  CHECK_THROWS_WITH_AS(tf::conv1d(f64({5}), w),
                       Contains("conv1d: expected an input of shape [B, C, L] or [C, L]"), Error);
  CHECK_THROWS_WITH_AS(tf::conv1d(x, w, f64({3})), Contains("conv1d: expected a bias of shape [4]"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::conv1d(x, w, {}, 0), Contains("conv1d: expected a positive stride"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::conv1d(x, w, {}, 1, -1), Contains("conv1d: expected padding >= 0"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::conv1d(x, f64({4, 3, 8})), Contains("longer than the padded input"),
                       Error);
  CHECK_NOTHROW(tf::conv1d(x, f64({4, 3, 7}), {}, 1, 1));
  CHECK_THROWS_WITH_AS(tf::conv1d(x, tf::zeros({4, 3, 2})),
                       Contains("conv1d: the weight is float32"), Error);
  CHECK_THROWS_WITH_AS(tf::avg_pool1d(x, 0), Contains("avg_pool1d: expected a positive kernel"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::max_pool1d(x, 2, -1), Contains("max_pool1d: expected a positive stride"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::max_pool1d(x, 6), Contains("max_pool1d: the kernel (6) is longer"),
                       Error);
  CHECK_THROWS_WITH_AS(tf::avg_pool1d(tf::arange(5).view({1, 1, 5}), 2),
                       Contains("avg_pool1d: expected a floating input"), Error);
}

TEST_CASE("errors: embedding and dropout") {
  const Tensor w = f64({5, 3});
  CHECK_THROWS_WITH_AS(tf::embedding(w, tf::zeros({2})),
                       Contains("embedding: expected int64 indices"), Error);
  CHECK_THROWS_WITH_AS(tf::embedding(f64({5}), tf::arange(2)),
                       Contains("embedding: expected a weight of shape [V, D]"), Error);
  // An index outside [0, V) is caught by the kernel.
  CHECK_THROWS_AS(tf::embedding(w, tf::from<std::int64_t>({0, 5}, {2})), Error);
  CHECK_THROWS_AS(tf::embedding(w, tf::from<std::int64_t>({-1}, {1})), Error);
  const Tensor x = f64({2, 3});
  CHECK_THROWS_WITH_AS(tf::dropout(x, 1.5, true),
                       Contains("dropout: expected a probability p in [0, 1], got 1.5"), Error);
  CHECK_THROWS_WITH_AS(tf::dropout(x, std::nan(""), true), Contains("dropout: expected"), Error);
  CHECK_THROWS_WITH_AS(tf::dropout(x, -0.1, true), Contains("dropout"), Error);
  CHECK_THROWS_WITH_AS(tf::dropout(tf::arange(3), 0.5, true),
                       Contains("dropout: expected a floating"), Error);
}

TEST_CASE("errors: cat and stack") {
  CHECK_THROWS_WITH_AS(tf::cat({}, 0), Contains("cat: expected at least one tensor"), Error);
  CHECK_THROWS_WITH_AS(tf::cat({f64({2, 3}), f64({3, 2})}, 0),
                       Contains("cat: expected shapes that match [2, 3] except in dim 0"), Error);
  CHECK_THROWS_WITH_AS(tf::cat({f64({2, 3}), tf::zeros({2, 3})}, 0),
                       Contains("cat: tensor 1 is float32"), Error);
  CHECK_THROWS_WITH_AS(tf::cat({f64({2, 3}), f64({2})}, 0), Contains("cat"), Error);
  CHECK_THROWS_WITH_AS(tf::stack({f64({2, 3}), f64({2, 2})}, 0),
                       Contains("stack: expected every tensor of shape [2, 3]"), Error);
  CHECK_THROWS_WITH_AS(tf::stack({}, 0), Contains("stack"), Error);
}

TEST_CASE("errors: to(device) without CUDA") {
  if (tf::cuda_available()) return;
  CHECK_THROWS_AS(f64({2}).to(tf::Device::cuda()), Error);
}
