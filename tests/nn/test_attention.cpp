// Attention: fused against composite, masks, Linformer equalities, projections and padding.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::max_abs_diff;
using test::randn64;

namespace {
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

TEST_CASE("future_mask marks the keys causal attention excludes") {
  // true where j > i: the keys in the future of query i.
  CHECK(future_mask(3, 4).to_vector<bool>() == std::vector<bool>{false, true, true, true,   //
                                                                 false, false, true, true,  //
                                                                 false, false, false, true});
  CHECK_THROWS_WITH_AS(future_mask(-1, 4), "future_mask: expected non-negative sizes, got -1 x 4",
                       Error);
}

TEST_CASE("fused attention equals the textbook composition, forward and backward") {
  manual_seed(3);
  Tensor query = randn64({2, 3, 5, 4}), key = randn64({2, 3, 6, 4}), value = randn64({2, 3, 6, 2});
  Tensor excluded = le(rand({2, 1, 5, 6}), scalar_tensor(0.3)).contiguous();
  // Every query keeps at least one key: only keys in its future may be excluded.
  excluded = where(future_mask(5, 6), excluded, from<bool>({false}, {1}));
  for (bool causal : {false, true}) {
    for (bool with_mask : {false, true}) {
      Tensor m = with_mask ? excluded : Tensor();
      Tensor a = fused_attention(query, key, value, m, {.causal = causal});
      Tensor b = nn::functional::attention(query, key, value, m, causal);
      CHECK(max_abs_diff(a, b) < 1e-12);
      Tensor r = randn64({2, 3, 5, 2}, false);
      std::vector<std::vector<double>> grads;
      for (const Tensor& out : {a, b}) {
        query.zero_grad(), key.zero_grad(), value.zero_grad();
        sum(mul(out, r)).backward();
        grads.push_back(
            cat({query.grad().flatten(), key.grad().flatten(), value.grad().flatten()}, 0)
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
  Tensor query = randn64({1, 2, 4, 3}), key_transposed = randn64({1, 2, 3, 5}),
         value = randn64({1, 2, 5, 2});
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return fused_attention(in[0], in[1].transpose(-2, -1), in[2]);
      },
      {query, key_transposed, value}));
  Tensor q2 = randn64({1, 1, 4, 3}), key2 = randn64({1, 1, 4, 3}), v2 = randn64({1, 1, 4, 3});
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return fused_attention(in[0], in[1], in[2], {}, {.causal = true});
      },
      {q2, key2, v2}));
  // With dropout the composition runs (the same mask at every call: one seed): the scale on the
  // queries where the keys are as many or more, on the keys and on d_key's result where fewer.
  for (const std::int64_t keys : {3, 6}) {
    INFO(keys << " keys against 5 queries");
    Tensor qd = randn64({1, 2, 5, 3}), kd = randn64({1, 2, keys, 3}), vd = randn64({1, 2, keys, 2});
    CHECK(gradcheck(
        [](const std::vector<Tensor>& in) {
          Generator gen(11);
          return fused_attention(in[0], in[1], in[2], {},
                                 {.dropout = 0.25, .training = true, .generator = &gen});
        },
        {qd, kd, vd}));
  }
  // Dropout 1 drops every probability in training (as PyTorch's scaled_dot_product_attention
  // with dropout_p = 1): the output and every gradient are 0; in eval the layer is unchanged.
  {
    Tensor qd = randn64({1, 2, 5, 3}), kd = randn64({1, 2, 4, 3}), vd = randn64({1, 2, 4, 2});
    for (Tensor* t : {&qd, &kd, &vd}) t->requires_grad_(true);
    const Tensor out = fused_attention(qd, kd, vd, {}, {.dropout = 1.0, .training = true});
    CHECK(out.to_vector<double>() == std::vector<double>(20, 0.0));
    sum(out * randn64({1, 2, 5, 2})).backward();
    for (Tensor* t : {&qd, &kd, &vd}) {
      CHECK(t->grad().to_vector<double>() == std::vector<double>(t->numel(), 0.0));
    }
    CHECK(fused_attention(qd, kd, vd, {}, {.dropout = 1.0}).to_vector<double>() ==
          fused_attention(qd, kd, vd, {}).to_vector<double>());
    CHECK_THROWS_WITH_AS(fused_attention(qd, kd, vd, {}, {.dropout = 1.5}),
                         doctest::Contains("expected dropout in [0, 1], got 1.5"), Error);
  }
  CHECK_THROWS_WITH_AS(fused_attention(randn({1, 4, 3}), randn({1, 4, 2}), randn({1, 4, 3})),
                       doctest::Contains("query and key differ in their last dim"), Error);
  CHECK_THROWS_AS(fused_attention(randn({1, 4, 3}), randn({1, 4, 3}), randn({1, 5, 3})), Error);
}

