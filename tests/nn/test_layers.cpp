// Layers: shapes, PyTorch-style initialisation bounds, and double-precision gradient checks.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::gradcheck_module;
using test::randn64;

TEST_CASE("Linear: shape, init bounds, gradients") {
  nn::Linear fc(16, 8);
  const double bound = 1.0 / std::sqrt(16.0);
  for (float w : fc.weight.to_vector<float>()) CHECK(std::abs(w) <= bound + 1e-7);
  for (float b : fc.bias.to_vector<float>()) CHECK(std::abs(b) <= bound + 1e-7);
  CHECK(fc.forward(randn({2, 3, 16})).shape() == Shape{2, 3, 8});
  CHECK_THROWS_WITH_AS(fc.forward(randn({2, 15})),
                       doctest::Contains("Linear: expected input [..., 16]"), Error);

  nn::Linear small(3, 2);
  CHECK(gradcheck_module(small, randn64({2, 4, 3}),
                         [&](const Tensor& x) { return small.forward(x); }));
  nn::Linear no_bias(3, 2, false);
  CHECK(no_bias.parameters().size() == 1);
  CHECK(gradcheck_module(no_bias, randn64({5, 3}),
                         [&](const Tensor& x) { return no_bias.forward(x); }));
}

TEST_CASE("LayerNorm, FeedForward, Embedding, position encodings: gradients") {
  nn::LayerNorm ln(5);
  CHECK(gradcheck_module(ln, randn64({3, 5}), [&](const Tensor& x) { return ln.forward(x); }));

  nn::FeedForward ff(4, 6, nn::Activation::gelu);
  CHECK(gradcheck_module(ff, randn64({2, 3, 4}), [&](const Tensor& x) { return ff.forward(x); }));
  nn::FeedForward ff_relu(3, 5, nn::Activation::relu);
  CHECK(gradcheck_module(ff_relu, randn64({4, 3}),
                         [&](const Tensor& x) { return ff_relu.forward(x); }));
  // Any parameterless unary row is an activation; pow_scalar (an exponent) is not.
  nn::FeedForward ff_tanh(3, 4, nn::Activation::tanh);
  CHECK(gradcheck_module(ff_tanh, randn64({2, 3}),
                         [&](const Tensor& x) { return ff_tanh.forward(x); }));
  CHECK(ff_tanh.extra_repr().find("activation=tanh") != std::string::npos);
  CHECK_THROWS_WITH_AS(nn::FeedForward(3, 4, nn::Activation::pow_scalar),
                       doctest::Contains("pow_scalar"), Error);

  nn::Embedding emb(7, 3);
  Tensor ids = from<std::int64_t>({1, 4, 4, 6, 0}, {5});
  CHECK(gradcheck_module(emb, Tensor(), [&](const Tensor&) { return emb.forward(ids); }));
  CHECK(emb.forward(from<std::int64_t>({1, 2, 3, 4}, {2, 2})).shape() == Shape{2, 2, 3});
  CHECK_THROWS_AS(emb.forward(from<std::int64_t>({7}, {1})), Error);

  nn::LearnedPositionalEncoding pos(6, 3);
  CHECK(gradcheck_module(pos, randn64({2, 4, 3}), [&](const Tensor& x) { return pos.forward(x); }));
  CHECK_THROWS_WITH_AS(pos.forward(randn({1, 7, 3})), doctest::Contains("max_len"), Error);
}

namespace {
double sample_std(const Tensor& t) {
  const auto v = t.to_vector<float>();
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += static_cast<double>(x) * x;
  const double n = static_cast<double>(v.size());
  return std::sqrt(s2 / n - (s / n) * (s / n));
}
}  // namespace

TEST_CASE("Learned positions start at N(0, 0.02^2), or at the std given") {
  manual_seed(11);
  CHECK(sample_std(nn::LearnedPositionalEncoding(512, 64).weight) ==
        doctest::Approx(0.02).epsilon(0.02));
  CHECK(sample_std(nn::LearnedPositionalEncoding(512, 64, 0.1).weight) ==
        doctest::Approx(0.1).epsilon(0.02));
  CHECK_THROWS_WITH_AS(nn::LearnedPositionalEncoding(4, 4, -1.0),
                       doctest::Contains("non-negative std"), Error);
}

TEST_CASE("Every model takes its embeddings' starting scales from an InitConfig") {
  manual_seed(12);
  const nn::EncoderConfig config{
      .layers = 1, .d_model = 64, .heads = 2, .d_ff = 64, .max_seq_len = 256};
  const std::int64_t vocab = 300;
  // The defaults: tokens and positions both at N(0, 0.02^2).
  CHECK(nn::InitConfig{}.token_std == 0.02);
  CHECK(nn::InitConfig{}.position_std == 0.02);
  nn::SequenceClassifier classifier(config, vocab, 2);
  CHECK(sample_std(classifier.body->learned_positions->weight) ==
        doctest::Approx(0.02).epsilon(0.03));
  CHECK(sample_std(classifier.body->token_embedding->weight) ==
        doctest::Approx(0.02).epsilon(0.03));

  const nn::InitConfig init{.token_std = 0.05, .position_std = 0.1};
  auto check = [](const Tensor& tokens, const Tensor& positions) {
    CHECK(sample_std(tokens) == doctest::Approx(0.05).epsilon(0.03));
    CHECK(sample_std(positions) == doctest::Approx(0.1).epsilon(0.03));
  };
  nn::SequenceClassifier with_init(config, vocab, 2, nn::Pooling::mean,
                                   nn::PositionEncoding::learned, init);
  check(with_init.body->token_embedding->weight, with_init.body->learned_positions->weight);
  nn::MaskedLM mlm(config, vocab, true, nn::PositionEncoding::learned, init);
  check(mlm.body->token_embedding->weight, mlm.body->learned_positions->weight);
  nn::CausalLM causal(config, vocab, init);
  check(causal.token_embedding->weight, causal.positions->weight);
  const nn::ModelDescription description{.kind = nn::ModelKind::sequence_classifier,
                                         .encoder = config,
                                         .vocabulary = {.size = vocab},
                                         .classes = 3};
  auto made = nn::make_model<nn::SequenceClassifier>(description, init);
  check(made->body->token_embedding->weight, made->body->learned_positions->weight);

  CHECK_THROWS_WITH_AS(
      nn::SequenceClassifier(config, vocab, 2, nn::Pooling::mean, nn::PositionEncoding::learned,
                             {.position_std = -0.1}),
      doctest::Contains("TokenEncoder: expected a finite, non-negative position_std"), Error);
  CHECK_THROWS_WITH_AS(nn::CausalLM(config, vocab, {.token_std = NAN}),
                       doctest::Contains("CausalLM: expected a finite, non-negative token_std"),
                       Error);
}

