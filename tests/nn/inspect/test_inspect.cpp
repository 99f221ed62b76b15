// Attention maps and spectra of whole models (nn/inspect/): shapes for full and Linformer
// attention, the spectra of attention with a known rank, padding, modes, and the figures.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/random.h"
#include "nn/inspect/attention_maps.h"
#include "nn/inspect/plot.h"
#include "nn/inspect/spectrum.h"
#include "nn/models.h"

using namespace tinyformer;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kVocab = 20;

nn::EncoderConfig small(nn::AttentionKind attention, std::int64_t k = 4, double dropout = 0.0) {
  return {.layers = 2,
          .d_model = 8,
          .heads = 2,
          .d_ff = 16,
          .max_seq_len = 12,
          .dropout = dropout,
          .attention_dropout = dropout,
          .attention = attention,
          .linformer = {.k = k}};
}

Tensor tokens(std::int64_t batch, std::int64_t n) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < batch * n; ++i) ids.push_back((i * 7 + 3) % kVocab);
  return from<std::int64_t>(ids, {batch, n});
}

// Queries all zero: every score is 0, so every head of every layer attends uniformly.
void zero_queries(nn::TransformerEncoder& encoder) {
  NoGradGuard no_grad;
  for (const auto& a : encoder.attention_layers()) {
    raw::copy(zeros_like(a->q_proj->weight), a->q_proj->weight);
    raw::copy(zeros_like(a->q_proj->bias), a->q_proj->bias);
  }
}

// P = a permutation of the identity per head: full rank, every singular value 1.
Tensor shifted_identity(std::int64_t n, std::int64_t shift) {
  std::vector<float> p(static_cast<std::size_t>(n * n), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i * n + (i + shift) % n)] = 1;
  return from<float>(p, {1, 1, n, n});
}

}  // namespace

TEST_CASE("attention_spectrum: uniform attention is rank 1, a permutation has a flat spectrum") {
  // Uniform rows, square and n x k: one singular value holds all the mass.
  for (const auto& [n, m] : {std::pair<std::int64_t, std::int64_t>{6, 6}, {6, 3}}) {
    const auto s = nn::attention_spectrum(full({2, 3, n, m}, 1.0 / static_cast<double>(m)));
    REQUIRE(s.size() == 3);
    for (const auto& head : s) {
      REQUIRE(head.cumulative.size() == static_cast<std::size_t>(std::min(n, m)));
      CHECK(head.cumulative[0] == doctest::Approx(1.0));
      // The one value is sqrt(n / m): P = (1/m) 1_n 1_m^T.
      CHECK(head.singular_values[0] ==
            doctest::Approx(std::sqrt(static_cast<double>(n) / static_cast<double>(m))));
    }
  }
  // Every query on a different key: n values of 1, cumulative (i + 1) / n, the flattest there is.
  const auto flat = nn::attention_spectrum(shifted_identity(8, 3))[0];
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(flat.singular_values[i] == doctest::Approx(1.0));
    CHECK(flat.cumulative[i] == doctest::Approx(static_cast<double>(i + 1) / 8));
  }
  CHECK(nn::mass_in_first(flat, 2) == doctest::Approx(0.25));
  CHECK(nn::mass_in_first(flat, 100) == doctest::Approx(1.0));
  CHECK_THROWS_AS(nn::mass_in_first(flat, 0), Error);
}

TEST_CASE("attention_spectrum: padded query rows are left out") {
  // A permutation on 3 real tokens plus a padded fourth whose query row attends to key 0.
  // Without the mask the padded row would add mass; with it the spectrum is the 3 x 3 one's
  // followed by a zero.
  Tensor p = from<float>({0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0}, {1, 1, 4, 4});
  Tensor padding = from<bool>({false, false, false, true}, {1, 4});
  const auto masked = nn::attention_spectrum(p, padding)[0];
  const std::vector<double> expected = {1.0 / 3, 2.0 / 3, 1.0, 1.0};
  for (std::size_t i = 0; i < 4; ++i) CHECK(masked.cumulative[i] == doctest::Approx(expected[i]));
  CHECK(masked.singular_values[3] == doctest::Approx(0.0).epsilon(1e-12));
  const auto unmasked = nn::attention_spectrum(p)[0];
  // Without the mask the padded row doubles key 0's column: values sqrt(2), 1, 1, 0.
  CHECK(unmasked.cumulative[0] == doctest::Approx(std::sqrt(2.0) / (2 + std::sqrt(2.0))));
  CHECK_THROWS_WITH_AS(nn::attention_spectrum(p, from<bool>({false, true}, {1, 2})),
                       doctest::Contains("key_padding_mask"), Error);
}

