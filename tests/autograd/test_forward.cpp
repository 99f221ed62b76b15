// Forward values of the ops against numbers worked out by hand (gradcheck only checks that
// backward agrees with forward; these check forward itself), and the layouts views produce.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "autograd/ops.h"
#include "core/allocator.h"

namespace tf = tinyformer;
using tf::Tensor;

namespace {

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

Tensor f64(std::initializer_list<double> v, const tf::Shape& shape) {
  return tf::from<double>(v, shape);
}

// 0, 1, ..., n - 1 in `shape`, float64.
Tensor iota(const tf::Shape& shape) {
  return tf::arange(0.0, static_cast<double>(tf::shape_numel(shape)), 1.0, {.dtype = tf::kFloat64})
      .view(shape);
}

void check_close(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol).scale(1.0));
  }
}

}  // namespace

TEST_CASE("views share storage and have the expected layout") {
  Tensor x = iota({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  CHECK(t.shape() == tf::Shape{4, 3, 2});
  CHECK(t.strides() == tf::Shape{1, 4, 12});
  CHECK(t.storage() == x.storage());
  Tensor p = x.permute({1, 2, 0});
  CHECK(p.strides() == tf::Shape{4, 1, 12});
  Tensor s = x.slice(2, 1, 4, 2);  // columns 1, 3
  CHECK(s.shape() == tf::Shape{2, 3, 2});
  CHECK(s.strides() == tf::Shape{12, 4, 2});
  CHECK(s.offset() == 1);
  CHECK(values(s.select(0, 1).select(0, 2)) == std::vector<double>{21, 23});
  Tensor n = x.narrow(1, 1, 2);
  CHECK(n.offset() == 4);
  CHECK(values(n.select(0, 0)) == std::vector<double>{4, 5, 6, 7, 8, 9, 10, 11});
  Tensor u = x.unsqueeze(1);
  CHECK(u.shape() == tf::Shape{2, 1, 3, 4});
  CHECK(u.is_contiguous());
  CHECK(u.squeeze().shape() == tf::Shape{2, 3, 4});
  CHECK(u.squeeze(1).shape() == tf::Shape{2, 3, 4});
  CHECK(u.squeeze(0).shape() == tf::Shape{2, 1, 3, 4});  // size 2: unchanged
  Tensor e = f64({1, 2, 3}, {3, 1}).expand({2, 3, 4});
  CHECK(e.strides() == tf::Shape{0, 1, 0});
  CHECK(values(e.select(0, 1).select(1, 3)) == std::vector<double>{1, 2, 3});
  // Python-style slice bounds.
  CHECK(x.slice(0, -1, 100).shape() == tf::Shape{1, 3, 4});
  CHECK(x.slice(1, 5, 10).shape() == tf::Shape{2, 0, 4});
  CHECK(x.slice(1, 2, 1).shape() == tf::Shape{2, 0, 4});
  CHECK(x.slice(2, -100, -1, 2).shape() == tf::Shape{2, 3, 2});
}

TEST_CASE("view, reshape and flatten") {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({4, -1});
  CHECK(v.shape() == tf::Shape{4, 6});
  CHECK(v.storage() == x.storage());
  // Merging the two leading dims of a slice along the last one is still a view.
  Tensor s = x.slice(2, 0, 2);
  Tensor sv = s.view({6, 2});
  CHECK(sv.storage() == x.storage());
  CHECK(values(sv.select(0, 5)) == std::vector<double>{20, 21});
  // A transpose cannot be flattened in place: reshape copies, in the transposed order.
  Tensor t = x.transpose(1, 2);
  Tensor r = t.reshape({2, 12});
  CHECK(r.storage() != x.storage());
  CHECK(values(r.select(0, 0)) == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  // ...while a reshape that keeps memory order is a view.
  CHECK(x.reshape({6, 4}).storage() == x.storage());
  CHECK(x.flatten().shape() == tf::Shape{24});
  CHECK(x.flatten(1).shape() == tf::Shape{2, 12});
  CHECK(x.flatten(0, 1).shape() == tf::Shape{6, 4});
  CHECK(tf::scalar_tensor(3.0).flatten().shape() == tf::Shape{1});
  CHECK(x.view({2, 3, 4, 1}).shape() == tf::Shape{2, 3, 4, 1});
  CHECK(tf::zeros({0, 3}).reshape({3, 0}).shape() == tf::Shape{3, 0});
  CHECK_THROWS_AS(tf::zeros({0, 3}).reshape({-1, 0}), tf::Error);  // -1 could be anything
}

TEST_CASE("contiguous and clone") {
  Tensor x = iota({2, 3});
  CHECK(x.contiguous().is_same(x));
  Tensor t = x.transpose(0, 1).contiguous();
  CHECK(t.is_contiguous());
  CHECK(values(t) == std::vector<double>{0, 3, 1, 4, 2, 5});
  Tensor c = x.clone();
  CHECK(c.storage() != x.storage());
  CHECK(values(c) == values(x));
}

TEST_CASE("cat, stack, split, chunk") {
  Tensor a = iota({2, 2}), b = iota({2, 1}) + 10.0;
  CHECK(values(tf::cat({a, b}, 1)) == std::vector<double>{0, 1, 10, 2, 3, 11});
  CHECK(values(tf::cat({a, a.transpose(0, 1)}, 0)) == std::vector<double>{0, 1, 2, 3, 0, 2, 1, 3});
  CHECK(tf::cat({a, tf::zeros({0, 2}, {.dtype = tf::kFloat64})}, 0).shape() == tf::Shape{2, 2});
  Tensor s = tf::stack({a, a * 2.0}, 1);
  CHECK(s.shape() == tf::Shape{2, 2, 2});
  CHECK(values(s) == std::vector<double>{0, 1, 0, 2, 2, 3, 4, 6});
  Tensor x = iota({7, 2});
  auto parts = tf::split(x, 3, 0);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].shape() == tf::Shape{1, 2});
  CHECK(parts[1].storage() == x.storage());
  CHECK(values(parts[1]) == std::vector<double>{6, 7, 8, 9, 10, 11});
  auto chunks = tf::chunk(x, 3, 0);  // ceil(7 / 3) = 3 rows each, the last 1
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[0].size(0) == 3);
  CHECK(chunks[2].size(0) == 1);
  CHECK(tf::chunk(x, 2, 1).size() == 2);
}

