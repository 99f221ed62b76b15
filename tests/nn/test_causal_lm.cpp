// CausalLM: exact causality, gradients, sampling and generation, and its errors.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::max_abs_diff;

namespace {

nn::EncoderConfig tiny_config(std::int64_t max_seq_len = 12) {
  return {.layers = 2,
          .d_model = 16,
          .heads = 2,
          .d_ff = 32,
          .max_seq_len = max_seq_len,
          .dropout = 0.0};
}

// [b, n] int64 tokens drawn uniformly from [0, vocab).
Tensor random_tokens(std::int64_t b, std::int64_t n, std::int64_t vocab) {
  std::vector<std::int64_t> ids;
  for (double u : rand({b, n}, {.dtype = kFloat64}).to_vector<double>())
    ids.push_back(static_cast<std::int64_t>(u * static_cast<double>(vocab)));
  return from<std::int64_t>(ids, {b, n});
}

}  // namespace

TEST_CASE("CausalLM: a later token never changes earlier logits, exactly") {
  for (DType dtype : {kFloat32, kFloat64}) {
    manual_seed(3);
    nn::CausalLM model(tiny_config(), /*vocab_size=*/23);
    model.to(dtype);
    model.eval();
    const std::int64_t n = 12, cut = 7;
    const Tensor tokens = random_tokens(2, n, 23);
    // Positions cut.. get other tokens (each shifted by one, so every one of them changes).
    std::vector<std::int64_t> changed = tokens.to_vector<std::int64_t>();
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = cut; i < n; ++i) changed[b * n + i] = (changed[b * n + i] + 1) % 23;
    const Tensor other = from<std::int64_t>(changed, {2, n});
    const Tensor a = model.forward(tokens), c = model.forward(other);
    CHECK(a.shape() == Shape{2, n, 23});
    CHECK(max_abs_diff(a.narrow(1, 0, cut), c.narrow(1, 0, cut)) == 0.0);
    // The changed positions' own logits do change: the check above can fail.
    CHECK(max_abs_diff(a.narrow(1, cut, 1), c.narrow(1, cut, 1)) > 1e-4);
  }
}

TEST_CASE("CausalLM: gradients match finite differences in float64") {
  manual_seed(4);
  nn::CausalLM model(
      {.layers = 2, .d_model = 8, .heads = 2, .d_ff = 16, .max_seq_len = 6, .dropout = 0.0},
      /*vocab_size=*/11);
  const Tensor tokens = random_tokens(2, 5, 11);
  // Through the next-token loss, as training uses it, and through the logits themselves.
  CHECK(test::gradcheck_module(model, tokens, [&](const Tensor& t) {
    const Tensor logits = model.forward(t);  // [2, 5, 11]
    return cross_entropy(logits.narrow(1, 0, 4).reshape({-1, 11}), t.narrow(1, 1, 4).reshape({-1}));
  }));
  CHECK(test::gradcheck_module(model, tokens, [&](const Tensor& t) { return model.forward(t); }));
}

TEST_CASE("sample_token: greedy, temperature and top-k") {
  const std::vector<double> logits = {0.0, std::log(3.0), -1.0, std::log(3.0)};
  // Greedy: the first of the tied maxima, whatever the draw.
  CHECK(nn::sample_token(logits, {.temperature = 0}, 0.99) == 1);
  // T = 1 over {1, 3, e^-1, 3} / (7 + e^-1): the inverse CDF of the draw.
  const double total = 7.0 + std::exp(-1.0);
  CHECK(nn::sample_token(logits, {}, 0.5 / total) == 0);
  CHECK(nn::sample_token(logits, {}, 1.5 / total) == 1);
  CHECK(nn::sample_token(logits, {}, 4.2 / total) == 2);
  CHECK(nn::sample_token(logits, {}, 4.5 / total) == 3);
  // top_k = 2 keeps the two logits log 3 (the k-th largest and everything tied with it).
  CHECK(nn::sample_token(logits, {.top_k = 2}, 0.0) == 1);
  CHECK(nn::sample_token(logits, {.top_k = 2}, 0.49) == 1);
  CHECK(nn::sample_token(logits, {.top_k = 2}, 0.51) == 3);
  // top_k = 1 keeps the maxima; a tiny temperature is nearly greedy.
  CHECK(nn::sample_token({0.0, 2.0, 1.0}, {.top_k = 1}, 0.999) == 1);
  CHECK(nn::sample_token({0.0, 2.0, 1.0}, {.temperature = 1e-3}, 0.999) == 1);
  // A high temperature flattens: the draw 0.3 lands on the first token.
  CHECK(nn::sample_token({0.0, 2.0, 1.0}, {.temperature = 1e6}, 0.3) == 0);
  // An excluded (-inf) logit is never drawn.
  CHECK(nn::sample_token({-INFINITY, 0.0}, {}, 0.0) == 1);

  CHECK_THROWS_WITH_AS(nn::sample_token({}, {}, 0.5), "sample_token: expected at least one logit",
                       Error);
  CHECK_THROWS_WITH_AS(nn::sample_token({0.0, NAN}, {}, 0.5),
                       "sample_token: logit 1 is NaN (has the model diverged?)", Error);
  CHECK_THROWS_WITH_AS(nn::sample_token({0.0}, {.temperature = -1}, 0.5),
                       doctest::Contains("sample_token: expected a finite temperature"), Error);
  CHECK_THROWS_WITH_AS(nn::sample_token({0.0}, {.top_k = -2}, 0.5),
                       "sample_token: expected top_k >= 0 (0: all tokens), got -2", Error);
  CHECK_THROWS_WITH_AS(nn::sample_token({0.0}, {}, 1.0),
                       "sample_token: expected a uniform draw in [0, 1), got 1", Error);
}

