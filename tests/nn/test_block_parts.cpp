// Custom encoder block parts (nn/block.h): a gated feed-forward and an RMS norm registered by
// name inside a Linformer stack with shared projections and a k per layer, a custom attention
// given as a factory, a custom classifier head; gradients, padding and the name checks.
#include <doctest/doctest.h>
#include <tinyformer/tinyformer.h>
#include <algorithm>

#include <cmath>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::gradcheck_module;
using test::max_abs_diff;
using test::randn64;

namespace {

// out = W2 (silu(W1 x) * (W3 x)): SwiGLU.
class SwiGLU : public nn::FeedForwardModule {
 public:
  SwiGLU(std::int64_t d_model, std::int64_t d_hidden) {
    w1 = register_module("w1", std::make_shared<nn::Linear>(d_model, d_hidden));
    w3 = register_module("w3", std::make_shared<nn::Linear>(d_model, d_hidden));
    w2 = register_module("w2", std::make_shared<nn::Linear>(d_hidden, d_model));
  }
  Tensor forward(const Tensor& x) const override {
    return w2->forward(silu(w1->forward(x)) * w3->forward(x));
  }
  std::string type_name() const override { return "SwiGLU"; }
  std::shared_ptr<nn::Linear> w1, w3, w2;
};

// x / sqrt(mean(x^2) + eps) * weight over the last dim. The weight starts away from 1 so that
// a gradient check sees it.
class RMSNorm : public nn::NormModule {
 public:
  explicit RMSNorm(std::int64_t d) { weight = register_parameter("weight", 0.5 + rand({d})); }
  Tensor forward(const Tensor& x) const override {
    return x * rsqrt(mean(x * x, {x.dim() - 1}, /*keepdim=*/true) + 1e-6) * weight;
  }
  std::string type_name() const override { return "RMSNorm"; }
  Tensor weight;
};

void register_test_parts() {
  nn::register_feed_forward("test_swiglu", [](const nn::BlockPartSpec& s) {
    return std::make_shared<SwiGLU>(s.config.d_model, s.config.d_ff);
  });
  nn::register_norm("test_rms_norm", [](const nn::BlockPartSpec& s) {
    return std::make_shared<RMSNorm>(s.config.d_model);
  });
}

// Linformer, key-value sharing (E = F in each layer) and a k per layer.
nn::EncoderConfig custom_config(bool custom = true) {
  register_test_parts();
  return {.layers = 2,
          .d_model = 4,
          .heads = 2,
          .d_ff = 6,
          .max_seq_len = 5,
          .dropout = 0.0,
          .feed_forward = custom ? "test_swiglu" : "standard",
          .norm = custom ? "test_rms_norm" : "layer_norm",
          .attention = nn::AttentionKind::linformer,
          .linformer = {.k_per_layer = {3, 2}, .sharing = nn::Sharing::key_value}};
}

}  // namespace

TEST_CASE("custom feed-forward and norm by name: the parts are used, the stack keeps the rest") {
  manual_seed(41);
  nn::TransformerEncoder enc(custom_config());
  for (std::size_t l = 0; l < 2; ++l) {
    auto layer = enc.layer(l);
    CHECK(std::dynamic_pointer_cast<SwiGLU>(layer->feed_forward) != nullptr);
    CHECK(std::dynamic_pointer_cast<RMSNorm>(layer->norm1) != nullptr);
    CHECK(std::dynamic_pointer_cast<RMSNorm>(layer->norm2) != nullptr);
    CHECK(layer->norm1 != layer->norm2);
    // The stack still builds the Linformer attention with this layer's k, E = F.
    auto attn = std::dynamic_pointer_cast<nn::LinformerAttention>(layer->attention);
    REQUIRE(attn != nullptr);
    CHECK(attn->key_projection == attn->value_projection);
    CHECK(attn->key_projection->k() == (l == 0 ? 3 : 2));
  }
  CHECK(std::dynamic_pointer_cast<RMSNorm>(enc.final_norm) != nullptr);

  // The custom parameters are the model's: named, counted, and nothing of FeedForward remains.
  auto named = enc.named_parameters();
  auto has = [&](const std::string& name) {
    for (const auto& [n, p] : named)
      if (n == name) return true;
    return false;
  };
  CHECK(has("layers.0.feed_forward.w1.weight"));
  CHECK(has("layers.1.feed_forward.w3.bias"));
  CHECK(has("layers.1.norm2.weight"));
  CHECK(has("final_norm.weight"));
  CHECK_FALSE(has("layers.0.feed_forward.fc1.weight"));
  CHECK_FALSE(has("layers.0.norm1.bias"));  // RMSNorm has no bias
  CHECK(has("layers.0.attention.key_projection.weight"));
  CHECK(has("layers.1.attention.key_projection.weight"));

  // Outputs differ from the standard block's, and follow the custom part's parameters.
  Tensor x = randn({2, 5, 4});
  manual_seed(41);
  nn::TransformerEncoder standard(custom_config(false));
  Tensor y = enc.forward(x);
  CHECK(max_abs_diff(y, standard.forward(x)) > 1e-3);
  {
    NoGradGuard no_grad;
    auto ff = std::dynamic_pointer_cast<SwiGLU>(enc.layer(1)->feed_forward);
    raw::copy(ff->w2->weight * 2.0, ff->w2->weight);
  }
  CHECK(max_abs_diff(y, enc.forward(x)) > 1e-4);
}