TEST_CASE("Sinusoidal position encoding values") {
  nn::SinusoidalPositionalEncoding pe(10, 4);
  Tensor out = pe.forward(zeros({1, 10, 4}));
  auto v = out.to_vector<float>();
  // position 3, dims 0..3: sin(3), cos(3), sin(3 / 100), cos(3 / 100)
  CHECK(v[12] == doctest::Approx(std::sin(3.0)).epsilon(1e-6));
  CHECK(v[13] == doctest::Approx(std::cos(3.0)).epsilon(1e-6));
  CHECK(v[14] == doctest::Approx(std::sin(0.03)).epsilon(1e-6));
  CHECK(v[15] == doctest::Approx(std::cos(0.03)).epsilon(1e-6));
  CHECK(pe.parameters().empty());
  CHECK(pe.named_buffers().size() == 1);
}

TEST_CASE("Conv1d and pooling layers: shapes and gradients") {
  nn::Conv1d conv(2, 3, 3, 2, 1);
  CHECK(conv.forward(randn({2, 2, 9})).shape() == Shape{2, 3, 5});
  CHECK(
      gradcheck_module(conv, randn64({2, 2, 7}), [&](const Tensor& x) { return conv.forward(x); }));
  nn::AvgPool1d avg(2);
  nn::MaxPool1d mx(3, 2);
  CHECK(avg.forward(randn({1, 2, 7})).shape() == Shape{1, 2, 3});
  CHECK(mx.forward(randn({1, 2, 7})).shape() == Shape{1, 2, 3});
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return avg.forward(in[0]); },
                  {randn64({1, 2, 6})}));
}

TEST_CASE("Dropout: identity in eval, scaled mask in training") {
  nn::Dropout drop(0.5);
  Tensor x = ones({1000});
  drop.eval();
  CHECK(drop.forward(x).to_vector<float>() == x.to_vector<float>());
  drop.train();
  auto v = drop.forward(x).to_vector<float>();
  int zeros_seen = 0;
  for (float e : v) {
    CHECK((e == 0.0f || e == 2.0f));
    zeros_seen += e == 0.0f;
  }
  CHECK(zeros_seen > 400);
  CHECK(zeros_seen < 600);
  // p = 1 drops everything in training (as torch.nn.Dropout(1.0)); above 1 is an Error.
  nn::Dropout all(1.0);
  CHECK(all.forward(x).to_vector<float>() == std::vector<float>(1000, 0.0f));
  all.eval();
  CHECK(all.forward(x).to_vector<float>() == x.to_vector<float>());
  CHECK_THROWS_WITH_AS(nn::Dropout(1.01), "Dropout: expected p in [0, 1], got 1.01", Error);
  CHECK_THROWS_AS(nn::Dropout(-0.1), Error);
}

TEST_CASE("init: fans of empty and convolution-shaped weights; initialising an empty one") {
  // numel() / (size(0) * size(1)) divided by zero for a weight with an empty dim.
  CHECK(nn::init::fan_in(empty({0, 5, 3})) == 15);
  CHECK(nn::init::fan_out(empty({0, 5, 3})) == 0);
  CHECK(nn::init::fan_in(empty({4, 0, 3})) == 0);
  CHECK(nn::init::fan_out(empty({4, 0, 3})) == 12);
  CHECK(nn::init::fan_in(empty({4, 5})) == 5);
  for (const Shape& shape : {Shape{0, 5}, Shape{5, 0}, Shape{0, 0, 3}}) {
    const Tensor w = empty(shape);
    nn::init::xavier_uniform_(w);
    nn::init::xavier_normal_(w);
    nn::init::kaiming_uniform_(w, std::sqrt(5.0));
    CHECK(w.numel() == 0);
  }
}

TEST_CASE("embedding and position tables too large to count or hold are Errors naming the layer") {
  constexpr std::int64_t big = std::int64_t{1} << 62;
  CHECK_THROWS_WITH_AS(nn::Embedding(260, big),
                       "Embedding: shape [260, 4611686018427387904] is too large (260 * "
                       "4611686018427387904 overflows a 64-bit integer)",
                       Error);
  CHECK_THROWS_WITH_AS(
      nn::LearnedPositionalEncoding(big, 64),
      doctest::Contains("LearnedPositionalEncoding: shape [4611686018427387904, 64]"), Error);
  // The sinusoidal table is computed in a host vector, checked before it is made.
  CHECK_THROWS_WITH_AS(
      nn::SinusoidalPositionalEncoding(std::int64_t{1} << 40, 2),
      doctest::Contains("SinusoidalPositionalEncoding: out of memory: shape "
                        "[1099511627776, 2] float32 asked for 8796093022208 bytes"),
      OutOfMemory);
}
