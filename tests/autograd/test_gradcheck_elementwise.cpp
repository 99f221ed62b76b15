// Gradient checks of the elementwise ops on contiguous, transposed, sliced and broadcast inputs,
// and of broadcasting between operands of different shapes.
#include <doctest/doctest.h>

#include <vector>

#include "core/unary_math.h"
#include "gradcheck_cases.h"

namespace tf = tinyformer;
using tf::Tensor;
using tf::testing::check_all_layouts;
using tf::testing::Domain;
using tf::testing::expect_gradcheck;
using tf::testing::make_leaf;

namespace {
const tf::Shape kShape = {2, 3};
}

TEST_CASE("gradcheck: binary arithmetic in every layout") {
  check_all_layouts("add", [](auto& in) { return tf::add(in[0], in[1]); }, {kShape, kShape});
  check_all_layouts("sub", [](auto& in) { return tf::sub(in[0], in[1]); }, {kShape, kShape});
  check_all_layouts("mul", [](auto& in) { return tf::mul(in[0], in[1]); }, {kShape, kShape});
  check_all_layouts(
      "div", [](auto& in) { return tf::div(in[0], in[1]); }, {kShape, kShape}, Domain::positive);
  check_all_layouts("maximum", [](auto& in) { return tf::maximum(in[0], in[1]); },
                    {kShape, kShape});
  check_all_layouts("minimum", [](auto& in) { return tf::minimum(in[0], in[1]); },
                    {kShape, kShape});
}

TEST_CASE("gradcheck: scalar operators") {
  check_all_layouts("x * 2 - 1", [](auto& in) { return in[0] * 2.0 - 1.0; }, {kShape});
  check_all_layouts(
      "3 / x + (1 - x)", [](auto& in) { return 3.0 / in[0] + (1.0 - in[0]); }, {kShape},
      Domain::positive);
  check_all_layouts("-x / 4", [](auto& in) { return -in[0] / 4.0; }, {kShape});
}

TEST_CASE("gradcheck: broadcasting between operands") {
  tf::manual_seed(3);
  // [2, 3] with [3], [2, 1] with [1, 3], and a 0-dim operand: the engine sums each gradient
  // back to its operand's shape.
  Tensor a = make_leaf({2, 3}, Domain::positive), b = make_leaf({3}, Domain::positive);
  Tensor c = make_leaf({2, 1}, Domain::any), d = make_leaf({1, 3}, Domain::any);
  Tensor s = make_leaf({}, Domain::positive);
  expect_gradcheck([](auto& in) { return tf::add(in[0], in[1]); }, {a, b}, "add [2,3]+[3]");
  expect_gradcheck([](auto& in) { return tf::mul(in[0], in[1]); }, {c, d}, "mul [2,1]*[1,3]");
  expect_gradcheck([](auto& in) { return tf::div(in[0], in[1]); }, {a, b}, "div [2,3]/[3]");
  expect_gradcheck([](auto& in) { return tf::sub(in[0], in[1]); }, {c, d}, "sub [2,1]-[1,3]");
  expect_gradcheck([](auto& in) { return tf::maximum(in[0], in[1]); }, {c, d}, "maximum");
  expect_gradcheck([](auto& in) { return tf::minimum(in[0], in[1]); }, {c, d}, "minimum");
  expect_gradcheck([](auto& in) { return tf::mul(in[0], in[1]); }, {a, s}, "mul by 0-dim");
}

// Every TF_UNARY row of core/elementwise.def, on inputs from the row's domain, so a new row is
// checked without an edit here. A row that takes alpha (pow_scalar's exponent) is checked at
// general exponents and at each one its math treats specially.
TEST_CASE("gradcheck: every unary row in every layout") {
  CHECK(tf::unary_ops.size() == tf::unary_op_count);
  for (const tf::UnaryOp op : tf::unary_ops) {
    const tf::UnaryTraits& row = tf::unary_traits(op);
    const Domain domain = row.domain == tf::UnaryDomain::positive ? Domain::positive : Domain::any;
    const std::vector<double> alphas = tf::takes_alpha(op)
                                           ? std::vector<double>{3, 2.5, -1.5, 0, 1, 2, 0.5, -1}
                                           : std::vector<double>{0};
    for (const double alpha : alphas) {
      CAPTURE(alpha);
      check_all_layouts(
          row.name, [op, alpha](auto& in) { return tf::unary(op, in[0], alpha); }, {kShape},
          domain);
    }
  }
}

// The named functions are the rows' ops.
TEST_CASE("gradcheck: the public unary functions") {
  check_all_layouts("exp", [](auto& in) { return tf::exp(in[0]); }, {kShape});
  check_all_layouts("relu", [](auto& in) { return tf::relu(in[0]); }, {kShape});
  check_all_layouts(
      "gelu tanh", [](auto& in) { return tf::gelu(in[0], tf::GeluApproximation::tanh); }, {kShape});
  check_all_layouts(
      "pow 2.5", [](auto& in) { return tf::pow(in[0], 2.5); }, {kShape}, Domain::positive);
  check_all_layouts("pow 3", [](auto& in) { return tf::pow(in[0], 3.0); }, {kShape});
}

TEST_CASE("gradcheck: where and masked_fill") {
  const Tensor cond = tf::from<bool>({true, false, true, false, false, true}, {2, 3});
  const Tensor row_mask = tf::from<bool>({false, true, false}, {1, 3});
  check_all_layouts("where", [cond](auto& in) { return tf::where(cond, in[0], in[1]); },
                    {kShape, kShape});
  check_all_layouts("where, broadcast condition",
                    [row_mask](auto& in) { return tf::where(row_mask, in[0], in[1]); },
                    {kShape, kShape});
  check_all_layouts("masked_fill", [cond](auto& in) { return tf::masked_fill(in[0], cond, -7.0); },
                    {kShape});
  check_all_layouts("masked_fill, broadcast mask",
                    [row_mask](auto& in) { return tf::masked_fill(in[0], row_mask, 2.0); },
                    {kShape});
}