TEST_CASE("attention_maps: n x n maps for full attention, n x k for Linformer") {
  for (const auto attention : {nn::AttentionKind::full, nn::AttentionKind::linformer}) {
    CAPTURE(static_cast<int>(attention));
    manual_seed(3);
    nn::MaskedLM model(small(attention, /*k=*/4), kVocab);
    const Tensor t = tokens(3, 10);
    const std::vector<Tensor> maps = nn::attention_maps(model, t);
    REQUIRE(maps.size() == 2);
    const std::int64_t m = attention == nn::AttentionKind::full ? 10 : 4;
    for (const Tensor& p : maps) {
      CHECK(p.shape() == Shape({3, 2, 10, m}));
      // Every row is a distribution over the keys (or the k compressed rows).
      const Tensor row_sums = sum(p, {-1});
      for (float v : row_sums.to_vector<float>()) CHECK(v == doctest::Approx(1.0).epsilon(1e-5));
    }
    // The spectrum overloads read the same maps: min(n, m) values per head, ending at 1.
    const auto spectra = nn::encoder_spectrum(model, t);
    REQUIRE(spectra.size() == 2);
    for (std::size_t l = 0; l < 2; ++l) {
      const auto direct = nn::attention_spectrum(maps[l]);
      REQUIRE(spectra[l].size() == 2);
      for (std::size_t h = 0; h < 2; ++h) {
        const auto& c = spectra[l][h].cumulative;
        REQUIRE(c.size() == static_cast<std::size_t>(m));
        for (std::size_t i = 1; i < c.size(); ++i) CHECK(c[i] >= c[i - 1] - 1e-12);
        CHECK(c.back() == doctest::Approx(1.0));
        for (std::size_t i = 0; i < c.size(); ++i) {
          CHECK(c[i] == doctest::Approx(direct[h].cumulative[i]));
        }
      }
    }
    const auto body = nn::encoder_spectrum(*model.body, t);
    CHECK(body[1][1].singular_values == spectra[1][1].singular_values);
    manual_seed(3);
    nn::SequenceClassifier classifier(small(attention, /*k=*/4), kVocab, /*classes=*/3);
    const std::vector<Tensor> classifier_maps = nn::attention_maps(classifier, t);
    REQUIRE(classifier_maps.size() == 2);
    CHECK(classifier_maps[0].shape() == Shape({3, 2, 10, m}));
    // Attention is kept only for the inspection's own forward pass: a later one keeps nothing.
    model.forward(t);
    for (const auto& a : model.body->encoder->attention_layers()) {
      CHECK_FALSE(a->last_attention().defined());
    }
  }
}

TEST_CASE("encoder_spectrum on a model whose attention is uniform: all mass in one value") {
  for (const auto attention : {nn::AttentionKind::full, nn::AttentionKind::linformer}) {
    CAPTURE(static_cast<int>(attention));
    manual_seed(5);
    nn::MaskedLM model(small(attention, /*k=*/4), kVocab);
    zero_queries(*model.body->encoder);
    const auto spectra = nn::encoder_spectrum(model, tokens(2, 12));
    for (const auto& layer : spectra) {
      for (const auto& head : layer) CHECK(head.cumulative[0] == doctest::Approx(1.0));
    }
    // The model's own queries give attention of higher rank.
    manual_seed(5);
    nn::MaskedLM trained_like(small(attention, 4), kVocab);
    CHECK(nn::encoder_spectrum(trained_like, tokens(2, 12))[0][0].cumulative[0] < 0.999);
  }
}

TEST_CASE("attention_maps run in evaluation mode and leave the model's mode as it was") {
  manual_seed(9);
  nn::MaskedLM model(small(nn::AttentionKind::full, 4, /*dropout=*/0.5), kVocab);
  const Tensor t = tokens(2, 8);
  model.train();
  const std::vector<float> first = nn::attention_maps(model, t)[1].to_vector<float>();
  CHECK(model.is_training());
  CHECK(model.body->encoder->is_training());
  // With dropout active the two passes would differ; in evaluation mode they agree.
  const std::vector<float> second = nn::attention_maps(model, t)[1].to_vector<float>();
  CHECK(first == second);
  model.eval();
  CHECK(nn::attention_maps(model, t)[1].to_vector<float>() == first);
  CHECK_FALSE(model.is_training());
}

TEST_CASE("plot_attention and plot_spectra: bad input is an Error, good input a PNG") {
  const fs::path dir =
      fs::temp_directory_path() / ("tinyformer_inspect_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  CHECK_THROWS_WITH_AS(nn::plot_attention((dir / "a.png").string(), full({2, 3, 3, 3}, 0.5), "t"),
                       doctest::Contains("[H, n, m]"), Error);
  // Token labels: one per row and one per column, or none.
  CHECK_THROWS_WITH_AS(nn::plot_attention((dir / "a.png").string(), full({2, 5, 3}, 1.0 / 3), "t",
                                          "key", {"a", "b"}),
                       doctest::Contains("expected 5 query labels"), Error);
  CHECK_THROWS_WITH_AS(nn::plot_attention((dir / "a.png").string(), full({2, 5, 3}, 1.0 / 3), "t",
                                          "key", {}, {"a", "b", "c", "d"}),
                       doctest::Contains("expected 3 key labels"), Error);
  const auto one = nn::attention_spectrum(full({1, 2, 4, 4}, 0.25));
  CHECK_THROWS_WITH_AS(
      nn::plot_spectra((dir / "s.png").string(), {{"a", {one, one}}, {"b", {one}}}, "t"),
      doctest::Contains("layers"), Error);
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    MESSAGE("gnuplot is not installed: the drawing itself is not checked");
  } else {
    nn::plot_attention((dir / "a.png").string(), full({2, 5, 3}, 1.0 / 3), "maps",
                       "compressed row");
    // Labels with a quote, a space, a newline and a control character still make a PNG.
    nn::plot_attention((dir / "b.png").string(), full({1, 3, 3}, 1.0 / 3), "labelled", "key",
                       {"'", " ", "\n"}, {"a", "\x01", "c"});
    CHECK(fs::file_size(dir / "b.png") > 0);
    nn::plot_spectra((dir / "s.png").string(), {{"a", {one, one}}, {"b", {one, one}}}, "spectra",
                     2);
    CHECK(fs::file_size(dir / "a.png") > 0);
    CHECK(fs::file_size(dir / "s.png") > 0);
  }
  fs::remove_all(dir);
}
