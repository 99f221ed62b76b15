// Gradient checks of the views and data-movement ops (view, reshape, slice, cat, split, ...) on
// contiguous, transposed, sliced and broadcast inputs. Each output is multiplied by a fixed
// non-uniform tensor where that makes a wrong routing of the gradient visible.
#include <doctest/doctest.h>

#include "gradcheck_cases.h"

namespace tf = tinyformer;
using tf::Tensor;
using tf::testing::check_all_layouts;
using tf::testing::Domain;
using tf::testing::expect_gradcheck;
using tf::testing::make_leaf;

TEST_CASE("gradcheck: view, reshape, flatten") {
  // view needs compatible strides, so it goes through contiguous() on the strided layouts.
  check_all_layouts("view", [](auto& in) { return in[0].contiguous().view({3, -1}); }, {{2, 3, 2}});
  check_all_layouts("reshape", [](auto& in) { return in[0].reshape({-1, 4}); }, {{2, 3, 2}});
  check_all_layouts("reshape to 1-D", [](auto& in) { return in[0].reshape({6}); }, {{3, 2}});
  check_all_layouts("flatten", [](auto& in) { return in[0].flatten(1); }, {{2, 3, 2}});
  check_all_layouts("flatten all", [](auto& in) { return tf::flatten(in[0]); }, {{2, 2, 2}});
}

TEST_CASE("gradcheck: transpose, permute, contiguous, clone") {
  check_all_layouts("transpose", [](auto& in) { return in[0].transpose(0, 2); }, {{2, 3, 2}});
  check_all_layouts("permute", [](auto& in) { return in[0].permute({2, 0, 1}); }, {{2, 3, 2}});
  check_all_layouts("contiguous", [](auto& in) { return in[0].contiguous(); }, {{2, 3}});
  check_all_layouts("clone", [](auto& in) { return in[0].clone() * in[0]; }, {{2, 3}});
}

TEST_CASE("gradcheck: slice, narrow, select") {
  check_all_layouts("slice step 2", [](auto& in) { return in[0].slice(1, 0, 5, 2); }, {{2, 5}});
  check_all_layouts("slice negative start", [](auto& in) { return in[0].slice(-1, -3, 100); },
                    {{2, 5}});
  check_all_layouts("narrow", [](auto& in) { return in[0].narrow(0, 1, 2); }, {{3, 4}});
  check_all_layouts("select", [](auto& in) { return in[0].select(1, -1); }, {{2, 3}});
  check_all_layouts("select then square",
                    [](auto& in) {
                      Tensor row = in[0].select(0, 1);
                      return row * row;
                    },
                    {{2, 3}});
}

TEST_CASE("gradcheck: unsqueeze, squeeze, expand") {
  check_all_layouts("unsqueeze", [](auto& in) { return in[0].unsqueeze(1); }, {{2, 3}});
  check_all_layouts("squeeze all",
                    [](auto& in) { return in[0].unsqueeze(0).unsqueeze(2).squeeze(); }, {{2, 3}});
  check_all_layouts("squeeze dim", [](auto& in) { return in[0].unsqueeze(-1).squeeze(-1); },
                    {{2, 3}});
  check_all_layouts(
      "expand",
      [](auto& in) {
        const Tensor w = tf::arange(1.0, 13.0, 1.0, {.dtype = tf::kFloat64}).view({2, 2, 3});
        return in[0].unsqueeze(0).expand({2, -1, -1}) * w;
      },
      {{2, 3}});
  check_all_layouts(
      "expand size-1 dim",
      [](auto& in) {
        const Tensor w = tf::arange(1.0, 13.0, 1.0, {.dtype = tf::kFloat64}).view({2, 3, 2});
        return in[0].unsqueeze(-1).expand({2, 3, 2}) * w;
      },
      {{2, 3}});
}

TEST_CASE("gradcheck: to(dtype) and to(device)") {
  // float64 -> float32 -> float64 loses precision, so the steps and tolerances are wider.
  const tf::GradcheckOptions loose{.eps = 1e-3, .atol = 1e-3, .rtol = 1e-2};
  check_all_layouts(
      "to float32 and back",
      [](auto& in) {
        Tensor y = in[0].to(tf::kFloat32);
        return (y * y).to(tf::kFloat64);
      },
      {{2, 3}}, Domain::any, loose);
  check_all_layouts("to cpu", [](auto& in) { return in[0].to(tf::Device::cpu()) * 2.0; }, {{2, 3}});
}

TEST_CASE("gradcheck: cat and stack") {
  check_all_layouts("cat dim 1",
                    [](auto& in) {
                      return tf::cat({in[0], in[1] * in[1], in[2]}, 1);
                    },
                    {{2, 2}, {2, 3}, {2, 1}});
  check_all_layouts("cat dim 0",
                    [](auto& in) {
                      return tf::cat({in[0], in[1]}, 0);
                    },
                    {{2, 3}, {3, 3}});
  check_all_layouts("stack",
                    [](auto& in) {
                      return tf::stack({in[0], in[1] * 3.0}, 1);
                    },
                    {{2, 3}, {2, 3}});
  check_all_layouts("stack last",
                    [](auto& in) {
                      return tf::stack({in[0], in[1]}, -1);
                    },
                    {{2, 3}, {2, 3}});
}

TEST_CASE("gradcheck: split and chunk") {
  // The pieces come back together with different weights, so each piece's gradient counts.
  check_all_layouts("split",
                    [](auto& in) {
                      auto pieces = tf::split(in[0], 2, 1);  // widths 2, 2, 1
                      return tf::cat({pieces[0] * 2.0, pieces[1] * pieces[1], pieces[2] * -1.0}, 1);
                    },
                    {{2, 5}});
  check_all_layouts("chunk",
                    [](auto& in) {
                      auto pieces = tf::chunk(in[0], 2, 0);  // rows 2 and 1
                      return pieces[0].sum() * 3.0 + (pieces[1] * pieces[1]).sum();
                    },
                    {{3, 4}});
}

TEST_CASE("gradcheck: chains of views") {
  tf::manual_seed(5);
  Tensor x = make_leaf({4, 3, 2}, Domain::any);
  expect_gradcheck(
      [](auto& in) {
        return in[0].permute({2, 0, 1}).slice(1, 1, 4).reshape({2, -1}).transpose(0, 1).select(1,
                                                                                               0);
      },
      {x}, "permute-slice-reshape-transpose-select");
}
