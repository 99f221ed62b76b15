// The learned linear projection's recipe: E starts as mean pooling over max_seq_len's windows
// and learns at a fraction of the learning rate without weight decay, through the module's
// ParamOptions and optim::decay_groups; rows whose weights miss every real position are empty.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <vector>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::max_abs_diff;
using test::randn64;

namespace {

std::shared_ptr<nn::LinearProjection> linear(std::int64_t k, std::int64_t max_seq_len,
                                             nn::ProjectionInit init = nn::ProjectionInit::pooling,
                                             std::int64_t heads = 1) {
  auto p = std::make_shared<nn::LinearProjection>(nn::ProjectionSpec{
      .k = k, .max_seq_len = max_seq_len, .head_dim = 2, .heads = heads, .init = init});
  p->to(kFloat64);
  return p;
}

}  // namespace

TEST_CASE("linear E starts as the mean-pooling windows of max_seq_len, shifted per head") {
  // max_seq_len 7, k 3: windows 0..2, 2..4, 4..6 (docs/attention.md), weight 1/3 each (as
  // float32: parameters are made in float32 and converted). With one matrix per head (2 heads),
  // head 1's windows move right by floor(7 / 3) * 1 / 2 = 1 position, the first reaching down
  // to 0 and the last up to 6: 0..3, 3..5, 5..6.
  auto p = linear(3, 7, nn::ProjectionInit::pooling, 2);
  const auto e = p->weight.to_vector<double>();
  const std::vector<double> expected = {
      1. / 3, 1. / 3, 1. / 3, 0,      0,      0,      0,       // head 0
      0,      0,      1. / 3, 1. / 3, 1. / 3, 0,      0,       //
      0,      0,      0,      0,      1. / 3, 1. / 3, 1. / 3,  //
      1. / 4, 1. / 4, 1. / 4, 1. / 4, 0,      0,      0,       // head 1
      0,      0,      0,      1. / 3, 1. / 3, 1. / 3, 0,       //
      0,      0,      0,      0,      0,      1. / 2, 1. / 2};
  REQUIRE(e.size() == expected.size());
  for (std::size_t i = 0; i < e.size(); ++i) {
    CHECK(e[i] == doctest::Approx(expected[i]).epsilon(1e-7));
  }
  // Each head's windows cover every position (neighbouring windows share a position where k
  // does not divide max_seq_len).
  for (auto [k, len, heads] : std::vector<std::array<std::int64_t, 3>>{
           {32, 128, 4}, {64, 128, 4}, {5, 33, 3}, {7, 7, 2}, {3, 100, 2}}) {
    auto q = linear(k, len, nn::ProjectionInit::pooling, heads);
    const auto w = q->weight.to_vector<double>();
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t j = 0; j < len; ++j) {
        int rows = 0;
        double total = 0;
        for (std::int64_t i = 0; i < k; ++i) {
          const double v = w[static_cast<std::size_t>((h * k + i) * len + j)];
          rows += v != 0;
          total += v;
        }
        CHECK(rows >= 1);
        CHECK(rows <= 2);
        CHECK(total > 0);
      }
    }
  }
  // So at n = max_seq_len it computes mean pooling (to float32's rounding of 1/w), with or
  // without k dividing n.
  for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{3, 7}, {4, 12}, {32, 128}, {5, 33}}) {
    auto lin = linear(k, n);
    auto mean = nn::make_projection("mean", {.k = k, .max_seq_len = n, .head_dim = 2});
    Tensor x = randn64({2, 3, n, 2}, false);
    CHECK(max_abs_diff(lin->forward(x), mean->forward(x)) < 1e-6);
  }
}

TEST_CASE("linear E with the normal start: N(0, 1/k), every row covers every position") {
  manual_seed(5);
  auto p = linear(16, 256, nn::ProjectionInit::normal);
  const auto e = p->weight.to_vector<double>();
  double sum = 0, sum_sq = 0;
  for (double v : e) sum += v, sum_sq += v * v;
  const double mean = sum / static_cast<double>(e.size());
  const double var = sum_sq / static_cast<double>(e.size()) - mean * mean;
  CHECK(std::abs(mean) < 0.01);
  CHECK(var == doctest::Approx(1.0 / 16).epsilon(0.05));
  for (std::int64_t n : {1, 5, 256}) {
    CHECK_FALSE(p->project(randn64({1, 1, n, 2}, false), {}).empty_rows.defined());
  }
}