TEST_CASE("fused attention: gradient checks through each path of the CPU kernel") {
  // A key-padding mask that excludes the last key of every sequence (never key 0, so no row is
  // excluded everywhere), with and without the causal rule.
  const auto mask_last = [](std::int64_t batch, std::int64_t m) {
    std::vector<bool> v(static_cast<std::size_t>(batch * m), false);
    for (std::int64_t b = 0; b < batch; ++b) v[static_cast<std::size_t>(b * m + m - 1)] = true;
    return from<bool>(v, {batch, 1, 1, m});
  };
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    // 16 matrices: the backward runs a matrix per item, accumulating the key and value
    // gradients; n < m, so the causal rule leaves keys no query sees.
    const Tensor mask16 = mask_last(4, 5);
    CHECK(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return fused_attention(in[0], in[1], in[2], mask16, {.causal = causal});
        },
        {randn64({4, 4, 3, 2}), randn64({4, 4, 5, 2}), randn64({4, 4, 5, 3})}));
    // One matrix of 70 queries: blocks of 32 rows, dS written whole, the key and value gradients
    // by blocks of key columns; n > m, so later blocks see every key.
    const Tensor mask1 = mask_last(1, 40);
    CHECK(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return fused_attention(in[0], in[1], in[2], mask1, {.causal = causal});
        },
        {randn64({1, 1, 70, 2}), randn64({1, 1, 40, 2}), randn64({1, 1, 40, 2})}));
  }
}

TEST_CASE("attention masks of the wrong dtype or shape are errors naming the op, both forms") {
  using Sdpa = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&);
  const std::pair<const char*, Sdpa> forms[] = {
      {"fused_attention", [](const Tensor& q, const Tensor& key, const Tensor& v,
                             const Tensor& m) { return fused_attention(q, key, v, m); }},
      {"attention", [](const Tensor& q, const Tensor& key, const Tensor& v,
                       const Tensor& m) { return nn::functional::attention(q, key, v, m); }},
  };
  // Scores [2, 4, 5]: 2 batches, 4 queries, 5 keys.
  Tensor query = randn({2, 4, 3}), key = randn({2, 5, 3}), value = randn({2, 5, 3});
  for (const auto& form : forms) {
    const char* op = form.first;
    const Sdpa attend = form.second;
    CAPTURE(op);
    const std::string expected = std::string(op) + ": expected excluded_mask of dtype bool";
    // A float mask (0/1 or additive) is refused, whatever its shape.
    CHECK_THROWS_WITH_AS(
        attend(query, key, value, ones({2, 1, 5})),
        doctest::Contains((expected + " broadcastable to the scores [2, 4, 5] "
                                      "(true = key excluded), got float32 [2, 1, 5]")
                              .c_str()),
        Error);
    // A key-padding mask [B, m] must be given as [B, 1, m]: [2, 5] does not broadcast.
    CHECK_THROWS_WITH_AS(attend(query, key, value, zeros({2, 5}, {.dtype = kBool})),
                         doctest::Contains("got bool [2, 5]"), Error);
    // A mask that would grow the scores (an extra leading dim) is refused too.
    CHECK_THROWS_WITH_AS(attend(query, key, value, zeros({3, 2, 4, 5}, {.dtype = kBool})),
                         doctest::Contains("got bool [3, 2, 4, 5]"), Error);
    // The shapes that do fit: per key, per query and key, one for all.
    for (const Shape& fits : {Shape{2, 1, 5}, Shape{2, 4, 5}, Shape{5}, Shape{1}}) {
      CAPTURE(shape_str(fits));
      CHECK(attend(query, key, value, zeros(fits, {.dtype = kBool})).shape() == Shape{2, 4, 3});
    }
  }
}