TEST_CASE("reductions") {
  Tensor x = f64({1, 5, 3, -2, 4, 4}, {2, 3});
  CHECK(tf::sum(x).item<double>() == 15.0);
  CHECK(tf::sum(x).dim() == 0);
  CHECK(values(tf::sum(x, {0})) == std::vector<double>{-1, 9, 7});
  CHECK(tf::sum(x, {1}, true).shape() == tf::Shape{2, 1});
  CHECK(values(tf::sum(x, {-1})) == std::vector<double>{9, 6});
  CHECK(values(tf::mean(x, {1})) == std::vector<double>{3, 2});
  CHECK(tf::mean(x).item<double>() == 2.5);
  CHECK(tf::sum(x, {0, 1}).item<double>() == 15.0);
  // Variance of {1, 5, 3}: mean 3, squares 4 + 4 + 0 = 8.
  check_close(values(tf::var(x, {1})), {4.0, 12.0});
  check_close(values(tf::var(x, {1}, false)), {8.0 / 3.0, 8.0});
  auto [m, i] = tf::max(x, 1);
  CHECK(values(m) == std::vector<double>{5, 4});
  CHECK(i.dtype() == tf::kInt64);
  CHECK(i.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1});  // first of the ties
  CHECK(tf::max(x).item<double>() == 5.0);
  CHECK(tf::argmax(x, 0, true).shape() == tf::Shape{1, 3});
  CHECK(tf::argmax(x, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 1});
  // The gradient of max goes to the first maximum only.
  Tensor y = f64({2, 7, 7, 1}, {4});
  y.requires_grad_(true);
  tf::max(y).backward();
  CHECK(values(y.grad()) == std::vector<double>{0, 1, 0, 0});
  // Reductions over empty tensors: a sum of nothing is 0, a mean NaN.
  Tensor empty = tf::zeros({0, 3}, {.dtype = tf::kFloat64});
  CHECK(values(tf::sum(empty, {0})) == std::vector<double>{0, 0, 0});
  CHECK(std::isnan(tf::mean(empty).item<double>()));
  // A 0-dim tensor reduces to itself.
  CHECK(tf::sum(tf::scalar_tensor(4.0, {.dtype = tf::kFloat64})).item<double>() == 4.0);
  CHECK(tf::sum(tf::scalar_tensor(4.0), {0}).dim() == 0);
  // Reductions of strided views read the right elements.
  CHECK(values(tf::sum(x.transpose(0, 1), {1})) == std::vector<double>{-1, 9, 7});
}

