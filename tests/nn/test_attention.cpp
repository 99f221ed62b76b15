// Attention: fused against composite, masks, Linformer equalities, projections and padding.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::randn64;

namespace {
double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// Copies one attention module's q/k/v/out weights into another.
void copy_weights(nn::Attention& from_module, nn::Attention& to_module) {
  NoGradGuard no_grad;
  for (auto [src, dst] : {std::pair{from_module.q_proj, to_module.q_proj},
                          std::pair{from_module.k_proj, to_module.k_proj},
                          std::pair{from_module.v_proj, to_module.v_proj},
                          std::pair{from_module.out_proj, to_module.out_proj}}) {
    raw::copy(src->weight, dst->weight);
    raw::copy(src->bias, dst->bias);
  }
}

std::shared_ptr<nn::LinformerAttention> make_linformer(const std::string& kind, std::int64_t d,
                                                       std::int64_t heads, std::int64_t max_n,
                                                       std::int64_t k) {
  const nn::ProjectionSpec spec{.k = k, .max_seq_len = max_n, .head_dim = d / heads, .heads = 1};
  return std::make_shared<nn::LinformerAttention>(d, heads, nn::make_projection(kind, spec),
                                                  nn::make_projection(kind, spec));
}
}  // namespace

TEST_CASE("fused attention equals the textbook composition, forward and backward") {
  manual_seed(3);
  Tensor q = randn64({2, 3, 5, 4}), k = randn64({2, 3, 6, 4}), v = randn64({2, 3, 6, 2});
  Tensor mask = gt(rand({2, 1, 5, 6}), scalar_tensor(0.3)).contiguous();
  // Every query keeps at least one key.
  mask = where(causal_mask(5, 6), from<bool>({true}, {1}), mask);
  for (bool causal : {false, true}) {
    for (bool with_mask : {false, true}) {
      Tensor m = with_mask ? mask : Tensor();
      Tensor a = fused_attention(q, k, v, m, {.causal = causal});
      Tensor b = nn::functional::scaled_dot_product_attention(q, k, v, m, causal);
      CHECK(max_abs_diff(a, b) < 1e-12);
      Tensor r = randn64({2, 3, 5, 2}, false);
      std::vector<std::vector<double>> grads;
      for (const Tensor& out : {a, b}) {
        q.zero_grad(), k.zero_grad(), v.zero_grad();
        sum(mul(out, r)).backward();
        grads.push_back(cat({q.grad().flatten(), k.grad().flatten(), v.grad().flatten()}, 0)
                            .to_vector<double>());
      }
      double diff = 0;
      for (std::size_t i = 0; i < grads[0].size(); ++i) {
        diff = std::max(diff, std::abs(grads[0][i] - grads[1][i]));
      }
      CHECK(diff < 1e-12);
    }
  }
}

TEST_CASE("fused attention: gradient check, transposed inputs, errors") {
  Tensor q = randn64({1, 2, 4, 3}), k = randn64({1, 2, 3, 5}), v = randn64({1, 2, 5, 2});
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return fused_attention(in[0], in[1].transpose(-2, -1), in[2]);
      },
      {q, k, v}));
  Tensor q2 = randn64({1, 1, 4, 3}), k2 = randn64({1, 1, 4, 3}), v2 = randn64({1, 1, 4, 3});
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return fused_attention(in[0], in[1], in[2], {}, {.causal = true});
      },
      {q2, k2, v2}));
  CHECK_THROWS_WITH_AS(fused_attention(randn({1, 4, 3}), randn({1, 4, 2}), randn({1, 4, 3})),
                       doctest::Contains("q and k differ in their last dim"), Error);
  CHECK_THROWS_AS(fused_attention(randn({1, 4, 3}), randn({1, 4, 3}), randn({1, 5, 3})), Error);
  CHECK_THROWS_AS(
      fused_attention(randn({1, 4, 3}), randn({1, 4, 3}), randn({1, 4, 3}), ones({4, 4})),
      Error);  // float mask
}

TEST_CASE("MultiHeadAttention: padding never reaches real positions; causal hides the future") {
  manual_seed(5);
  nn::MultiHeadAttention mha(8, 2);
  mha.eval();
  Tensor x = randn({2, 6, 8});
  Tensor pad = from<bool>({false, false, false, false, true, true,  //
                           false, false, false, false, false, true},
                          {2, 6});
  Tensor y = mha.forward(x, pad);
  // Change the padded tokens only.
  Tensor x2 = where(pad.unsqueeze(2), randn({2, 6, 8}) * 10.0, x);
  Tensor y2 = mha.forward(x2, pad);
  CHECK(max_abs_diff(y.narrow(1, 0, 4), y2.narrow(1, 0, 4)) == 0.0);
  CHECK(max_abs_diff(y.select(0, 1).narrow(0, 0, 5), y2.select(0, 1).narrow(0, 0, 5)) == 0.0);

  Tensor c1 = mha.forward(x, {}, /*causal=*/true);
  Tensor x3 = cat({x.narrow(1, 0, 3), randn({2, 3, 8})}, 1);
  Tensor c3 = mha.forward(x3, {}, /*causal=*/true);
  CHECK(max_abs_diff(c1.narrow(1, 0, 3), c3.narrow(1, 0, 3)) < 1e-6);
  CHECK(max_abs_diff(c1.narrow(1, 3, 3), c3.narrow(1, 3, 3)) > 1e-3);

  CHECK_THROWS_WITH_AS(mha.forward(randn({2, 6, 7})), doctest::Contains("expected input [B, n, 8]"),
                       Error);
  CHECK_THROWS_AS(mha.forward(x, from<bool>({true}, {1, 1})), Error);
  CHECK_THROWS_AS(nn::MultiHeadAttention(10, 3), Error);
}

