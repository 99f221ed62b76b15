// Encoder stacks: sharing modes and their parameter counts, k per layer, gradient checks of
// every projection kind and sharing mode, models, spectra and memory growth.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::gradcheck_module;
using test::randn64;

namespace {
// Number of k x max_seq_len projection matrices among the encoder's (deduplicated) parameters.
std::int64_t projection_matrices(const nn::Module& m, std::int64_t k, std::int64_t n) {
  std::int64_t count = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    if (name.find("projection") != std::string::npos) count += p.numel() / (k * n);
  }
  return count;
}

nn::EncoderConfig tiny(nn::AttentionKind attention, nn::LinformerConfig lin = {}) {
  return {.layers = 2,
          .d_model = 4,
          .heads = 2,
          .d_ff = 6,
          .max_seq_len = 5,
          .dropout = 0.0,
          .attention = attention,
          .linformer = lin};
}
}  // namespace

TEST_CASE("sharing modes on 12 layers x 12 heads give 288, 24, 12 and 1 matrices") {
  const std::int64_t k = 4, n = 16;
  const std::pair<nn::Sharing, std::int64_t> expected[] = {{nn::Sharing::none, 288},
                                                           {nn::Sharing::headwise, 24},
                                                           {nn::Sharing::key_value, 12},
                                                           {nn::Sharing::layerwise, 1}};
  for (const auto& entry : expected) {
    const auto& sharing = std::get<0>(entry);
    const auto& count = std::get<1>(entry);
    CAPTURE(nn::sharing_name(sharing));
    nn::TransformerEncoder enc({.layers = 12,
                                .d_model = 24,
                                .heads = 12,
                                .d_ff = 8,
                                .max_seq_len = n,
                                .attention = nn::AttentionKind::linformer,
                                .linformer = {.k = k, .sharing = sharing}});
    CHECK(projection_matrices(enc, k, n) == count);
  }
}

TEST_CASE("layerwise sharing with unequal k per layer is rejected") {
  nn::EncoderConfig c = tiny(nn::AttentionKind::linformer,
                             {.k_per_layer = {3, 2}, .sharing = nn::Sharing::layerwise});
  CHECK_THROWS_WITH_AS(nn::TransformerEncoder{c}, doctest::Contains("same k"), Error);
  c.linformer.sharing = nn::Sharing::headwise;
  nn::TransformerEncoder ok(c);
  CHECK(std::dynamic_pointer_cast<nn::LinformerAttention>(ok.layer(1)->attention)
            ->key_projection->k() == 2);
}

TEST_CASE("k per layer: explicit lists and rules") {
  CHECK(nn::k_linear_decay(5, 128, 32, 48) == std::vector<std::int64_t>{128, 96, 64, 48, 48});
  CHECK(nn::k_geometric_decay(4, 128, 0.5, 20) == std::vector<std::int64_t>{128, 64, 32, 20});
  CHECK_THROWS_AS(nn::k_linear_decay(3, 10, 1, 20), Error);
  nn::TransformerEncoder enc({.layers = 3,
                              .d_model = 8,
                              .heads = 2,
                              .d_ff = 8,
                              .max_seq_len = 32,
                              .attention = nn::AttentionKind::linformer,
                              .linformer = {.k_per_layer = nn::k_linear_decay(3, 16, 4, 4)}});
  std::vector<std::int64_t> ks;
  for (const auto& a : enc.attention_layers()) {
    ks.push_back(std::dynamic_pointer_cast<nn::LinformerAttention>(a)->key_projection->k());
  }
  CHECK(ks == std::vector<std::int64_t>{16, 12, 8});
  CHECK(enc.forward(randn({2, 20, 8})).shape() == Shape{2, 20, 8});
  CHECK_THROWS_AS(nn::TransformerEncoder({.layers = 2,
                                          .max_seq_len = 8,
                                          .attention = nn::AttentionKind::linformer,
                                          .linformer = {.k = 9}}),
                  Error);
}

