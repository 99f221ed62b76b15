// Gradient checks of reductions, matmul, softmax, layer norm, losses, convolution, pooling,
// embedding and dropout, on contiguous, transposed, sliced and broadcast inputs.
#include <doctest/doctest.h>

#include "core/profiler.h"
#include "gradcheck_cases.h"

namespace tf = tinyformer;
using tf::Tensor;
using tf::testing::check_all_layouts;
using tf::testing::check_layout;
using tf::testing::Domain;
using tf::testing::expect_gradcheck;
using tf::testing::Layout;
using tf::testing::make_leaf;

TEST_CASE("gradcheck: sum and mean") {
  check_all_layouts("sum", [](auto& in) { return tf::sum(in[0]); }, {{2, 3}});
  check_all_layouts("sum dim 0", [](auto& in) { return tf::sum(in[0], {0}); }, {{2, 3}});
  check_all_layouts("sum dim -1 keepdim", [](auto& in) { return tf::sum(in[0], {-1}, true); },
                    {{2, 3}});
  check_all_layouts("sum dims 0, 2", [](auto& in) { return tf::sum(in[0], {0, 2}); }, {{2, 3, 2}});
  check_all_layouts("mean", [](auto& in) { return tf::mean(in[0]); }, {{2, 3}});
  check_all_layouts("mean dim 1", [](auto& in) { return tf::mean(in[0], {1}); }, {{2, 3}});
  check_all_layouts("mean dims -1, 0 keepdim",
                    [](auto& in) {
                      return tf::mean(in[0], {-1, 0}, true);
                    },
                    {{2, 3, 2}});
}

TEST_CASE("gradcheck: var") {
  check_all_layouts("var unbiased", [](auto& in) { return tf::var(in[0], {1}); }, {{2, 3}});
  check_all_layouts("var biased keepdim", [](auto& in) { return tf::var(in[0], {0}, false, true); },
                    {{2, 3}});
  check_all_layouts("var all", [](auto& in) { return tf::var(in[0], {0, 1}); }, {{2, 3}});
}

TEST_CASE("gradcheck: max") {
  // Random values have no ties, so the maximum is differentiable.
  check_all_layouts("max all", [](auto& in) { return tf::max(in[0]); }, {{2, 3}});
  check_all_layouts("max dim 1", [](auto& in) { return tf::max(in[0], 1).first; }, {{2, 3}});
  check_all_layouts("max dim 0 keepdim", [](auto& in) { return tf::max(in[0], 0, true).first; },
                    {{2, 3}});
}

TEST_CASE("gradcheck: matmul shapes") {
  auto mm = [](auto& in) { return tf::matmul(in[0], in[1]); };
  const std::vector<std::pair<const char*, std::vector<tf::Shape>>> cases = {
      {"1-D . 1-D", {{3}, {3}}},
      {"2-D @ 2-D", {{2, 3}, {3, 2}}},
      {"1-D @ 2-D", {{3}, {3, 2}}},
      {"2-D @ 1-D", {{2, 3}, {3}}},
      {"3-D @ 3-D", {{2, 2, 3}, {2, 3, 2}}},
      {"3-D @ 2-D (batch folds into rows)", {{2, 2, 3}, {3, 2}}},
      {"2-D @ 3-D", {{2, 3}, {2, 3, 2}}},
      {"2-D @ 4-D (a shared left matrix)", {{2, 3}, {2, 2, 3, 2}}},
      {"3-D @ 1-D", {{2, 2, 3}, {3}}},
      {"1-D @ 3-D", {{3}, {2, 3, 2}}},
      {"broadcast batch [2,1,..] @ [3,..]", {{2, 1, 2, 3}, {3, 3, 2}}},
      {"broadcast batch [1,2,..] @ [2,1,..]", {{1, 2, 2, 3}, {2, 1, 3, 2}}},
  };
  for (const auto& [name, shapes] : cases) {
    check_all_layouts(std::string("matmul ") + name, mm, shapes);
  }
}

TEST_CASE("gradcheck: matmul with operands of mixed layouts") {
  tf::manual_seed(11);
  // a: column-major (a transpose), b: expanded over the batch with stride 0.
  Tensor a = make_leaf({2, 3, 2}, Domain::any), b = make_leaf({1, 3, 4}, Domain::any);
  expect_gradcheck(
      [](auto& in) {
        return tf::matmul(in[0].transpose(1, 2), in[1].expand({2, 3, 4}));
      },
      {a, b}, "transposed @ broadcast");
  // a and b the same tensor: both gradients land on one leaf.
  Tensor c = make_leaf({3, 3}, Domain::any);
  expect_gradcheck([](auto& in) { return tf::matmul(in[0], in[0].transpose(0, 1)); }, {c},
                   "x @ x^T");
}