TEST_CASE("Linformer with k = n and identity projections equals full attention") {
  manual_seed(7);
  const std::int64_t n = 9, d = 8, heads = 2;
  nn::MultiHeadAttention mha(d, heads);
  auto lin = make_linformer("identity", d, heads, n, n);
  copy_weights(mha, *lin);
  Tensor x = randn({3, n, d});
  CHECK(max_abs_diff(mha.forward(x), lin->forward(x)) == 0.0);
}

TEST_CASE("every projection kind gives exactly k rows for every n <= max_seq_len") {
  const std::int64_t max_n = 11;
  for (const std::string kind : {"linear", "mean", "max", "conv"}) {
    for (std::int64_t k : {1, 3, 4, 11}) {
      auto p = nn::make_projection(kind, {.k = k, .max_seq_len = max_n, .head_dim = 2, .heads = 1});
      for (std::int64_t n = 1; n <= max_n; ++n) {
        CAPTURE(kind);
        CAPTURE(k);
        CAPTURE(n);
        CHECK(p->forward(randn({2, 3, n, 2})).shape() == Shape{2, 3, k, 2});
      }
      CHECK_THROWS_WITH_AS(p->forward(randn({1, 1, max_n + 1, 2})),
                           doctest::Contains("max_seq_len"), Error);
    }
  }
  CHECK_THROWS_WITH_AS(nn::make_projection("nope", {.k = 1, .max_seq_len = 2, .head_dim = 1}),
                       doctest::Contains("unknown projection kind \"nope\""), Error);
  CHECK_THROWS_AS(nn::make_projection("linear", {.k = 5, .max_seq_len = 4, .head_dim = 1}), Error);
}

TEST_CASE("pooling projections follow the documented window rule") {
  // n = 5, k = 2: w = 3; window 0 = rows 0..2, window 1 = rows 3..4 (one row short).
  Tensor x = from<float>({1, 2, 3, 4, 6}, {1, 1, 5, 1});
  auto mean = nn::make_projection("mean", {.k = 2, .max_seq_len = 8, .head_dim = 1});
  auto max = nn::make_projection("max", {.k = 2, .max_seq_len = 8, .head_dim = 1});
  CHECK(mean->forward(x).to_vector<float>() == std::vector<float>{2.0f, 5.0f});
  CHECK(max->forward(x).to_vector<float>() == std::vector<float>{3.0f, 6.0f});
  // n = 2, k = 4: w = 1; windows 2 and 3 hold no rows and give 0.
  Tensor y = from<float>({-1, -2}, {1, 1, 2, 1});
  CHECK(max->forward(y).to_vector<float>().size() == 2);
  auto max4 = nn::make_projection("max", {.k = 4, .max_seq_len = 8, .head_dim = 1});
  CHECK(max4->forward(y).to_vector<float>() == std::vector<float>{-1.0f, -2.0f, 0.0f, 0.0f});
}

TEST_CASE("Linformer: padded tokens never change real positions, for every projection kind") {
  for (const std::string kind : {"linear", "mean", "max", "conv"}) {
    CAPTURE(kind);
    manual_seed(11);
    auto lin = make_linformer(kind, 8, 2, 8, 3);
    lin->eval();
    Tensor x = randn({2, 7, 8});
    Tensor pad = from<bool>({false, false, false, false, false, true, true,  //
                             false, false, false, true, true, true, true},
                            {2, 7});
    Tensor y = lin->forward(x, pad);
    Tensor x2 = where(pad.unsqueeze(2), randn({2, 7, 8}) * 100.0, x);
    Tensor y2 = lin->forward(x2, pad);
    CHECK(max_abs_diff(y.select(0, 0).narrow(0, 0, 5), y2.select(0, 0).narrow(0, 0, 5)) == 0.0);
    CHECK(max_abs_diff(y.select(0, 1).narrow(0, 0, 3), y2.select(0, 1).narrow(0, 0, 3)) == 0.0);
    // Without the mask the padded values do leak: the test above is not vacuous.
    CHECK(max_abs_diff(lin->forward(x).narrow(1, 0, 3), lin->forward(x2).narrow(1, 0, 3)) > 1e-4);
  }
}

TEST_CASE("Linformer refuses causal masks with an explanation") {
  auto lin = make_linformer("linear", 4, 1, 6, 2);
  CHECK_THROWS_WITH_AS(lin->forward(randn({1, 6, 4}), {}, true), doctest::Contains("future"),
                       Error);
}

TEST_CASE("attention layers keep their probabilities on request") {
  auto lin = make_linformer("linear", 8, 2, 10, 4);
  nn::MultiHeadAttention mha(8, 2);
  lin->forward(randn({3, 10, 8}));
  CHECK_FALSE(lin->last_attention().defined());
  lin->keep_attention(true);
  mha.keep_attention(true);
  lin->forward(randn({3, 10, 8}));
  mha.forward(randn({3, 10, 8}));
  CHECK(lin->last_attention().shape() == Shape{3, 2, 10, 4});
  CHECK(mha.last_attention().shape() == Shape{3, 2, 10, 10});
  // Rows of probabilities sum to 1.
  auto rows = sum(mha.last_attention(), {-1}).to_vector<float>();
  for (float r : rows) CHECK(r == doctest::Approx(1.0f).epsilon(1e-5));
}