TEST_CASE("k per layer: a decay that overflows is an Error, a large one clamps to k_min") {
  constexpr std::int64_t big = std::int64_t{1} << 62;
  // Layer 2's decay 2 * 2^62 overflows: the schedule used to come out as 8, 1, 1 by accident.
  CHECK_THROWS_WITH_AS(nn::k_linear_decay(3, 8, big, 1),
                       "k_linear_decay: layer 2's decay 2 * 4611686018427387904 overflows a "
                       "64-bit integer (layers=3, k0=8, step=4611686018427387904, k_min=1); use "
                       "a step of at most k0",
                       Error);
  CHECK(nn::k_linear_decay(2, 8, big, 1) == std::vector<std::int64_t>{8, 1});
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  CHECK(nn::k_linear_decay(2, kMax, kMax, 1) == std::vector<std::int64_t>{kMax, 1});
  // k0 near 2^63 rounds up to 2^63 as a double, which no int64 holds: the first k stays k0.
  CHECK(nn::k_geometric_decay(2, kMax, 1.0, 1) == std::vector<std::int64_t>{kMax, kMax});
  CHECK(nn::k_geometric_decay(3, kMax, 0.5, 1)[1] == std::int64_t{1} << 62);
}
TEST_CASE("per-layer specs mix full and Linformer attention") {
  nn::EncoderConfig c = tiny(nn::AttentionKind::full);
  c.per_layer = {{.attention = nn::AttentionKind::full},
                 {.attention = nn::AttentionKind::linformer,
                  .linformer = {.k = 3, .projection = nn::ProjectionKind::mean}}};
  nn::TransformerEncoder enc(c);
  CHECK(std::dynamic_pointer_cast<nn::MultiHeadAttention>(enc.layer(0)->attention) != nullptr);
  CHECK(std::dynamic_pointer_cast<nn::LinformerAttention>(enc.layer(1)->attention) != nullptr);
}

TEST_CASE("gradient checks: full attention, pre- and post-norm") {
  for (bool pre_norm : {true, false}) {
    manual_seed(21);
    nn::EncoderConfig c = tiny(nn::AttentionKind::full);
    c.pre_norm = pre_norm;
    nn::TransformerEncoder enc(c);
    Tensor pad = from<bool>({false, false, false, true, false, false, false, false}, {2, 4});
    CHECK(gradcheck_module(enc, randn64({2, 4, 4}),
                           [&](const Tensor& x) { return enc.forward(x, pad); }));
  }
}

TEST_CASE("gradient checks: every projection kind and sharing mode") {
  for (auto kind : {nn::ProjectionKind::linear, nn::ProjectionKind::mean, nn::ProjectionKind::max,
                    nn::ProjectionKind::conv}) {
    for (auto sharing : {nn::Sharing::none, nn::Sharing::headwise, nn::Sharing::key_value,
                         nn::Sharing::layerwise}) {
      CAPTURE(nn::projection_name(kind));
      CAPTURE(nn::sharing_name(sharing));
      manual_seed(23);
      nn::TransformerEncoder enc(
          tiny(nn::AttentionKind::linformer, {.k = 2, .projection = kind, .sharing = sharing}));
      Tensor pad = from<bool>({false, false, false, false, true, false, false, false}, {2, 4});
      CHECK(gradcheck_module(enc, randn64({2, 4, 4}),
                             [&](const Tensor& x) { return enc.forward(x, pad); }));
    }
  }
}

TEST_CASE("MaskedLM and SequenceClassifier") {
  manual_seed(29);
  nn::EncoderConfig c = {.layers = 2,
                         .d_model = 8,
                         .heads = 2,
                         .d_ff = 16,
                         .max_seq_len = 12,
                         .attention = nn::AttentionKind::linformer,
                         .linformer = {.k = 4}};
  nn::MaskedLM mlm(c, 20);
  Tensor tokens = from<std::int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  CHECK(mlm.forward(tokens).shape() == Shape{2, 5, 20});
  // Tied: the output matrix is the token embedding, counted once.
  nn::MaskedLM untied(c, 20, /*tie_weights=*/false);
  CHECK(untied.num_parameters() - mlm.num_parameters() == 20 * 8);
  Tensor loss = cross_entropy(mlm.forward(tokens).view({-1, 20}), tokens.view({-1}));
  loss.backward();
  CHECK(mlm.body->token_embedding->weight.grad().defined());
  CHECK_THROWS_WITH_AS(mlm.forward(zeros({1, 13}, {.dtype = kInt64})),
                       doctest::Contains("max_seq_len"), Error);

  for (auto pooling : {nn::Pooling::cls, nn::Pooling::mean}) {
    nn::SequenceClassifier clf(c, 20, 3, pooling);
    Tensor pad =
        from<bool>({false, false, false, true, true, false, false, false, false, false}, {2, 5});
    Tensor logits = clf.forward(tokens, pad);
    CHECK(logits.shape() == Shape{2, 3});
    // Mean pooling ignores padded tokens.
    clf.eval();
    Tensor other = from<std::int64_t>({1, 2, 3, 17, 18, 6, 7, 8, 9, 10}, {2, 5});
    auto a = clf.forward(tokens, pad).to_vector<float>();
    auto b = clf.forward(other, pad).to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-6));
  }
}

