// matmul's forward and backward through views of views (transposed, sliced and reshaped heads,
// 3- to 5-D batches): the result against the reference backend's product of contiguous copies,
// and the gradients of the base tensors against the same graph with the views made contiguous
// before the product (which routes the gradients through copies instead of strided products).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/random.h"

namespace tf = tinyformer;
using tf::Shape;
using tf::Tensor;

namespace {

using View = std::function<Tensor(const Tensor&)>;

// The largest absolute difference between two tensors of one shape.
double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return a.numel() == 0 ? 0.0 : tf::max(tf::abs(a - b)).item<double>();
}

// The reference backend's product of contiguous copies of a: [batch..., M, K] and
// b: [batch..., K, N] (the batch dims equal), as [batch..., M, N].
Tensor reference_product(const Tensor& a, const Tensor& b) {
  tf::Backend* ref = tf::find_backend("reference");
  REQUIRE(ref != nullptr);
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Tensor a3 = a.detach().contiguous().reshape({-1, m, k});
  const Tensor b3 = b.detach().contiguous().reshape({-1, k, n});
  Tensor out = tf::empty({a3.size(0), m, n}, {.dtype = a.dtype()});
  ref->matmul(a3, b3, out);
  Shape shape(a.shape().begin(), a.shape().end() - 1);
  shape.push_back(n);
  return out.reshape(shape);
}

struct Case {
  std::string name;
  Shape a_base, b_base;
  View a_view, b_view;
};

// Runs one case in float64 and checks the result and both bases' gradients.
void check_case(const Case& c, std::uint64_t seed) {
  CAPTURE(c.name);
  tf::manual_seed(seed);
  const tf::TensorOptions f64{.dtype = tf::DType::float64};
  Tensor x = tf::randn(c.a_base, f64).requires_grad_();
  Tensor y = tf::randn(c.b_base, f64).requires_grad_();
  const Tensor a = c.a_view(x), b = c.b_view(y);
  const Tensor out = tf::matmul(a, b);
  const Tensor expected = reference_product(a, b);
  REQUIRE(out.shape() == expected.shape());
  CHECK(max_diff(out, expected) < 1e-12);

  // A fixed, non-uniform weight on the result makes a misrouted gradient visible.
  const Tensor weight = tf::randn(out.shape(), f64);
  tf::sum(out * weight).backward();
  const Tensor gx = x.grad(), gy = y.grad();
  REQUIRE(gx.defined());
  REQUIRE(gy.defined());

  Tensor x2 = x.detach().clone().requires_grad_();
  Tensor y2 = y.detach().clone().requires_grad_();
  tf::sum(tf::matmul(c.a_view(x2).contiguous(), c.b_view(y2).contiguous()) * weight).backward();
  CHECK(max_diff(gx, x2.grad()) < 1e-12);
  CHECK(max_diff(gy, y2.grad()) < 1e-12);
}

Tensor identity(const Tensor& t) {
  return t;
}

}  // namespace

TEST_CASE("matmul through views: a custom projection's reshaped heads (the reported case)") {
  // x: [B, n, H * d] -> heads [B, H, n, d] -> [B, H, n / w, w, d]: the inner batch dim (H) is
  // not the outer one in memory.
  tf::manual_seed(1);
  Tensor x = tf::randn({1, 4, 8});
  x.requires_grad_();
  Tensor v = x.view({1, 4, 4, 2}).transpose(1, 2).view({1, 4, 2, 2, 2});
  tf::sum(tf::matmul(tf::randn({1, 4, 2, 1, 2}), v)).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().shape() == Shape{1, 4, 8});
}