TEST_CASE("gradcheck: matmul on attention's heads: batch dims that no single stride walks") {
  tf::manual_seed(12);
  // q, k, v: [B, n, H * d] leaves viewed as heads [B, H, n, d] (batch strides n*H*d and d), so
  // the products loop over B and write, with matmul_like, into a [B, n, H, d] buffer; the
  // gradients come back laid out like the heads.
  const std::int64_t b = 2, n = 3, h = 2, d = 2;
  auto heads = [=](const Tensor& x) { return x.view({b, n, h, d}).transpose(1, 2); };
  Tensor q = make_leaf({b, n, h * d}, Domain::any), k = make_leaf({b, n, h * d}, Domain::any),
         v = make_leaf({b, n, h * d}, Domain::any);
  expect_gradcheck(
      [&](auto& in) {
        Tensor s = tf::matmul(heads(in[0]), heads(in[1]).transpose(-2, -1));  // [B, H, n, n]
        Tensor o = tf::matmul_like(s, heads(in[2]), heads(in[0]));            // [B, H, n, d]
        CHECK(o.transpose(1, 2).is_contiguous());
        return o.transpose(1, 2).reshape({b, n, h * d});
      },
      {q, k, v}, "heads: (q k^T) v merged");
  // A shared matrix against heads (a Linformer projection E: [k, n] @ [B, H, n, d]), and heads
  // against a batch broadcast over H.
  Tensor e = make_leaf({2, n}, Domain::any), w = make_leaf({b, 1, d, 3}, Domain::any);
  expect_gradcheck([&](auto& in) { return tf::matmul(in[0], heads(in[1])); }, {e, k}, "E @ heads");
  // E with at least twice as many columns as rows: its gradient is computed in the other
  // orientation, (heads g^T)^T, and reaches E as a transposed view.
  Tensor e_wide = make_leaf({1, n}, Domain::any);
  expect_gradcheck([&](auto& in) { return tf::matmul(in[0], heads(in[1])); }, {e_wide, k},
                   "wide E @ heads");
  expect_gradcheck([&](auto& in) { return tf::matmul_like(in[0], heads(in[1]), heads(in[1])); },
                   {e_wide, k}, "wide E @ heads laid out like the heads");
  // The same with E read transposed (column-major), and E under three batch dims.
  Tensor et = make_leaf({n, 2}, Domain::any);
  expect_gradcheck([&](auto& in) { return tf::matmul(in[0].transpose(0, 1), heads(in[1])); },
                   {et, k}, "E^T @ heads");
  expect_gradcheck(
      [&](auto& in) {
        return tf::matmul(in[0], in[1].view({1, b, n, h, d}).permute({0, 1, 3, 2, 4}));
      },
      {e, k}, "E @ heads under three batch dims");
  expect_gradcheck(
      [&](auto& in) {
        return tf::matmul(heads(in[0]), in[1].expand({b, h, d, 3}));
      },
      {q, w}, "heads @ broadcast over H");
  // Laid out like the heads (matmul_like): E @ heads is one batch of B [2, n] x [n, H*d] products
  // (one per sequence) into a [B, 2, H, d] buffer, and x's gradient E^T g one of [n, 2] x
  // [2, H*d] products.
  expect_gradcheck(
      [&](auto& in) {
        Tensor o = tf::matmul_like(in[0], heads(in[1]), heads(in[1]));  // [B, H, 2, d]
        CHECK(o.transpose(1, 2).is_contiguous());
        return o;
      },
      {e, k}, "E @ heads laid out like the heads");
  expect_gradcheck(
      [&](auto& in) { return tf::matmul_like(in[0].transpose(0, 1), heads(in[1]), heads(in[1])); },
      {et, k}, "E^T @ heads laid out like the heads");
  // The same values as the batch of products into a contiguous out, in one backend call: a
  // batch of B products [2 x 3] x [3 x 4], one per sequence.
  Tensor folded;
  {
    const tf::Profiler profiler(true);
    folded = tf::matmul_like(e, heads(k), heads(k)).detach();
    std::int64_t wide = 0, all = 0;
    for (const tf::OpProfile& row : profiler.ops()) {
      if (row.name.rfind("matmul", 0) != 0) continue;
      all += row.calls;
      if (row.name.find("2x[2x3]") != std::string::npos &&
          row.name.find("[3x4]") != std::string::npos) {
        wide += row.calls;
      }
    }
    CHECK(wide == 1);
    CHECK(all == 1);
  }
  const Tensor batched = tf::matmul(e, heads(k)).detach();
  CHECK(tf::max(tf::abs(folded - batched)).item<double>() == 0.0);
}

TEST_CASE("gradcheck: softmax and log_softmax") {
  for (std::int64_t dim : {-1, 0, 1}) {
    const std::string d = std::to_string(dim);
    check_all_layouts("softmax dim " + d, [dim](auto& in) { return tf::softmax(in[0], dim); },
                      {{2, 3, 2}});
    check_all_layouts("log_softmax dim " + d,
                      [dim](auto& in) { return tf::log_softmax(in[0], dim); }, {{2, 3, 2}});
  }
  check_all_layouts("softmax 1-D", [](auto& in) { return tf::softmax(in[0], 0); }, {{4}});
}