TEST_CASE("attention spectrum: singular values and normalised cumulative sums") {
  // P = identity (n = 3): singular values 1, 1, 1 and cumulative 1/3, 2/3, 1.
  Tensor eye = from<float>({1, 0, 0, 0, 1, 0, 0, 0, 1}, {1, 1, 3, 3});
  auto s = nn::attention_spectrum(eye);
  REQUIRE(s.size() == 1);
  CHECK(s[0].singular_values[0] == doctest::Approx(1.0));
  CHECK(s[0].cumulative[0] == doctest::Approx(1.0 / 3));
  CHECK(s[0].cumulative[2] == doctest::Approx(1.0));
  // A rank-one P (every row the same) has all its mass in the first value.
  Tensor flat = full({1, 1, 4, 4}, 0.25);
  CHECK(nn::attention_spectrum(flat)[0].cumulative[0] == doctest::Approx(1.0));

  nn::TransformerEncoder enc(tiny(nn::AttentionKind::full));
  auto spectra = nn::encoder_spectrum(enc, randn({3, 5, 4}));
  REQUIRE(spectra.size() == 2);
  REQUIRE(spectra[0].size() == 2);
  const auto& c = spectra[1][1].cumulative;
  REQUIRE(c.size() == 5);
  for (std::size_t i = 1; i < c.size(); ++i) CHECK(c[i] >= c[i - 1] - 1e-12);
  CHECK(c.back() == doctest::Approx(1.0));
}

TEST_CASE("a user-registered projection kind plugs into the encoder") {
  // A fixed (not learned) random Gaussian projection, as in the paper's proof.
  struct FixedGaussian : nn::Projection {
    Tensor e;
    explicit FixedGaussian(const nn::ProjectionSpec& s) {
      e = register_buffer("e", randn({s.k, s.max_seq_len}) / std::sqrt(static_cast<double>(s.k)));
    }
    Tensor forward(const Tensor& x) const override {
      return matmul(e.narrow(1, 0, x.size(2)).to(x.dtype()), x);
    }
    std::int64_t k() const override { return e.size(0); }
  };
  nn::register_projection("fixed_gaussian", [](const nn::ProjectionSpec& s) {
    return std::make_shared<FixedGaussian>(s);
  });
  nn::TransformerEncoder enc(
      tiny(nn::AttentionKind::linformer, {.k = 3, .projection_name = "fixed_gaussian"}));
  CHECK(enc.forward(randn({2, 5, 4})).shape() == Shape{2, 5, 4});
  CHECK(projection_matrices(enc, 3, 5) == 0);  // nothing learned
}

TEST_CASE("validate: its work is what the config holds, not the number of layers it names") {
  // 10^15 layers: validating one layer stands for all of them unless they differ.
  const std::int64_t many = 1000000000000000;
  const auto start = std::chrono::steady_clock::now();
  nn::EncoderConfig c = tiny(nn::AttentionKind::full);
  c.layers = many;
  CHECK_NOTHROW(nn::validate(c));
  c = tiny(nn::AttentionKind::linformer, {.k = 3, .projection = nn::ProjectionKind::mean});
  c.layers = many;
  CHECK_NOTHROW(nn::validate(c));
  c.linformer.k = 6;
  CHECK_THROWS_WITH_AS(nn::validate(c),
                       "EncoderConfig: layer 0 has k=6, expected 0 < k <= max_seq_len (5)", Error);
  c.linformer.k_per_layer = {3, 2};
  CHECK_THROWS_WITH_AS(nn::validate(c),
                       "EncoderConfig: k_per_layer has 2 entries for 1000000000000000 layers",
                       Error);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 1.0);
  // A k per layer is still checked layer by layer.
  c = tiny(nn::AttentionKind::linformer, {.k = 3, .k_per_layer = {3, 9}});
  CHECK_THROWS_WITH_AS(nn::validate(c),
                       "EncoderConfig: layer 1 has k=9, expected 0 < k <= max_seq_len (5)", Error);
}