TEST_CASE("CausalLM::generate: deterministic per seed; greedy is the argmax step by step") {
  manual_seed(5);
  const std::int64_t vocab = 17, max_len = 8;
  nn::CausalLM model(tiny_config(max_len), vocab);
  model.train();
  const std::vector<std::int64_t> prompt = {3, 1, 4, 1, 5};
  const nn::SamplingOptions sampled{.temperature = 1.0, .top_k = 0, .seed = 42};
  const auto a = model.generate(prompt, 20, sampled);
  const auto b = model.generate(prompt, 20, sampled);
  CHECK(a.size() == 20);
  CHECK(a == b);
  CHECK(model.generate(prompt, 20, {.seed = 43}) != a);
  CHECK(model.is_training());  // the caller's mode is restored
  for (std::int64_t id : model.generate(prompt, 20, {.top_k = 3, .seed = 7}))
    CHECK((id >= 0 && id < vocab));

  // Greedy, 12 tokens: more than max_seq_len, so the context window slides.
  const auto greedy = model.generate(prompt, 12, {.temperature = 0});
  model.eval();
  NoGradGuard no_grad;
  std::vector<std::int64_t> context = prompt;
  for (std::size_t t = 0; t < greedy.size(); ++t) {
    const auto n = static_cast<std::int64_t>(context.size());
    const Tensor logits = model.forward(from<std::int64_t>(context, {1, n}));  // [1, n, V]
    const std::int64_t expected = argmax(logits.select(1, n - 1), -1).item<std::int64_t>();
    CHECK(greedy[t] == expected);
    context.push_back(expected);
    if (static_cast<std::int64_t>(context.size()) > max_len) context.erase(context.begin());
  }
  CHECK(model.generate(prompt, 0).empty());
}

TEST_CASE("CausalLM learns a repeating pattern and continues it greedily") {
  manual_seed(6);
  const std::int64_t vocab = 8, n = 12;
  nn::CausalLM model(
      {.layers = 1, .d_model = 32, .heads = 2, .d_ff = 64, .max_seq_len = n, .dropout = 0.0},
      vocab);
  nn::optim::AdamW optimizer(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  // Sequences of the cycle 1 2 3 4 5, each starting at another phase.
  std::vector<std::int64_t> data;
  for (std::int64_t b = 0; b < 5; ++b)
    for (std::int64_t i = 0; i < n; ++i) data.push_back(1 + (b + i) % 5);
  const Tensor tokens = from<std::int64_t>(data, {5, n});
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    const Tensor logits = model.forward(tokens);
    const Tensor loss = cross_entropy(logits.narrow(1, 0, n - 1).reshape({-1, vocab}),
                                      tokens.narrow(1, 1, n - 1).reshape({-1}));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(first > 1.5);
  CHECK(last < 0.05);
  CHECK(model.generate({2, 3}, 8, {.temperature = 0}) ==
        std::vector<std::int64_t>{4, 5, 1, 2, 3, 4, 5, 1});
}

TEST_CASE("CausalLM: bad arguments are Errors naming the op") {
  manual_seed(7);
  nn::EncoderConfig linformer = tiny_config();
  linformer.attention = nn::AttentionKind::linformer;
  linformer.linformer = {.k = 4};
  CHECK_THROWS_WITH_AS(nn::CausalLM(linformer, 10),
                       doctest::Contains("CausalLM: layer 0 asks for Linformer attention"), Error);
  CHECK_THROWS_WITH_AS(nn::CausalLM(tiny_config(), 0),
                       "CausalLM: expected a positive vocabulary size, got 0", Error);

  nn::CausalLM model(tiny_config(6), 10);
  CHECK_THROWS_WITH_AS(model.forward(zeros({1, 4})),
                       "CausalLM: expected int64 tokens [B, n], got [1, 4] float32", Error);
  CHECK_THROWS_WITH_AS(model.forward(zeros({1, 7}, {.dtype = kInt64})),
                       "CausalLM: the sequence has 7 tokens, expected 1 to max_seq_len = 6", Error);
  CHECK_THROWS_WITH_AS(model.forward(from<std::int64_t>({1, 10}, {1, 2})),
                       doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(model.generate({}, 3),
                       "CausalLM::generate: expected a prompt of at least one token", Error);
  CHECK_THROWS_WITH_AS(
      model.generate({1, 2, 3, 4, 5, 6, 7}, 3),
      "CausalLM::generate: the prompt has 7 tokens, more than the model's max_seq_len = 6", Error);
  CHECK_THROWS_WITH_AS(model.generate({1, 10}, 3),
                       "CausalLM::generate: prompt token 10 is outside [0, 10)", Error);
  CHECK_THROWS_WITH_AS(model.generate({1, -1}, 3),
                       "CausalLM::generate: prompt token -1 is outside [0, 10)", Error);
  CHECK_THROWS_WITH_AS(model.generate({1}, -1),
                       "CausalLM::generate: expected max_new_tokens >= 0, got -1", Error);
  CHECK_THROWS_WITH_AS(model.generate({1}, 3, {.temperature = -0.5}),
                       doctest::Contains("CausalLM::generate: expected a finite temperature"),
                       Error);
  CHECK_THROWS_WITH_AS(model.generate({1}, 3, {.temperature = NAN}),
                       doctest::Contains("CausalLM::generate: expected a finite temperature"),
                       Error);
  CHECK_THROWS_WITH_AS(model.generate({1}, 3, {.top_k = 11}),
                       "CausalLM::generate: expected top_k in [0, 10] (0: all tokens), got 11",
                       Error);
  CHECK_THROWS_WITH_AS(model.generate({1}, 3, {.top_k = -1}),
                       doctest::Contains("expected top_k in [0, 10]"), Error);
}