TEST_CASE("custom block parts: gradient checks in float64 with padding") {
  for (auto sharing : {nn::Sharing::key_value, nn::Sharing::none, nn::Sharing::layerwise}) {
    for (bool pre_norm : {true, false}) {
      const std::string sharing_name = nn::sharing_name(sharing);
      CAPTURE(sharing_name);
      CAPTURE(pre_norm);
      manual_seed(43);
      nn::EncoderConfig c = custom_config();
      c.pre_norm = pre_norm;
      c.linformer.sharing = sharing;
      if (sharing == nn::Sharing::layerwise) c.linformer = {.k = 2, .sharing = sharing};
      // A random E: with the pooling start a row can have weights exactly 0 on every real
      // position, and whether it is excluded then changes with any perturbation of those
      // weights, which finite differences cannot follow.
      c.linformer.projection_init = nn::ProjectionInit::normal;
      nn::TransformerEncoder enc(c);
      Tensor pad = from<bool>({false, false, false, true, false, false, false, false}, {2, 4});
      CHECK(gradcheck_module(enc, randn64({2, 4, 4}),
                             [&](const Tensor& x) { return enc.forward(x, pad); }));
    }
  }
}

TEST_CASE("custom block parts: padded positions do not change real outputs") {
  for (auto kind : {nn::ProjectionKind::linear, nn::ProjectionKind::mean}) {
    const std::string kind_name = nn::projection_name(kind);
    CAPTURE(kind_name);
    manual_seed(47);
    nn::EncoderConfig c = custom_config();
    c.linformer.projection = kind;
    nn::TransformerEncoder enc(c);
    enc.to(kFloat64);
    Tensor pad =
        from<bool>({false, false, false, true, true, false, false, false, false, true}, {2, 5});
    Tensor x = randn64({2, 5, 4}, false);
    Tensor other = x.clone();
    {
      NoGradGuard no_grad;
      raw::copy(randn64({1, 2, 4}, false) * 10.0, other.select(0, 0).narrow(0, 3, 2).unsqueeze(0));
      raw::copy(randn64({1, 1, 4}, false) * 10.0, other.select(0, 1).narrow(0, 4, 1).unsqueeze(0));
    }
    Tensor a = enc.forward(x, pad), b = enc.forward(other, pad);
    CHECK(max_abs_diff(a.select(0, 0).narrow(0, 0, 3), b.select(0, 0).narrow(0, 0, 3)) < 1e-12);
    CHECK(max_abs_diff(a.select(0, 1).narrow(0, 0, 4), b.select(0, 1).narrow(0, 0, 4)) < 1e-12);
    // The change did reach the padded positions' own outputs, so the input was really changed.
    CHECK(max_abs_diff(a.select(0, 0).narrow(0, 3, 2), b.select(0, 0).narrow(0, 3, 2)) > 1e-6);
  }
}

TEST_CASE("block part names: validate lists the registered ones; per-layer attention modules") {
  register_test_parts();
  nn::EncoderConfig c = custom_config();
  c.feed_forward = "no_such_ff";
  CHECK_THROWS_WITH_AS(nn::validate(c),
                       doctest::Contains("feed_forward \"no_such_ff\" is not registered"), Error);
  CHECK_THROWS_WITH_AS(nn::TransformerEncoder{c}, doctest::Contains("test_swiglu"), Error);
  CHECK_THROWS_WITH_AS(nn::TransformerEncoder{c}, doctest::Contains("standard"), Error);
  c = custom_config();
  c.norm = "rms";
  CHECK_THROWS_WITH_AS(nn::validate(c), doctest::Contains("norm \"rms\" is not registered"), Error);
  CHECK_THROWS_WITH_AS(nn::validate(c), doctest::Contains("(registered: layer_norm, "), Error);
  CHECK_THROWS_WITH_AS(nn::validate(c), doctest::Contains("test_rms_norm"), Error);
  c = custom_config();
  c.per_layer = {{.attention = nn::AttentionKind::full},
                 {.attention = nn::AttentionKind::full, .attention_module = "nope"}};
  CHECK_THROWS_WITH_AS(nn::validate(c),
                       doctest::Contains("layer 1's attention_module \"nope\" is not registered"),
                       Error);
  c = custom_config();
  c.linformer.projection_name = "gaussian";
  CHECK_THROWS_WITH_AS(nn::validate(c), doctest::Contains("projection_name \"gaussian\""), Error);
  CHECK_THROWS_WITH_AS(nn::make_feed_forward("nope", {custom_config(), 0}),
                       doctest::Contains("registered: standard"), Error);

  // The registries are the process's: other tests may have added names of their own.
  const auto has_name = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const std::vector<std::string> feed_forwards = nn::feed_forward_names();
  CHECK(std::is_sorted(feed_forwards.begin(), feed_forwards.end()));
  CHECK(has_name(feed_forwards, "standard"));
  CHECK(has_name(feed_forwards, "test_swiglu"));
  CHECK_FALSE(has_name(feed_forwards, "no_such_ff"));
  CHECK(has_name(nn::attention_names(), "standard"));

  // A registered attention module for one layer; the other keeps the config's.
  nn::register_attention("test_full_only", [](const nn::AttentionSpec& s) {
    return std::make_shared<nn::MultiHeadAttention>(s.config.d_model, s.config.heads);
  });
  c = custom_config();
  c.per_layer = {{.attention = nn::AttentionKind::linformer, .linformer = {.k = 2}},
                 {.attention = nn::AttentionKind::linformer,
                  .linformer = {.k = 2},
                  .attention_module = "test_full_only"}};
  nn::TransformerEncoder enc(c);
  CHECK(std::dynamic_pointer_cast<nn::LinformerAttention>(enc.layer(0)->attention) != nullptr);
  CHECK(std::dynamic_pointer_cast<nn::MultiHeadAttention>(enc.layer(1)->attention) != nullptr);
}