TEST_CASE("key padding: the module and the functional forms agree, and padded keys get weight 0") {
  manual_seed(13);
  const std::int64_t batch = 2, n = 6, d = 8, heads = 2;
  nn::MultiHeadAttention mha(d, heads);
  mha.eval();
  mha.keep_attention(true);
  Tensor x = randn({batch, n, d});
  // true = padding: the last two keys of row 0, the last one of row 1.
  Tensor key_padding_mask = from<bool>({false, false, false, false, true, true,  //
                                        false, false, false, false, false, true},
                                       {batch, n});
  const auto padded = key_padding_mask.to_vector<bool>();
  // Every probability a query gives a padded key is exactly 0; the real keys take all of it.
  auto check_padded_keys_get_nothing = [&](const Tensor& probs) {
    REQUIRE(probs.shape() == Shape{batch, heads, n, n});
    const auto p = probs.to_vector<float>();
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t i = 0; i < n; ++i) {
          float real_sum = 0;
          for (std::int64_t j = 0; j < n; ++j) {
            const float w = p[static_cast<std::size_t>(((b * heads + h) * n + i) * n + j)];
            if (padded[static_cast<std::size_t>(b * n + j)]) {
              CHECK(w == 0.0f);
            } else {
              CHECK(w > 0.0f);
              real_sum += w;
            }
          }
          CHECK(real_sum == doctest::Approx(1.0f).epsilon(1e-5));
        }
      }
    }
  };

  // The same attention by hand: the module's projections, then each functional form with the
  // key-padding mask as an excluded mask over [B, H, n, n].
  auto split = [&](const Tensor& t) {
    return t.view({batch, n, heads, d / heads}).transpose(1, 2);
  };
  Tensor query = split(mha.q_proj->forward(x)), key = split(mha.k_proj->forward(x)),
         value = split(mha.v_proj->forward(x));
  Tensor excluded = key_padding_mask.view({batch, 1, 1, n});
  auto merge = [&](const Tensor& t) {
    return mha.out_proj->forward(t.transpose(1, 2).reshape({batch, n, d}));
  };
  Tensor fused_probs, composite_probs;
  Tensor by_fused = merge(fused_attention(query, key, value, excluded, {.probs = &fused_probs}));
  Tensor by_composite =
      merge(nn::functional::attention(query, key, value, excluded, false, &composite_probs));
  check_padded_keys_get_nothing(fused_probs);
  check_padded_keys_get_nothing(composite_probs);
  CHECK(max_abs_diff(by_fused, by_composite) < 1e-6);

  for (bool fused : {true, false}) {
    CAPTURE(fused);
    mha.set_fused(fused);
    Tensor y = mha.forward(x, key_padding_mask);
    check_padded_keys_get_nothing(mha.last_attention());
    CHECK(max_abs_diff(y, by_fused) < 1e-6);
    // Not vacuous: without the mask the padded keys do get weight and the output changes.
    Tensor unmasked = mha.forward(x);
    CHECK(max_abs_diff(mha.last_attention(), fused_probs) > 1e-3);
    CHECK(max_abs_diff(unmasked, y) > 1e-4);
  }

  // The module validates its mask and names what it expected.
  CHECK_THROWS_WITH_AS(
      mha.forward(x, ones({batch, n})),
      doctest::Contains("MultiHeadAttention: expected key_padding_mask of dtype bool and shape "
                        "[2, 6] (true = padding), got float32 [2, 6]"),
      Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, zeros({batch, 1, 1, n}, {.dtype = kBool})),
                       doctest::Contains("got bool [2, 1, 1, 6]"), Error);
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
  // n = 5, k = 2 (adaptive windows): window 0 = rows floor(0) .. ceil(5/2)-1 = 0..2, window 1 =
  // rows floor(5/2) .. ceil(10/2)-1 = 2..4 (row 2 in both).
  Tensor x = from<float>({1, 2, 3, 4, 6}, {1, 1, 5, 1});
  auto mean = nn::make_projection("mean", {.k = 2, .max_seq_len = 8, .head_dim = 1});
  auto max = nn::make_projection("max", {.k = 2, .max_seq_len = 8, .head_dim = 1});
  const auto means = mean->forward(x).to_vector<float>();
  REQUIRE(means.size() == 2);
  CHECK(means[0] == 2.0f);
  CHECK(means[1] == doctest::Approx(13.0 / 3.0).epsilon(1e-6));
  CHECK(max->forward(x).to_vector<float>() == std::vector<float>{3.0f, 6.0f});
  CHECK_FALSE(max->project(x, {}).empty_rows.defined());
  // n = 2, k = 4: windows 0 and 1 are rows 0 and 1; windows 2 and 3 hold no row: 0, and
  // reported empty so that attention excludes them.
  Tensor y = from<float>({-1, -2}, {1, 1, 2, 1});
  CHECK(max->forward(y).to_vector<float>().size() == 2);
  auto max4 = nn::make_projection("max", {.k = 4, .max_seq_len = 8, .head_dim = 1});
  CHECK(max4->forward(y).to_vector<float>() == std::vector<float>{-1.0f, -2.0f, 0.0f, 0.0f});
  CHECK(max4->project(y, {}).empty_rows.to_vector<bool>() ==
        std::vector<bool>{false, false, true, true});
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