TEST_CASE("matmul values") {
  Tensor a = iota({2, 3}), b = iota({3, 2});
  // [[0,1,2],[3,4,5]] @ [[0,1],[2,3],[4,5]]
  CHECK(values(tf::matmul(a, b)) == std::vector<double>{10, 13, 28, 40});
  CHECK(values(tf::matmul(a.transpose(0, 1).contiguous().transpose(0, 1), b)) ==
        std::vector<double>{10, 13, 28, 40});
  Tensor v = f64({1, 2, 3}, {3});
  Tensor dot = tf::matmul(v, v);
  CHECK(dot.dim() == 0);
  CHECK(dot.item<double>() == 14.0);
  CHECK(values(tf::matmul(a, v)) == std::vector<double>{8, 26});
  CHECK(tf::matmul(a, v).shape() == tf::Shape{2});
  CHECK(values(tf::matmul(v, b)) == std::vector<double>{16, 22});
  // Batched with broadcast: [2, 1, 2, 3] @ [3, 3, 2] -> [2, 3, 2, 2].
  Tensor ba = iota({2, 1, 2, 3}), bb = iota({3, 3, 2});
  Tensor out = tf::matmul(ba, bb);
  CHECK(out.shape() == tf::Shape{2, 3, 2, 2});
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) {
      const Tensor want = tf::matmul(ba.select(0, i).select(0, 0), bb.select(0, j));
      CHECK(values(out.select(0, i).select(0, j)) == values(want));
    }
  }
  // [B, T, K] @ [K, N]: every batch entry uses the same matrix.
  Tensor x3 = iota({2, 2, 3});
  Tensor y3 = tf::matmul(x3, b);
  CHECK(values(y3.select(0, 1)) == values(tf::matmul(x3.select(0, 1), b)));
  // An empty inner dimension gives zeros.
  Tensor z = tf::matmul(tf::zeros({2, 0}, {.dtype = tf::kFloat64}),
                        tf::zeros({0, 3}, {.dtype = tf::kFloat64}));
  CHECK(values(z) == std::vector<double>(6, 0.0));
}

TEST_CASE("matmul hands broadcast and transposed operands to the backend without copies") {
  // Only the result is allocated: stride-0 batch dims, a shared matrix and transposed operands
  // all reach the backend as views.
  auto allocations = [](const std::function<Tensor()>& f) {
    const auto before = tf::memory_stats().allocation_count;
    Tensor out = f();
    return tf::memory_stats().allocation_count - before;
  };
  Tensor a = iota({2, 3, 4}), b = iota({4, 5}), c = iota({2, 4, 5});
  Tensor c_columns = c.transpose(1, 2).contiguous().transpose(1, 2);  // column-major matrices
  Tensor b_expanded = b.unsqueeze(0).expand({2, 4, 5});
  CHECK(allocations([&] { return tf::matmul(a, b); }) == 1);
  CHECK(allocations([&] { return tf::matmul(a, c); }) == 1);
  CHECK(allocations([&] { return tf::matmul(a, c_columns); }) == 1);
  CHECK(allocations([&] { return tf::matmul(a.transpose(1, 2), a); }) == 1);
  CHECK(allocations([&] { return tf::matmul(a, b_expanded); }) == 1);
  // [2, 1] batch against [3]: the expanded batch strides of each operand ((12, 0) for a,
  // (0, 20) for b) are not one stride, so the product runs once per entry of the first batch dim
  // instead of packing them.
  Tensor a4 = iota({2, 1, 3, 4}), c3 = iota({3, 4, 5});
  CHECK(allocations([&] { return tf::matmul(a4, c3); }) == 1);
  // Attention's heads: [B, H, n, d] views of a [B, n, H, d] buffer, and the transposed keys.
  Tensor heads = iota({2, 5, 3, 4}).transpose(1, 2);  // [2, 3, 5, 4], strides (60, 4, 12, 1)
  CHECK(allocations([&] { return tf::matmul(heads, heads.transpose(2, 3)); }) == 1);
  Tensor scores = tf::matmul(heads, heads.transpose(2, 3));  // [2, 3, 5, 5]
  CHECK(allocations([&] { return tf::matmul(scores, heads); }) == 1);
  // matmul_like writes the product in the heads' layout, so merging the heads is a view.
  Tensor merged = tf::matmul_like(scores, heads, heads);
  CHECK(merged.strides() == heads.strides());
  CHECK(values(merged) == values(tf::matmul(scores, heads)));
  CHECK(allocations([&] {
          return tf::matmul_like(scores, heads, heads).transpose(1, 2).reshape({2, 5, 12});
        }) == 1);
}