TEST_CASE("matmul through views: 3- to 5-D batches of transposed, sliced and reshaped heads") {
  // Heads of a [B, n, H, d] buffer: [B, H, n, d] views whose batch dims do not collapse.
  const auto heads = [](std::int64_t h) {
    return [h](const Tensor& t) { return t.view({t.size(0), t.size(1), h, -1}).transpose(1, 2); };
  };
  const std::vector<Case> cases = {
      {"3-D: a transposed, b sliced along its batch",
       {3, 5, 4},
       {6, 5, 2},
       [](const Tensor& t) { return t.transpose(1, 2); },
       [](const Tensor& t) { return t.slice(0, 0, 6, 2); }},
      {"3-D: both transposed in their last two dims",
       {2, 3, 4},
       {2, 5, 3},
       [](const Tensor& t) { return t.transpose(1, 2); },
       [](const Tensor& t) { return t.transpose(1, 2); }},
      {"4-D: heads against heads^T (attention's scores)",
       {2, 5, 12},
       {2, 5, 12},
       heads(3),
       [heads](const Tensor& t) { return heads(3)(t).transpose(2, 3); }},
      {"4-D: probabilities against heads (attention's values)",
       {2, 3, 5, 5},
       {2, 5, 12},
       identity,
       heads(3)},
      {"4-D: a shared matrix against heads (Linformer's E)",
       {4, 5},
       {2, 5, 12},
       [](const Tensor& t) {
         return t.expand({2, 3, 4, 5});
       },
       heads(3)},
      {"4-D: heads sliced along the sequence",
       {2, 9, 8},
       {2, 4, 5},
       [heads](const Tensor& t) { return heads(2)(t).slice(2, 1, 9, 2); },
       [](const Tensor& t) {
         return t.view({2, 1, 4, 5}).expand({2, 2, 4, 5}).slice(3, 0, 5, 2);
       }},
      {"4-D: batch dims swapped (inner one outermost in memory)",
       {3, 2, 4, 5},
       {3, 2, 5, 2},
       [](const Tensor& t) { return t.transpose(0, 1); },
       [](const Tensor& t) { return t.transpose(0, 1); }},
      {"5-D: heads reshaped into windows (a custom projection)",
       {2, 8, 8},
       {2, 4, 2, 4, 3},
       [](const Tensor& t) {
         return t.view({2, 8, 4, 2}).transpose(1, 2).view({2, 4, 4, 2, 2});
       },
       [](const Tensor& t) { return t.transpose(2, 3); }},
      {"5-D: windows on the right, sliced and transposed",
       {2, 4, 3, 2, 2},
       {2, 8, 8},
       identity,
       [](const Tensor& t) {
         return t.view({2, 8, 4, 2})
             .transpose(1, 2)
             .view({2, 4, 4, 2, 2})
             .slice(2, 0, 3)
             .transpose(3, 4);
       }},
      {"5-D: a permuted buffer, the last dim sliced",
       {3, 2, 4, 2, 7},
       {2, 3, 2, 6, 3},
       [](const Tensor& t) {
         return t.permute({1, 0, 3, 2, 4}).slice(4, 1, 7, 2);
       },
       [](const Tensor& t) { return t.slice(3, 0, 6, 2); }},
  };
  std::uint64_t seed = 100;
  for (const Case& c : cases) check_case(c, seed++);
}

TEST_CASE("matmul through views: float64 gradcheck of a windowed-heads product") {
  const tf::TensorOptions f64{.dtype = tf::DType::float64};
  tf::manual_seed(3);
  Tensor x = tf::randn({1, 4, 8}, f64).requires_grad_();
  Tensor w = tf::randn({1, 4, 2, 1, 2}, f64).requires_grad_();
  const auto f = [](const std::vector<Tensor>& in) {
    const Tensor v = in[0].view({1, 4, 4, 2}).transpose(1, 2).view({1, 4, 2, 2, 2});
    return tf::matmul(in[1], v);
  };
  CHECK(tf::gradcheck(f, {x, w}));
}

TEST_CASE("matmul: an empty batch gives empty gradients, not an index error") {
  Tensor a = tf::randn({4, 6}).requires_grad_();
  Tensor b = tf::zeros({0, 2, 6, 4}).requires_grad_();
  tf::sum(tf::matmul(a, b)).backward();
  REQUIRE(a.grad().defined());
  CHECK(a.grad().shape() == Shape{4, 6});
  CHECK(tf::sum(tf::abs(a.grad())).item<double>() == 0.0);
  CHECK(b.grad().shape() == Shape{0, 2, 6, 4});
}
