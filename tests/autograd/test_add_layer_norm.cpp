// add_layer_norm: float64 gradient checks in every layout, and the fused op held against the
// composite layer_norm(add(x, residual)) in values and gradients.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gradcheck_cases.h"

namespace tf = tinyformer;
using tf::Tensor;
using tf::testing::check_all_layouts;
using tf::testing::Domain;
using tf::testing::expect_gradcheck;
using tf::testing::make_leaf;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = tf::raw::to_dtype(tf::raw::contiguous(a), tf::DType::float64).to_vector<double>();
  const auto vb = tf::raw::to_dtype(tf::raw::contiguous(b), tf::DType::float64).to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

}  // namespace

TEST_CASE("gradcheck: add_layer_norm") {
  check_all_layouts("add_layer_norm weight and bias",
                    [](auto& in) { return tf::add_layer_norm(in[0], in[1], {3}, in[2], in[3]); },
                    {{2, 3}, {2, 3}, {3}, {3}});
  check_all_layouts("add_layer_norm without affine",
                    [](auto& in) { return tf::add_layer_norm(in[0], in[1], {3}); },
                    {{2, 2, 3}, {2, 2, 3}});
  check_all_layouts("add_layer_norm over two dims",
                    [](auto& in) {
                      return tf::add_layer_norm(in[0], in[1], {2, 3}, {}, in[2]);
                    },
                    {{2, 2, 3}, {2, 2, 3}, {2, 3}});
  // One tensor as both x and residual: its gradient is the sum of both.
  tf::manual_seed(3);
  Tensor x = make_leaf({3, 4}, Domain::any);
  expect_gradcheck([](auto& in) { return tf::add_layer_norm(in[0], in[0], {4}); }, {x},
                   "add_layer_norm(x, x)");
}

TEST_CASE("add_layer_norm equals the composite layer_norm(add(x, residual))") {
  for (tf::DType dtype : {tf::DType::float32, tf::DType::float64}) {
    for (bool affine : {true, false}) {
      INFO(tf::dtype_name(dtype), affine ? " with weight and bias" : " without affine");
      tf::manual_seed(17);
      const tf::TensorOptions opts{.dtype = dtype};
      // An offset mean and odd sizes: [3, 5, 37].
      const Tensor x0 = tf::randn({3, 5, 37}, opts) + 4.0, r0 = tf::randn({3, 5, 37}, opts);
      const Tensor w0 = tf::rand({37}, opts) + 0.5, b0 = tf::randn({37}, opts);
      const Tensor g = tf::randn({3, 5, 37}, opts);
      auto run = [&](bool fused) {
        Tensor x = x0.detach().requires_grad_(true), r = r0.detach().requires_grad_(true);
        Tensor w = affine ? w0.detach().requires_grad_(true) : Tensor();
        Tensor b = affine ? b0.detach().requires_grad_(true) : Tensor();
        Tensor y = fused ? tf::add_layer_norm(x, r, {37}, w, b)
                         : tf::layer_norm(tf::add(x, r), {37}, w, b);
        tf::sum(tf::mul(y, g)).backward();
        std::vector<Tensor> out = {y, x.grad(), r.grad()};
        if (affine) out.insert(out.end(), {w.grad(), b.grad()});
        return out;
      };
      const std::vector<Tensor> fused = run(true), composite = run(false);
      const double tol = dtype == tf::DType::float32 ? 1e-4 : 1e-11;
      const char* names[] = {"y", "grad x", "grad residual", "grad weight", "grad bias"};
      for (std::size_t i = 0; i < fused.size(); ++i) {
        INFO(names[i]);
        CHECK(fused[i].shape() == composite[i].shape());
        CHECK(max_abs_diff(fused[i], composite[i]) < tol);
      }
    }
  }
}

TEST_CASE("add_layer_norm: bad input throws Error naming the op") {
  const Tensor x = tf::randn({2, 3});
  CHECK_THROWS_WITH_AS(tf::add_layer_norm(x, tf::randn({2, 4}), {3}),
                       doctest::Contains("add_layer_norm: expected a residual"), tf::Error);
  CHECK_THROWS_WITH_AS(tf::add_layer_norm(x, tf::randn({1, 3}), {3}),
                       doctest::Contains("add_layer_norm"), tf::Error);
  CHECK_THROWS_WITH_AS(tf::add_layer_norm(x, tf::randn({2, 3}, {.dtype = tf::DType::float64}), {3}),
                       doctest::Contains("add_layer_norm"), tf::Error);
  CHECK_THROWS_WITH_AS(tf::add_layer_norm(x, Tensor(), {3}), doctest::Contains("add_layer_norm"),
                       tf::Error);
  CHECK_THROWS_WITH_AS(tf::add_layer_norm(x, x, {4}), doctest::Contains("add_layer_norm"),
                       tf::Error);
  CHECK_THROWS_WITH_AS(tf::add_layer_norm(x, x, {3}, tf::randn({4})),
                       doctest::Contains("add_layer_norm: expected a weight"), tf::Error);
}