TEST_CASE("factories given directly: a custom attention receives the shared projections") {
  manual_seed(53);
  nn::EncoderConfig c = custom_config();
  c.linformer = {.k = 2, .sharing = nn::Sharing::layerwise};
  std::vector<std::shared_ptr<nn::Projection>> seen;
  std::vector<std::int64_t> layers;
  nn::BlockFactories factories{.attention = [&](const nn::AttentionSpec& s) {
    seen.push_back(s.key_projection);
    layers.push_back(s.layer);
    CHECK(s.key_projection == s.value_projection);
    return std::make_shared<nn::LinformerAttention>(s.config.d_model, s.config.heads,
                                                    s.key_projection, s.value_projection);
  }};
  factories.norm = [](const nn::BlockPartSpec& s) {
    return std::make_shared<nn::LayerNorm>(s.config.d_model, 1e-3);
  };
  nn::TransformerEncoder enc(c, factories);
  REQUIRE(seen.size() == 2);
  CHECK(layers == std::vector<std::int64_t>{0, 1});
  CHECK(seen[0] != nullptr);
  CHECK(seen[0] == seen[1]);  // layerwise: one E for the whole stack
  CHECK(std::dynamic_pointer_cast<SwiGLU>(enc.layer(0)->feed_forward) != nullptr);  // by name
  CHECK(std::dynamic_pointer_cast<nn::LayerNorm>(enc.layer(0)->norm1) != nullptr);  // factory
  CHECK(enc.forward(randn({1, 5, 4})).shape() == Shape{1, 5, 4});
}

namespace {
// Max over real positions, then Linear.
class MaxPoolHead : public nn::ClassifierHead {
 public:
  MaxPoolHead(std::int64_t d, std::int64_t classes) {
    linear = register_module("linear", std::make_shared<nn::Linear>(d, classes));
  }
  Tensor forward(const Tensor& h, const Tensor& key_padding_mask) override {
    Tensor masked =
        key_padding_mask.defined() ? masked_fill(h, key_padding_mask.unsqueeze(2), -1e9) : h;
    return linear->forward(max(masked, 1).first);
  }
  std::shared_ptr<nn::Linear> linear;
};
}  // namespace

TEST_CASE("SequenceClassifier with a custom head") {
  manual_seed(59);
  nn::SequenceClassifier clf(custom_config(), 20, std::make_shared<MaxPoolHead>(4, 3));
  CHECK(clf.classifier == nullptr);
  bool found = false;
  for (const auto& [name, p] : clf.named_parameters()) found |= name == "head.linear.weight";
  CHECK(found);
  clf.eval();
  Tensor tokens = from<std::int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  Tensor other = from<std::int64_t>({1, 2, 3, 17, 18, 6, 7, 8, 9, 11}, {2, 5});
  Tensor pad =
      from<bool>({false, false, false, true, true, false, false, false, false, true}, {2, 5});
  Tensor a = clf.forward(tokens, pad);
  CHECK(a.shape() == Shape{2, 3});
  CHECK(max_abs_diff(a, clf.forward(other, pad)) < 1e-5);
  CHECK(max_abs_diff(a, clf.forward(other)) > 1e-5);
  // The built-in pooling's masked mean, for heads that want it.
  Tensor h = from<float>({1, 2, 3, 4, 100, 100}, {1, 3, 2});
  Tensor m = nn::masked_mean(h, from<bool>({false, false, true}, {1, 3}));
  CHECK(m.to_vector<float>() == std::vector<float>{2, 3});
  CHECK_THROWS_WITH_AS(nn::masked_mean(h, from<bool>({false, true}, {1, 2})),
                       doctest::Contains("masked_mean: expected a bool key_padding_mask [1, 3]"),
                       Error);
  CHECK_THROWS_AS(nn::SequenceClassifier(custom_config(), 20, nullptr), Error);
}