TEST_CASE("softmax, log_softmax, layer_norm values") {
  Tensor x = f64({1, 2, 3, 1, 1, 1}, {2, 3});
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  check_close(values(tf::softmax(x, 1)),
              {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z, 1 / 3.0, 1 / 3.0, 1 / 3.0});
  check_close(values(tf::log_softmax(x, -1)), {1 - std::log(z), 2 - std::log(z), 3 - std::log(z),
                                               -std::log(3.0), -std::log(3.0), -std::log(3.0)});
  // Over dim 0: each column is a pair.
  const double p = 1 / (1 + std::exp(-0.0)), q = 1 / (1 + std::exp(-1.0));
  check_close(values(tf::softmax(x, 0)),
              {p, q, 1 / (1 + std::exp(-2.0)), p, 1 - q, 1 - 1 / (1 + std::exp(-2.0))});
  Tensor ln = tf::layer_norm(x, {3}, {}, {}, 0.0);
  const double s = std::sqrt(2.0 / 3.0);
  check_close(values(ln.select(0, 0)), {-1 / s, 0, 1 / s});
  Tensor w = f64({1, 2, 3}, {3}), b = f64({0, 1, 0}, {3});
  check_close(values(tf::layer_norm(x, {3}, w, b, 0.0).select(0, 0)), {-1 / s, 1, 3 / s});
}

TEST_CASE("cross_entropy values and reductions") {
  Tensor logits = f64({1, 2, 3, 0, 0, 0, 5, 1, 1}, {3, 3});
  Tensor targets = tf::from<std::int64_t>({2, 0, 1}, {3});
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double lse2 = std::log(std::exp(5.0) + 2 * std::exp(1.0));
  const std::vector<double> rows = {lse0 - 3, std::log(3.0), lse2 - 1};
  check_close(values(tf::cross_entropy(logits, targets, -100, tf::Reduction::none)), rows);
  CHECK(tf::cross_entropy(logits, targets, -100, tf::Reduction::sum).item<double>() ==
        doctest::Approx(rows[0] + rows[1] + rows[2]));
  CHECK(tf::cross_entropy(logits, targets).item<double>() ==
        doctest::Approx((rows[0] + rows[1] + rows[2]) / 3));
  // ignore_index: the row counts neither in the sum nor in the divisor.
  Tensor ignored = tf::from<std::int64_t>({2, -100, 1}, {3});
  CHECK(tf::cross_entropy(logits, ignored, -100, tf::Reduction::none).to_vector<double>()[1] ==
        0.0);
  CHECK(tf::cross_entropy(logits, ignored).item<double>() ==
        doctest::Approx((rows[0] + rows[2]) / 2));
  // Every row ignored under mean: 0 / 0, NaN, as in PyTorch.
  Tensor all_ignored = tf::from<std::int64_t>({7, 7, 7}, {3});
  CHECK(std::isnan(tf::cross_entropy(logits, all_ignored, 7).item<double>()));
  CHECK(tf::cross_entropy(logits, all_ignored, 7, tf::Reduction::sum).item<double>() == 0.0);
  // nll_loss on log-probabilities is the same thing.
  CHECK(tf::nll_loss(tf::log_softmax(logits, 1), targets).item<double>() ==
        doctest::Approx(tf::cross_entropy(logits, targets).item<double>()));
  // Unbatched: [C] scores with a 0-dim target.
  Tensor one = tf::cross_entropy(logits.select(0, 0), tf::from<std::int64_t>({2}, {}));
  CHECK(one.item<double>() == doctest::Approx(rows[0]));
}