TEST_CASE("a projection factory that returns another k than asked is refused, naming the kind") {
  // An identity projection one row longer than asked: its attention would size its softmax and
  // padding masks by the wrong k.
  nn::register_projection("one_row_too_many", [](const nn::ProjectionSpec& s) {
    nn::ProjectionSpec longer = s;
    longer.k = s.k + 1;
    return std::make_shared<nn::IdentityProjection>(longer);
  });
  CHECK_THROWS_WITH_AS(
      nn::make_projection("one_row_too_many", {.k = 3, .max_seq_len = 5, .head_dim = 2}),
      "make_projection: the factory for \"one_row_too_many\" returned a "
      "projection of k=4, expected k=3",
      Error);
  CHECK_THROWS_WITH_AS(
      nn::TransformerEncoder(
          tiny(nn::AttentionKind::linformer, {.k = 3, .projection_name = "one_row_too_many"})),
      doctest::Contains("the factory for \"one_row_too_many\" returned a projection of k=4"),
      Error);
}

TEST_CASE(
    "activation memory: quadratic in n for materialized full attention, linear for the "
    "memory-efficient kernel and Linformer") {
  // One layer, forward + backward; the peak of live tensor bytes above the baseline.
  auto peak_for = [](nn::AttentionKind kind, AttentionKernel kernel, std::int64_t n) {
    manual_seed(31);
    nn::TransformerEncoder enc({.layers = 1,
                                .d_model = 16,
                                .heads = 4,
                                .d_ff = 32,
                                .max_seq_len = 1024,
                                .dropout = 0.0,
                                .attention = kind,
                                .linformer = {.k = 32, .sharing = nn::Sharing::layerwise}});
    CHECK(nn::set_attention_kernel(enc, kernel) == 1);
    Tensor x = randn({2, n, 16}, {.requires_grad = true});
    const auto base = memory_stats().current_bytes;
    reset_peak_memory();
    sum(enc.forward(x)).backward();
    return static_cast<double>(memory_stats().peak_bytes - base);
  };
  const auto growth = [&](nn::AttentionKind kind, AttentionKernel kernel) {
    return peak_for(kind, kernel, 1024) / peak_for(kind, kernel, 512);
  };
  const double materialized = growth(nn::AttentionKind::full, AttentionKernel::materialized);
  const double efficient = growth(nn::AttentionKind::full, AttentionKernel::memory_efficient);
  const double linformer = growth(nn::AttentionKind::linformer, AttentionKernel::memory_efficient);
  MESSAGE("peak memory growth from n=512 to 1024: full materialized ", materialized,
          "x, full memory-efficient ", efficient, "x, Linformer ", linformer, "x");
  CHECK(materialized > 3.0);
  CHECK(efficient < 2.3);
  CHECK(linformer < 2.3);
}

TEST_CASE("EncoderConfig takes dropouts in [0, 1]: 1 drops every residual branch in training") {
  // Dropout 1 on every residual branch and on the probabilities: in training each pre-norm block
  // adds exact zeros to its input, so the stack is its final layer norm (weight 1, bias 0 at
  // initialisation) of the input alone.
  nn::EncoderConfig c = tiny(nn::AttentionKind::full);
  c.dropout = 1.0;
  c.attention_dropout = 1.0;
  nn::TransformerEncoder enc(c);
  enc.to(DType::float64);
  const Tensor x = randn64({2, 5, 4});
  enc.train();
  const std::vector<double> got = enc.forward(x).to_vector<double>();
  const std::vector<double> want = layer_norm(x, {4}).to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  enc.eval();
  CHECK(enc.forward(x).to_vector<double>() != got);
  for (double bad : {1.5, -0.5, std::nan("")}) {
    CAPTURE(bad);
    nn::EncoderConfig b = tiny(nn::AttentionKind::full);
    b.dropout = bad;
    CHECK_THROWS_WITH_AS(nn::TransformerEncoder{b},
                         doctest::Contains("EncoderConfig: expected dropouts in [0, 1]"), Error);
    b.dropout = 0.0;
    b.attention_dropout = bad;
    CHECK_THROWS_WITH_AS(nn::TransformerEncoder{b},
                         doctest::Contains("EncoderConfig: expected dropouts in [0, 1]"), Error);
  }
}
