// model_shapes (nn/model_shapes.h): the state dict a description implies equals, name for name
// and shape for shape, the state dict of the model make_model builds, for every model kind,
// position encoding, attention and projection kind and sharing mode; parts of one's own are
// listed as such.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;

namespace {

nn::ModelDescription small(nn::AttentionKind attention, nn::LinformerConfig linformer = {}) {
  return {.kind = nn::ModelKind::masked_lm,
          .encoder = {.layers = 3,
                      .d_model = 6,
                      .heads = 3,
                      .d_ff = 10,
                      .max_seq_len = 9,
                      .dropout = 0.0,
                      .attention = attention,
                      .linformer = linformer},
          .vocabulary = {.size = 11, .tokenizer = ""}};
}

// Every description the test holds model_shapes to.
std::vector<std::pair<std::string, nn::ModelDescription>> descriptions() {
  using nn::AttentionKind;
  using nn::ProjectionKind;
  using nn::Sharing;
  std::vector<std::pair<std::string, nn::ModelDescription>> all;
  all.emplace_back("MaskedLM, full attention", small(AttentionKind::full));
  {
    nn::ModelDescription d = small(AttentionKind::full);
    d.tie_weights = false;
    d.positions = nn::PositionEncoding::sinusoidal;
    d.encoder.pre_norm = false;
    all.emplace_back("MaskedLM, untied, sinusoidal, post-norm", d);
  }
  {
    nn::ModelDescription d = small(AttentionKind::full);
    d.kind = nn::ModelKind::sequence_classifier;
    d.classes = 4;
    d.pooling = nn::Pooling::cls;
    all.emplace_back("SequenceClassifier", d);
  }
  {
    nn::ModelDescription d = small(AttentionKind::full);
    d.kind = nn::ModelKind::causal_lm;
    all.emplace_back("CausalLM (its parts outside a body)", d);
  }
  for (ProjectionKind kind : {ProjectionKind::linear, ProjectionKind::mean, ProjectionKind::max,
                              ProjectionKind::conv, ProjectionKind::identity}) {
    for (Sharing sharing :
         {Sharing::none, Sharing::headwise, Sharing::key_value, Sharing::layerwise}) {
      const std::int64_t k = kind == ProjectionKind::identity ? 9 : 4;
      all.emplace_back(
          std::string("Linformer, ") + nn::projection_name(kind) + ", " + nn::sharing_name(sharing),
          small(AttentionKind::linformer, {.k = k, .projection = kind, .sharing = sharing}));
    }
  }
  all.emplace_back("Linformer, a k per layer",
                   small(AttentionKind::linformer, {.k = 4,
                                                    .k_per_layer = {5, 4, 2},
                                                    .projection = ProjectionKind::conv,
                                                    .sharing = Sharing::headwise}));
  {
    // Layerwise sharing begins at layer 1: its projection is listed there.
    nn::ModelDescription d = small(AttentionKind::full);
    d.encoder.per_layer = {
        {.attention = AttentionKind::full},
        {.attention = AttentionKind::linformer,
         .linformer = {.k = 3, .projection_name = "linear", .sharing = Sharing::layerwise}},
        {.attention = AttentionKind::linformer,
         .linformer = {.k = 3, .projection_name = "linear", .sharing = Sharing::layerwise}}};
    all.emplace_back("per layer, layerwise from layer 1", d);
  }
  return all;
}

struct Entry {
  std::string name;
  Shape shape;
  bool operator==(const Entry&) const = default;
};

std::vector<Entry> built(const nn::ModelDescription& d) {
  std::vector<Entry> out;
  for (const auto& [name, t] : nn::make_model(d)->state_dict()) out.push_back({name, t.shape()});
  return out;
}

std::vector<Entry> implied(const nn::ModelShapes& shapes) {
  std::vector<Entry> out;
  for (const auto& e : shapes.tensors) out.push_back({e.name, e.shape});
  return out;
}

}  // namespace

TEST_CASE("model_shapes: the state dict make_model's model holds, in its order") {
  for (const auto& entry : descriptions()) {
    // A structured binding cannot be captured by CAPTURE's lambda under clang 14.
    const std::string& what = entry.first;
    const nn::ModelDescription& d = entry.second;
    CAPTURE(what);
    const nn::ModelShapes shapes = nn::model_shapes(d);
    CHECK(shapes.own_parts.empty());
    const std::vector<Entry> expected = built(d), got = implied(shapes);
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].name == expected[i].name);
      CHECK(got[i].shape == expected[i].shape);
    }
    for (const auto& e : shapes.tensors) CHECK_FALSE(e.from.empty());
  }
}