TEST_CASE("linear: a row whose weights miss every real position is reported empty") {
  // Pooling start, max_seq_len 8, k 4: rows cover 0..1, 2..3, 4..5, 6..7.
  auto p = linear(4, 8);
  // n = 3: rows 2 and 3 start beyond the sequence.
  auto short_seq = p->project(randn64({1, 1, 3, 2}, false), {});
  REQUIRE(short_seq.empty_rows.defined());
  CHECK(short_seq.empty_rows.to_vector<bool>() == std::vector<bool>{false, false, true, true});
  // The same through a mask: sequence 0 has 8 real positions, sequence 1 has 5, sequence 2 only
  // positions 6 and 7 (padding in front).
  std::vector<bool> padded(24, false);
  for (int j = 5; j < 8; ++j) padded[static_cast<std::size_t>(8 + j)] = true;
  for (int j = 0; j < 6; ++j) padded[static_cast<std::size_t>(16 + j)] = true;
  auto masked = p->project(randn64({3, 1, 8, 2}, false), from<bool>(padded, {3, 8}));
  CHECK(masked.empty_rows.to_vector<bool>() == std::vector<bool>{false, false, false, false,  //
                                                                 false, false, false, true,   //
                                                                 true, true, true, false});
  // The rule reads E as it is, not as it started: a learned weight at position 7 in row 0 makes
  // row 0 cover sequence 2, and zeroing row 1 makes it empty everywhere.
  std::vector<double> e = p->weight.to_vector<double>();
  e[7] = 0.5;
  for (int j = 0; j < 8; ++j) e[static_cast<std::size_t>(8 + j)] = 0.0;
  raw::copy(from(e, {1, 4, 8}), p->weight);
  auto learned = p->project(randn64({3, 1, 8, 2}, false), from<bool>(padded, {3, 8}));
  CHECK(learned.empty_rows.to_vector<bool>() == std::vector<bool>{false, true, false, false,  //
                                                                  false, true, false, true,   //
                                                                  false, true, true, false});
  // Full length, nothing zeroed: no row is empty and no mask is returned.
  CHECK_FALSE(linear(4, 8)->project(randn64({2, 1, 8, 2}, false), {}).empty_rows.defined());
}

TEST_CASE("decay_groups gives linear E its lr_scale and no weight decay") {
  nn::EncoderConfig config{.layers = 2,
                           .d_model = 8,
                           .heads = 2,
                           .d_ff = 16,
                           .max_seq_len = 16,
                           .attention = nn::AttentionKind::linformer,
                           .linformer = {.k = 4, .projection_lr_scale = 0.25}};
  auto encoder = std::make_shared<nn::TransformerEncoder>(config);
  auto groups = nn::optim::decay_groups(*encoder, 0.01);
  REQUIRE(groups.size() == 3);
  CHECK(groups[2].params.size() == 4);  // E and F of two layers (headwise sharing)
  CHECK(groups[2].lr_scale == 0.25);
  CHECK(groups[2].weight_decay == 0.0);
  for (const Tensor& p : groups[2].params) CHECK(p.dim() == 3);
  CHECK(groups[0].params.size() + groups[1].params.size() + 4 == encoder->parameters().size());
  // Mean pooling has no parameters: the two usual groups only.
  config.linformer.projection = nn::ProjectionKind::mean;
  CHECK(nn::optim::decay_groups(nn::TransformerEncoder(config), 0.01).size() == 2);

  // The optimizer applies it: Adam's first step moves every entry by about lr (times the scale).
  config.linformer.projection = nn::ProjectionKind::linear;
  nn::TransformerEncoder model(config);
  nn::optim::AdamW optimizer(nn::optim::decay_groups(model, 0.01),
                             {.lr = 1e-2, .weight_decay = 0.01});
  Tensor projection_weight;
  for (const auto& [name, p] : model.named_parameters()) {
    if (name == "layers.0.attention.key_projection.weight") projection_weight = p;
  }
  REQUIRE(projection_weight.defined());
  const auto before = projection_weight.to_vector<float>();
  Tensor x = randn({2, 16, 8});
  sum(mul(model.forward(x), x)).backward();
  optimizer.step();
  const auto after = projection_weight.to_vector<float>();
  double biggest = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    biggest = std::max(biggest, static_cast<double>(std::abs(after[i] - before[i])));
  }
  CHECK(biggest == doctest::Approx(0.25 * 1e-2).epsilon(0.01));
  // set_lr keeps the fraction.
  optimizer.set_lr(4e-3);
  CHECK(optimizer.lr(2) == doctest::Approx(1e-3));
  CHECK(optimizer.lr(0) == doctest::Approx(4e-3));
}

TEST_CASE("set_param_options: unknown names and bad scales are errors; decay can be forced") {
  struct Toy : nn::Module {
    Tensor w, b;
    Toy() {
      w = register_parameter("w", zeros({2, 2}));
      b = register_parameter("b", zeros({2}));
    }
  };
  Toy toy;
  CHECK_THROWS_WITH_AS(toy.set_param_options("nope", {}),
                       doctest::Contains("\"nope\" is not a parameter"), Error);
  CHECK_THROWS_WITH_AS(toy.set_param_options("w", {.lr_scale = 0.0, .decay = {}}),
                       doctest::Contains("positive, finite lr_scale"), Error);
  toy.set_param_options("w", {.lr_scale = 1.0, .decay = false});
  toy.set_param_options("b", {.lr_scale = 1.0, .decay = true});
  auto groups = nn::optim::decay_groups(toy, 0.1);
  REQUIRE(groups.size() == 2);
  REQUIRE(groups[0].params.size() == 1);
  CHECK(groups[0].params[0].dim() == 1);  // b, decayed on request
  REQUIRE(groups[1].params.size() == 1);
  CHECK(groups[1].params[0].dim() == 2);  // w, not decayed on request
  CHECK_THROWS_WITH_AS(
      nn::LinearProjection({.k = 2, .max_seq_len = 4, .head_dim = 1, .lr_scale = -1}),
      doctest::Contains("positive, finite lr_scale"), Error);
}
