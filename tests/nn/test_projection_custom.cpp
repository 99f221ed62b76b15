// A user's projection kind that reshapes the heads into windows with view() and reduces each
// window with matmul, registered by name: its rows and empty rows on the strided heads
// LinformerAttention hands it, and LinformerAttention with it under padding (forward, backward
// and float64 gradient checks), inside an encoder for every sharing mode.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::gradcheck_module;
using test::max_abs_diff;
using test::randn64;

namespace {

// Summary row i of head h is sum_j a[h, j] x[i * w + j] over window i of w = ceil(max_seq_len /
// k) positions, a learned [heads, w] (heads: 1 when the heads share it):
//   x [B, H, n, d] -> (zero rows up to k * w) -> view [B, H, k, w, d]
//   a [1, heads, 1, 1, w] @ windows -> [B, H, k, 1, d] -> [B, H, k, d]
// With n == k * w the view splits the sequence dim of the strided heads in place, so matmul
// reads windows whose batch dims (B, H, k) are not nested in memory.
class WindowProjection : public nn::Projection {
 public:
  explicit WindowProjection(const nn::ProjectionSpec& spec)
      : k_(spec.k), window_((spec.max_seq_len + spec.k - 1) / spec.k), heads_(spec.heads) {
    // Mean pooling, perturbed so that each weight matters on its own.
    weight = register_parameter(
        "weight", full({heads_, window_}, 1.0 / double(window_)) + 0.1 * randn({heads_, window_}));
  }
  Tensor forward(const Tensor& x) const override {
    const std::int64_t b = x.size(0), h = x.size(1), n = x.size(2), d = x.size(3);
    TF_CHECK(heads_ == 1 || heads_ == h, "WindowProjection: weights for ", heads_,
             " heads, the input has ", h);
    TF_CHECK(n <= k_ * window_, "WindowProjection: at most ", k_ * window_, " rows, got ", n);
    const Tensor rows = n == k_ * window_
                            ? x
                            : cat({x, zeros({b, h, k_ * window_ - n, d},
                                            {.dtype = x.dtype(), .device = x.device()})},
                                  2);
    const Tensor windows = rows.view({b, h, k_, window_, d});
    return matmul(weight.view({1, heads_, 1, 1, window_}), windows).view({b, h, k_, d});
  }
  // Padded rows arrive zeroed, so they add nothing; a window with no real position (all padding,
  // or beyond n) is reported empty.
  nn::Projected project(const Tensor& x, const Tensor& key_padding_mask) const override {
    const std::int64_t b = x.size(0), n = x.size(2);
    Tensor padded = key_padding_mask.defined() ? key_padding_mask : zeros({b, n}, {.dtype = kBool});
    if (n < k_ * window_) padded = cat({padded, ones({b, k_ * window_ - n}, {.dtype = kBool})}, 1);
    const Tensor empty = sum(padded.view({b, k_, window_}), {2}) == double(window_);  // [B, k]
    return {forward(x), empty};
  }
  std::int64_t k() const override { return k_; }
  std::string type_name() const override { return "WindowProjection"; }

  Tensor weight;  // a: [heads, w]

 private:
  std::int64_t k_, window_, heads_;
};

void register_windows() {
  nn::register_projection("test_windows", [](const nn::ProjectionSpec& spec) {
    return std::make_shared<WindowProjection>(spec);
  });
}

// [B, n, H * d] -> the heads [B, H, n, d] as LinformerAttention's split_heads views them.
Tensor strided_heads(const Tensor& buffer, std::int64_t heads) {
  return buffer.view({buffer.size(0), buffer.size(1), heads, -1}).transpose(1, 2);
}

// key_padding_mask [B, n]: sequence b has lengths[b] real positions, then padding.
Tensor padding_mask(const std::vector<std::int64_t>& lengths, std::int64_t n) {
  std::vector<bool> padded;
  for (std::int64_t len : lengths) {
    for (std::int64_t j = 0; j < n; ++j) padded.push_back(j >= len);
  }
  return from<bool>(padded, {static_cast<std::int64_t>(lengths.size()), n});
}

}  // namespace

TEST_CASE("a custom projection that views heads as windows: rows and empty rows") {
  register_windows();
  manual_seed(61);
  const std::int64_t heads = 2, d = 3, k = 3, window = 4;
  for (std::int64_t weight_heads : {1, 2}) {
    auto p = nn::make_projection("test_windows",
                                 {.k = k, .max_seq_len = 12, .head_dim = d, .heads = weight_heads});
    REQUIRE(p->type_name() == "WindowProjection");
    p->to(kFloat64);
    const auto a = std::dynamic_pointer_cast<WindowProjection>(p)->weight.to_vector<double>();
    for (std::int64_t n : {12, 9, 5}) {
      CAPTURE(weight_heads);
      CAPTURE(n);
      const Tensor x = strided_heads(randn64({2, n, heads * d}, false), heads);
      REQUIRE_FALSE(x.is_contiguous());
      const Tensor rows = p->forward(x);
      REQUIRE(rows.shape() == Shape{2, heads, k, d});
      // The rows by plain loops over the contiguous values.
      const auto xv = x.contiguous().to_vector<double>();
      std::vector<double> expected(2 * heads * k * d, 0.0);
      for (std::int64_t b = 0; b < 2; ++b) {
        for (std::int64_t h = 0; h < heads; ++h) {
          for (std::int64_t i = 0; i < k; ++i) {
            for (std::int64_t j = 0; j < window && i * window + j < n; ++j) {
              const double w = a[(weight_heads == 1 ? 0 : h) * window + j];
              for (std::int64_t c = 0; c < d; ++c) {
                expected[((b * heads + h) * k + i) * d + c] +=
                    w * xv[((b * heads + h) * n + i * window + j) * d + c];
              }
            }
          }
        }
      }
      CHECK(max_abs_diff(rows, from<double>(expected, rows.shape())) < 1e-12);
      // Without a mask, the windows that lie beyond n are empty: window 2 (positions 8 .. 11)
      // for n = 5, none for n = 9 and 12.
      const auto empty = p->project(x, {}).empty_rows.to_vector<bool>();
      const bool last_empty = n <= 8;
      CHECK(empty == std::vector<bool>{false, false, last_empty, false, false, last_empty});
    }
    // With padding: 12 and 4 real positions; the second sequence's windows 1 and 2 are empty.
    const Tensor x = strided_heads(randn64({2, 12, heads * d}, false), heads);
    const auto empty = p->project(x, padding_mask({12, 4}, 12)).empty_rows.to_vector<bool>();
    CHECK(empty == std::vector<bool>{false, false, false, false, true, true});
  }
  // Weights for two heads refuse three.
  auto per_head =
      nn::make_projection("test_windows", {.k = 2, .max_seq_len = 4, .head_dim = 1, .heads = 2});
  CHECK(per_head->forward(randn({1, 2, 4, 1})).shape() == Shape{1, 2, 2, 1});
  CHECK_THROWS_WITH_AS(per_head->forward(randn({1, 3, 4, 1})),
                       doctest::Contains("weights for 2 heads, the input has 3"), Error);
}