TEST_CASE("conv1d and pooling values") {
  // One channel in, one out: a moving [1, -1] difference, with zero padding 1.
  Tensor x = f64({1, 4, 9, 16}, {1, 1, 4});
  Tensor w = f64({1, -1}, {1, 1, 2});
  CHECK(values(tf::conv1d(x, w)) == std::vector<double>{-3, -5, -7});
  CHECK(values(tf::conv1d(x, w, {}, 1, 1)) == std::vector<double>{-1, -3, -5, -7, 16});
  CHECK(values(tf::conv1d(x, w, f64({10}, {1}), 2)) == std::vector<double>{7, 3});
  // Two input channels are summed; unbatched input gives an unbatched result.
  Tensor x2 = f64({1, 2, 3, 10, 20, 30}, {2, 3});
  Tensor w2 = f64({1, 0, 0, 1}, {1, 2, 2});  // x2[0, t] + x2[1, t + 1]
  Tensor y2 = tf::conv1d(x2, w2);
  CHECK(y2.shape() == tf::Shape{1, 2});
  CHECK(values(y2) == std::vector<double>{21, 32});
  CHECK(values(tf::avg_pool1d(x, 2)) == std::vector<double>{2.5, 12.5});
  check_close(values(tf::avg_pool1d(x, 3, 1)), {14 / 3.0, 29 / 3.0});
  CHECK(values(tf::max_pool1d(f64({3, 1, 2, 5, 4}, {1, 1, 5}), 2)) == std::vector<double>{3, 5});
  CHECK(values(tf::max_pool1d(f64({3, 1, 2, 5, 4}, {1, 5}), 2, 1)) ==
        std::vector<double>{3, 2, 5, 5});
}

TEST_CASE("embedding and dropout values") {
  Tensor w = iota({4, 2});
  Tensor idx = tf::from<std::int64_t>({3, 0, 3}, {3, 1});
  Tensor e = tf::embedding(w, idx);
  CHECK(e.shape() == tf::Shape{3, 1, 2});
  CHECK(values(e) == std::vector<double>{6, 7, 0, 1, 6, 7});
  Tensor w_leaf = w.detach();
  w_leaf.requires_grad_(true);
  tf::sum(tf::embedding(w_leaf, idx)).backward();
  CHECK(values(w_leaf.grad()) == std::vector<double>{1, 1, 0, 0, 0, 0, 2, 2});

  Tensor x = tf::ones({1000}, {.dtype = tf::kFloat64});
  CHECK(tf::dropout(x, 0.3, false).is_same(x));
  CHECK(tf::dropout(x, 0.0, true).is_same(x));
  tf::Generator g1(9), g2(9);
  Tensor d1 = tf::dropout(x, 0.3, true, &g1);
  Tensor d2 = tf::dropout(x, 0.3, true, &g2);
  CHECK(values(d1) == values(d2));  // the same seed gives the same mask
  std::int64_t kept = 0;
  for (double v : values(d1)) {
    CHECK((v == 0.0 || v == doctest::Approx(1 / 0.7)));
    kept += v != 0.0;
  }
  // 700 expected, standard deviation about 14.5.
  CHECK(kept > 620);
  CHECK(kept < 780);
  // A second draw from the same generator gives a different mask.
  CHECK(values(tf::dropout(x, 0.3, true, &g1)) != values(d1));
}

TEST_CASE("dropout with p = 1 drops every element: x * 0, gradient 0, as PyTorch") {
  // torch.nn.functional.dropout(x, p=1.0, training=True) is x * 0: zeros, and NaN where x is
  // infinite or NaN; in eval it is x.
  const double inf = std::numeric_limits<double>::infinity();
  for (tf::DType dtype : {tf::kFloat32, tf::kFloat64}) {
    CAPTURE(dtype);
    Tensor x = f64({1.5, -2.0, 0.0, 3.0, inf}, {5}).to(dtype);
    x.requires_grad_(true);
    CHECK(tf::dropout(x, 1.0, false).is_same(x));
    tf::Generator gen(3);
    const Tensor y = tf::dropout(x, 1.0, true, &gen);
    const std::vector<double> got = values(y);
    CHECK(std::vector<double>(got.begin(), got.begin() + 4) == std::vector<double>{0, 0, 0, 0});
    CHECK(std::isnan(got[4]));
    tf::sum(tf::dropout(x, 1.0, true, &gen)).backward();
    CHECK(values(x.grad()) == std::vector<double>{0, 0, 0, 0, 0});
  }
}

TEST_CASE("to(dtype) converts values") {
  Tensor x = f64({1.5, -2.25}, {2});
  CHECK(x.to(tf::kFloat32).to_vector<float>() == std::vector<float>{1.5f, -2.25f});
  CHECK(x.to(tf::kInt64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -2});
}