TEST_CASE("scaled_dot_product_attention follows PyTorch: true takes part, additive masks, scale") {
  manual_seed(11);
  const TensorOptions f64{.dtype = DType::float64};
  const Tensor query = randn({2, 3, 4, 5}, f64), key = randn({2, 3, 6, 5}, f64),
               value = randn({2, 3, 6, 2}, f64);
  // Keys 4 and 5 of the second sequence are padding: PyTorch's SDPA mask says which keys take
  // part (true), tinyformer's excluded mask which do not.
  std::vector<bool> keep(12, true);
  keep[10] = keep[11] = false;
  const Tensor takes_part = from<bool>(keep, {2, 1, 1, 6});
  const Tensor excluded = eq(takes_part, from<bool>({false}, {1}));
  const Tensor by_sdpa =
      nn::functional::scaled_dot_product_attention(query, key, value, takes_part);
  const Tensor by_attention = nn::functional::attention(query, key, value, excluded);
  CHECK(max_abs_diff(by_sdpa, by_attention) < 1e-12);
  // The same mask as an additive one (0 keeps, -inf removes).
  const Tensor additive =
      where(takes_part, zeros({}, f64), full({}, -std::numeric_limits<double>::infinity(), f64));
  CHECK(max_abs_diff(nn::functional::scaled_dot_product_attention(query, key, value, additive),
                     by_attention) < 1e-12);
  // is_causal is attention's causal rule; scale replaces 1 / sqrt(d).
  CHECK(max_abs_diff(nn::functional::scaled_dot_product_attention(query, key, value, {}, 0.0, true),
                     nn::functional::attention(query, key, value, {}, true)) < 1e-12);
  CHECK(max_abs_diff(
            nn::functional::scaled_dot_product_attention(query, key, value, {}, 0.0, false, 1.0),
            nn::functional::attention(query * std::sqrt(5.0), key, value)) < 1e-12);
  // dropout_p = 1 drops every probability.
  CHECK(max_abs_diff(nn::functional::scaled_dot_product_attention(query, key, value, {}, 1.0),
                     zeros({2, 3, 4, 2}, f64)) == 0.0);
  // What does not fit is refused, naming the op.
  CHECK_THROWS_WITH_AS(
      nn::functional::scaled_dot_product_attention(query, key, value, ones({2, 1, 1, 6})),
      doctest::Contains("scaled_dot_product_attention: expected a bool attn_mask"), Error);
  CHECK_THROWS_WITH_AS(
      nn::functional::scaled_dot_product_attention(query, key, value, takes_part, -0.5),
      doctest::Contains("dropout_p in [0, 1]"), Error);
  CHECK_THROWS_WITH_AS(nn::functional::scaled_dot_product_attention(query, key, value,
                                                                    from<bool>({true, false}, {2})),
                       doctest::Contains("cannot be broadcast"), Error);
}