TEST_CASE("a custom projection that views heads as windows, in LinformerAttention with padding") {
  register_windows();
  const std::int64_t d_model = 8, heads = 2;
  // n = 12 = k * w: the windows are views of the strided heads; n = 10: zero rows added first.
  for (std::int64_t n : {12, 10}) {
    for (bool per_head : {false, true}) {
      CAPTURE(n);
      CAPTURE(per_head);
      manual_seed(67);
      const nn::ProjectionSpec spec{
          .k = 3, .max_seq_len = 12, .head_dim = d_model / heads, .heads = per_head ? heads : 1};
      auto layer = std::make_shared<nn::LinformerAttention>(
          d_model, heads, nn::make_projection("test_windows", spec),
          nn::make_projection("test_windows", spec));
      layer->to(kFloat64);
      layer->eval();
      const Tensor mask = padding_mask({n, 7}, n);

      // Forward: the padded sequence gives what the sequence cut to its 7 real positions gives
      // (window 2 is empty in both and excluded; window 1 covers positions 4 .. 6 in both).
      Tensor x = randn64({2, n, d_model});
      Tensor y = layer->forward(x, mask);
      Tensor cut = x.narrow(0, 1, 1).narrow(1, 0, 7).detach().clone();
      cut.requires_grad_();
      Tensor y_cut = layer->forward(cut);
      CHECK(max_abs_diff(y.narrow(0, 1, 1).narrow(1, 0, 7), y_cut) < 1e-12);

      // Backward: the same gradients for the real positions, none for the padded ones.
      const Tensor g = randn64({1, 7, d_model}, false);
      sum(y.narrow(0, 1, 1).narrow(1, 0, 7) * g).backward();
      sum(y_cut * g).backward();
      CHECK(max_abs_diff(x.grad().narrow(0, 1, 1).narrow(1, 0, 7), cut.grad()) < 1e-12);
      CHECK(max_abs_diff(x.grad().narrow(0, 1, 1).narrow(1, 7, n - 7),
                         zeros({1, n - 7, d_model}, {.dtype = kFloat64})) == 0.0);

      // Finite differences in float64, for the input and every parameter (the windows' weights
      // included), with padding.
      CHECK(gradcheck_module(*layer, randn64({2, n, d_model}),
                             [&](const Tensor& in) { return layer->forward(in, mask); }));
    }
  }
}

TEST_CASE("a custom projection that views heads as windows, by name in an encoder") {
  register_windows();
  for (auto sharing :
       {nn::Sharing::none, nn::Sharing::headwise, nn::Sharing::key_value, nn::Sharing::layerwise}) {
    const std::string sharing_name = nn::sharing_name(sharing);
    CAPTURE(sharing_name);
    manual_seed(71);
    nn::TransformerEncoder enc(
        {.layers = 2,
         .d_model = 8,
         .heads = 2,
         .d_ff = 16,
         .max_seq_len = 12,
         .dropout = 0.0,
         .attention = nn::AttentionKind::linformer,
         .linformer = {.k = 3, .projection_name = "test_windows", .sharing = sharing}});
    enc.to(kFloat64);
    for (std::size_t l = 0; l < 2; ++l) {
      auto attn = std::dynamic_pointer_cast<nn::LinformerAttention>(enc.layer(l)->attention);
      REQUIRE(attn != nullptr);
      auto key = std::dynamic_pointer_cast<WindowProjection>(attn->key_projection);
      REQUIRE(key != nullptr);
      CHECK(key->weight.size(0) == (sharing == nn::Sharing::none ? 2 : 1));
    }
    const Tensor mask = padding_mask({12, 5}, 12);
    Tensor x = randn64({2, 12, 8}, false), other = x.clone();
    {
      NoGradGuard no_grad;
      raw::copy(randn64({1, 7, 8}, false) * 10.0, other.narrow(0, 1, 1).narrow(1, 5, 7));
    }
    // Padded positions change nothing real.
    CHECK(max_abs_diff(enc.forward(x, mask).narrow(0, 1, 1).narrow(1, 0, 5),
                       enc.forward(other, mask).narrow(0, 1, 1).narrow(1, 0, 5)) < 1e-12);
  }
}