TEST_CASE("gradcheck: layer_norm") {
  check_all_layouts("layer_norm weight and bias",
                    [](auto& in) { return tf::layer_norm(in[0], {3}, in[1], in[2]); },
                    {{2, 3}, {3}, {3}});
  check_all_layouts("layer_norm without affine",
                    [](auto& in) { return tf::layer_norm(in[0], {3}); }, {{2, 3}});
  check_all_layouts("layer_norm over two dims",
                    [](auto& in) {
                      return tf::layer_norm(in[0], {2, 3}, in[1], {});
                    },
                    {{2, 2, 3}, {2, 3}});
}

TEST_CASE("gradcheck: cross_entropy and nll_loss") {
  const Tensor targets = tf::from<std::int64_t>({2, 0, 1}, {3});
  const Tensor with_ignored = tf::from<std::int64_t>({2, -100, 1}, {3});
  const Tensor one_target = tf::from<std::int64_t>({1}, {});
  for (auto reduction : {tf::Reduction::none, tf::Reduction::mean, tf::Reduction::sum}) {
    const std::string r = reduction == tf::Reduction::none   ? "none"
                          : reduction == tf::Reduction::mean ? "mean"
                                                             : "sum";
    check_all_layouts("cross_entropy " + r,
                      [&](auto& in) { return tf::cross_entropy(in[0], targets, -100, reduction); },
                      {{3, 4}});
    check_all_layouts(
        "cross_entropy ignore_index " + r,
        [&](auto& in) { return tf::cross_entropy(in[0], with_ignored, -100, reduction); },
        {{3, 4}});
    check_all_layouts(
        "nll_loss " + r,
        [&](auto& in) { return tf::nll_loss(tf::log_softmax(in[0], 1), targets, -100, reduction); },
        {{3, 4}});
  }
  check_all_layouts("cross_entropy with ignore_index 0",
                    [&](auto& in) { return tf::cross_entropy(in[0], targets, 0); }, {{3, 4}});
  check_all_layouts("cross_entropy unbatched",
                    [&](auto& in) { return tf::cross_entropy(in[0], one_target); }, {{4}});
}

TEST_CASE("gradcheck: conv1d") {
  check_all_layouts("conv1d", [](auto& in) { return tf::conv1d(in[0], in[1], in[2]); },
                    {{2, 2, 5}, {3, 2, 3}, {3}});
  check_all_layouts("conv1d stride 2 padding 1",
                    [](auto& in) { return tf::conv1d(in[0], in[1], in[2], 2, 1); },
                    {{2, 2, 5}, {3, 2, 3}, {3}});
  check_all_layouts("conv1d no bias, padding 2",
                    [](auto& in) { return tf::conv1d(in[0], in[1], {}, 1, 2); },
                    {{2, 2, 4}, {2, 2, 2}});
  check_all_layouts("conv1d unbatched", [](auto& in) { return tf::conv1d(in[0], in[1], in[2]); },
                    {{2, 4}, {3, 2, 2}, {3}});
}

TEST_CASE("gradcheck: pooling") {
  check_all_layouts("avg_pool1d k2", [](auto& in) { return tf::avg_pool1d(in[0], 2); },
                    {{2, 2, 5}});
  check_all_layouts("avg_pool1d k3 s1", [](auto& in) { return tf::avg_pool1d(in[0], 3, 1); },
                    {{2, 2, 5}});
  check_all_layouts("max_pool1d k2", [](auto& in) { return tf::max_pool1d(in[0], 2); },
                    {{2, 2, 5}});
  // Overlapping windows: one input can be the maximum of two windows.
  check_all_layouts("max_pool1d k3 s1", [](auto& in) { return tf::max_pool1d(in[0], 3, 1); },
                    {{2, 2, 5}});
  check_all_layouts("max_pool1d unbatched", [](auto& in) { return tf::max_pool1d(in[0], 2, 1); },
                    {{2, 4}});
}

TEST_CASE("gradcheck: embedding") {
  // Repeated indices: their rows' gradients must add up.
  const Tensor indices = tf::from<std::int64_t>({1, 3, 1, 0, 4, 1}, {2, 3});
  check_all_layouts("embedding", [indices](auto& in) { return tf::embedding(in[0], indices); },
                    {{5, 3}});
  const Tensor flat = tf::from<std::int64_t>({2, 2}, {2});
  check_all_layouts("embedding 1-D indices",
                    [flat](auto& in) { return tf::embedding(in[0], flat) * in[0].select(0, 2); },
                    {{3, 2}});
}

TEST_CASE("gradcheck: dropout") {
  // A generator made afresh in every call gives every forward the same mask.
  check_all_layouts("dropout p = 0.4",
                    [](auto& in) {
                      tf::Generator gen(7);
                      return tf::dropout(in[0], 0.4, true, &gen);
                    },
                    {{3, 4}});
  check_all_layouts("dropout eval", [](auto& in) { return tf::dropout(in[0], 0.4, false) * 1.0; },
                    {{2, 3}});
}