TEST_CASE("model_shapes: the fields each shape comes from") {
  const nn::ModelShapes shapes =
      nn::model_shapes(small(nn::AttentionKind::linformer,
                             {.k = 4, .k_per_layer = {5, 4, 2}, .sharing = nn::Sharing::none}));
  auto from = [&](const std::string& name) {
    for (const auto& e : shapes.tensors) {
      if (e.name == name) return e.from;
    }
    return std::string("(none)");
  };
  CHECK(from("decoder_bias") == "vocabulary.size");
  CHECK(from("body.encoder.layers.0.feed_forward.fc1.weight") == "encoder.d_ff, encoder.d_model");
  CHECK(from("body.encoder.layers.2.attention.key_projection.weight") ==
        "encoder.linformer.k_per_layer[2], encoder.max_seq_len, encoder.heads");
}

TEST_CASE("model_shapes: parts of one's own are listed by where they sit, not guessed") {
  nn::register_feed_forward("shapes_test_feed_forward", [](const nn::BlockPartSpec& s) {
    return nn::make_feed_forward("standard", s);
  });
  nn::register_norm("shapes_test_norm",
                    [](const nn::BlockPartSpec& s) { return nn::make_norm("layer_norm", s); });
  nn::register_attention("shapes_test_attention", [](const nn::AttentionSpec& s) {
    return nn::make_attention("standard", s);
  });
  nn::register_projection("shapes_test_projection", [](const nn::ProjectionSpec& s) {
    return nn::make_projection("linear", s);
  });
  CHECK_FALSE(nn::is_builtin_feed_forward("shapes_test_feed_forward"));
  CHECK(nn::is_builtin_feed_forward("standard"));
  CHECK(nn::is_builtin_projection("mean_pool"));
  CHECK_FALSE(nn::is_builtin_projection("shapes_test_projection"));

  nn::ModelDescription d = small(
      nn::AttentionKind::linformer,
      {.k = 4, .projection_name = "shapes_test_projection", .sharing = nn::Sharing::layerwise});
  d.encoder.feed_forward = "shapes_test_feed_forward";
  d.encoder.norm = "shapes_test_norm";
  // Layer 0's own attention takes the layerwise projection: whether it registers it is its
  // own affair, so the later layers' projections are listed as own too.
  d.encoder.per_layer = {
      {.attention = nn::AttentionKind::linformer,
       .linformer = d.encoder.linformer,
       .attention_module = "shapes_test_attention"},
      {.attention = nn::AttentionKind::linformer, .linformer = d.encoder.linformer},
      {.attention = nn::AttentionKind::full}};
  const nn::ModelShapes shapes = nn::model_shapes(d);
  const std::vector<std::string> own = shapes.own_parts;
  auto listed = [&](const std::string& prefix) {
    return std::find(own.begin(), own.end(), prefix) != own.end();
  };
  CHECK(listed("body.encoder.layers.0.attention."));
  CHECK(listed("body.encoder.layers.1.attention.key_projection."));
  CHECK(listed("body.encoder.layers.2.feed_forward."));
  CHECK(listed("body.encoder.layers.2.norm2."));
  CHECK(listed("body.encoder.final_norm."));
  // Every entry of the built model is implied or under a part of one's own, and every implied
  // entry is built with its shape.
  const std::vector<Entry> actual = built(d);
  for (const auto& e : actual) {
    CAPTURE(e.name);
    const bool own_entry = std::any_of(own.begin(), own.end(), [&](const std::string& prefix) {
      return e.name.starts_with(prefix);
    });
    const auto it = std::find_if(shapes.tensors.begin(), shapes.tensors.end(),
                                 [&](const auto& x) { return x.name == e.name; });
    CHECK(own_entry != (it != shapes.tensors.end()));
    if (it != shapes.tensors.end()) CHECK(it->shape == e.shape);
  }
  for (const auto& e : shapes.tensors) {
    CHECK(std::any_of(actual.begin(), actual.end(),
                      [&](const Entry& x) { return x.name == e.name; }));
  }
}

TEST_CASE("model_shapes: an invalid description is an Error, as for make_model") {
  nn::ModelDescription d = small(nn::AttentionKind::full);
  d.encoder.heads = 4;
  CHECK_THROWS_WITH_AS(nn::model_shapes(d), doctest::Contains("divisible by heads"), Error);
  d = small(nn::AttentionKind::full);
  d.vocabulary.size = 0;
  CHECK_THROWS_WITH_AS(nn::model_shapes(d),
                       "model_shapes: expected a positive vocabulary size, got 0", Error);
}