TEST_CASE("MultiHeadAttention's PyTorch-style call: cross-attention, masks and weights") {
  manual_seed(21);
  nn::MultiHeadAttention mha(8, 2);
  mha.to(DType::float64);
  const Tensor query = randn64({2, 3, 8}, false), memory = randn64({2, 5, 8}, false);
  // Keys 3 and 4 of the second sequence are padding.
  const Tensor padding = from<bool>({false, false, false, false, false,  //
                                     false, false, false, true, true},
                                    {2, 5});

  // Self-attention through the call equals the self-attention forward.
  const Tensor x = randn64({2, 5, 8}, false);
  const auto [self_out, self_weights] = mha.forward(x, x, x, {.key_padding_mask = padding});
  CHECK(max_abs_diff(self_out, mha.forward(x, padding)) < 1e-12);

  // Cross-attention equals the composition with the module's own projections.
  const auto [out, weights] = mha.forward(query, memory, memory, {.key_padding_mask = padding});
  const auto heads = [](const Tensor& t) { return t.view({2, t.size(1), 2, 4}).transpose(1, 2); };
  Tensor probs;
  const Tensor by_hand = nn::functional::attention(
      heads(mha.q_proj->forward(query)), heads(mha.k_proj->forward(memory)),
      heads(mha.v_proj->forward(memory)), padding.view({2, 1, 1, 5}), false, &probs);
  const Tensor expected = mha.out_proj->forward(by_hand.transpose(1, 2).reshape({2, 3, 8}));
  CHECK(out.shape() == Shape{2, 3, 8});
  CHECK(max_abs_diff(out, expected) < 1e-12);
  // Averaged weights [B, n, m]: rows sum to 1, padded keys get 0.
  REQUIRE(weights.shape() == Shape{2, 3, 5});
  CHECK(max_abs_diff(weights, mean(probs, {1})) < 1e-12);
  CHECK(max_abs_diff(sum(weights, {-1}), ones({2, 3}, {.dtype = DType::float64})) < 1e-12);
  CHECK(sum(weights.select(0, 1).slice(1, 3, 5)).item<double>() == 0.0);
  // Per-head weights, and none when not asked for.
  const auto per_head =
      mha.forward(query, memory, memory, {.need_weights = true, .average_attn_weights = false});
  CHECK(per_head.second.shape() == Shape{2, 2, 3, 5});
  CHECK(!mha.forward(query, memory, memory, {.need_weights = false}).second.defined());

  // attn_mask: bool true = excluded (nn.MultiheadAttention's convention) equals the additive
  // mask with -inf there, [n, m] and [B * H, n, m] alike.
  std::vector<bool> excluded_keys(15, false);
  excluded_keys[1] = excluded_keys[7] = excluded_keys[14] = true;
  const Tensor bool_mask = from<bool>(excluded_keys, {3, 5});
  const Tensor additive = where(
      bool_mask, full({}, -std::numeric_limits<double>::infinity(), {.dtype = DType::float64}),
      zeros({}, {.dtype = DType::float64}));
  const auto by_bool = mha.forward(query, memory, memory, {.attn_mask = bool_mask});
  const auto by_additive = mha.forward(query, memory, memory, {.attn_mask = additive});
  CHECK(max_abs_diff(by_bool.first, by_additive.first) < 1e-12);
  CHECK(max_abs_diff(by_bool.second, by_additive.second) < 1e-12);
  CHECK(by_bool.second.select(1, 0).select(1, 1).sum().item<double>() == 0.0);
  const auto by_heads =
      mha.forward(query, memory, memory, {.attn_mask = bool_mask.expand({4, 3, 5}).contiguous()});
  CHECK(max_abs_diff(by_bool.first, by_heads.first) < 1e-12);

  // Gradients reach the query, the memory and every projection.
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) {
        return mha.forward(in[0], in[1], in[1], {.key_padding_mask = padding}).first;
      },
      {randn64({2, 3, 8}), randn64({2, 5, 8})}));

  // What does not fit is refused, naming the module.
  CHECK_THROWS_WITH_AS(mha.forward(query, memory, randn64({2, 4, 8}, false)),
                       doctest::Contains("one length m"), Error);
  CHECK_THROWS_WITH_AS(mha.forward(query, memory, memory, {.attn_mask = ones({3, 5})}),
                       doctest::Contains("expected an attn_mask of dtype bool"), Error);
  CHECK_THROWS_WITH_AS(mha.forward(query, memory, memory, {.is_causal = true}),
                       doctest::Contains("is_causal needs as many queries as keys"), Error);
}
