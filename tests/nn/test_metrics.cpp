// nn::accuracy, and the projection kinds' two spellings (mean / mean_pool, max / max_pool).
#include <doctest/doctest.h>
#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <cmath>

using namespace tinyformer;

TEST_CASE("accuracy: the fraction of argmax predictions equal to the label") {
  // Predictions: 1, 0, 2, 2.
  Tensor logits = from<float>({0, 3, 1, 5, 1, 0, 0, 1, 2, 1, 1, 4}, {4, 3});
  Tensor labels = from<std::int64_t>({1, 0, 1, 2}, {4});
  CHECK(nn::accuracy(logits, labels) == doctest::Approx(0.75));
  // Ignored labels count neither way.
  Tensor some_ignored = from<std::int64_t>({1, -100, 1, -100}, {4});
  CHECK(nn::accuracy(logits, some_ignored) == doctest::Approx(0.5));
  CHECK(nn::accuracy(logits, from<std::int64_t>({1, 7, 1, 7}, {4}), /*ignore_index=*/7) ==
        doctest::Approx(0.5));
  CHECK(std::isnan(nn::accuracy(logits, full({4}, -100, {.dtype = kInt64}))));
  // [B, n, C] logits with [B, n] labels, as a masked LM gives them; float64 works too.
  Tensor lm = logits.to(kFloat64).view({2, 2, 3});
  CHECK(nn::accuracy(lm, labels.view({2, 2})) == doctest::Approx(0.75));

  CHECK_THROWS_WITH_AS(nn::accuracy(logits, from<std::int64_t>({1, 0, 1}, {3})),
                       "accuracy: logits [4, 3] need labels of shape [4], got [3]", Error);
  CHECK_THROWS_WITH_AS(nn::accuracy(logits, labels.to(kFloat32)),
                       doctest::Contains("accuracy: expected int64 labels"), Error);
  CHECK_THROWS_WITH_AS(nn::accuracy(labels, labels),
                       doctest::Contains("accuracy: expected floating logits"), Error);
}

TEST_CASE("projection kinds: each enumerator has its registered name; mean_pool means mean") {
  CHECK(std::string(nn::projection_name(nn::ProjectionKind::mean)) == "mean");
  CHECK(std::string(nn::projection_name(nn::ProjectionKind::max)) == "max");
  CHECK(nn::ProjectionKind::mean_pool == nn::ProjectionKind::mean);
  CHECK(nn::ProjectionKind::max_pool == nn::ProjectionKind::max);
  for (auto kind : {nn::ProjectionKind::linear, nn::ProjectionKind::mean, nn::ProjectionKind::max,
                    nn::ProjectionKind::conv, nn::ProjectionKind::identity}) {
    const auto names = nn::projection_names();
    CHECK(std::find(names.begin(), names.end(), nn::projection_name(kind)) != names.end());
  }
  CHECK(nn::canonical_projection_name("mean_pool") == "mean");
  CHECK(nn::canonical_projection_name("max_pool") == "max");
  CHECK(nn::canonical_projection_name("conv") == "conv");
  const nn::ProjectionSpec spec{.k = 2, .max_seq_len = 4, .head_dim = 2};
  CHECK(nn::make_projection("mean_pool", spec)->type_name() == "MeanPoolProjection");
  CHECK(nn::make_projection("max_pool", spec)->type_name() == "MaxPoolProjection");
  // A config may name either spelling; layerwise sharing sees one kind.
  nn::EncoderConfig c{.layers = 2,
                      .d_model = 4,
                      .heads = 2,
                      .d_ff = 4,
                      .max_seq_len = 4,
                      .attention = nn::AttentionKind::linformer,
                      .linformer = {.k = 2, .projection_name = "mean_pool"}};
  CHECK_NOTHROW(nn::validate(c));
  c.per_layer = {
      {.attention = nn::AttentionKind::linformer,
       .linformer = {.k = 2, .projection_name = "mean_pool", .sharing = nn::Sharing::layerwise}},
      {.attention = nn::AttentionKind::linformer,
       .linformer = {
           .k = 2, .projection = nn::ProjectionKind::mean, .sharing = nn::Sharing::layerwise}}};
  CHECK_NOTHROW(nn::validate(c));
  nn::TransformerEncoder enc(c);
  CHECK(enc.forward(randn({1, 4, 4})).shape() == Shape{1, 4, 4});
}
