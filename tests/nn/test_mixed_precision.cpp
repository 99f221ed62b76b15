// nn::MixedPrecision: which parameters get bfloat16 copies, float32 gradients on the masters, the
// copies following optimizer steps, and a tiny model's loss curve against float32 training.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "nn/tinyformer.h"

using namespace tinyformer;

namespace {

nn::EncoderConfig tiny_config() {
  return {.layers = 2, .d_model = 32, .heads = 2, .d_ff = 64, .max_seq_len = 16, .dropout = 0.0};
}

// [b, n] int64 tokens of a repeating pattern with noise, so that a tiny model can learn it.
Tensor pattern_tokens(std::int64_t b, std::int64_t n, std::int64_t vocab) {
  std::vector<std::int64_t> ids;
  const std::vector<double> u = rand({b, n}, {.dtype = kFloat64}).to_vector<double>();
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const double r = u[static_cast<std::size_t>(i * n + j)];
      ids.push_back(r < 0.2 ? static_cast<std::int64_t>(r * 5 * static_cast<double>(vocab))
                            : (i + j * 3) % vocab);
    }
  }
  return from<std::int64_t>(ids, {b, n});
}

// Loss per step of `steps` AdamW steps on a fixed batch, in float32 or mixed precision.
std::vector<double> train_losses(bool mixed, int steps) {
  manual_seed(11);
  constexpr std::int64_t vocab = 24;
  auto model = std::make_shared<nn::MaskedLM>(tiny_config(), vocab);
  const Tensor tokens = pattern_tokens(8, 16, vocab);
  nn::optim::AdamW optimizer(model->parameters(), {.lr = 3e-3});
  nn::MixedPrecision mp(*model);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    Tensor loss;
    {
      const AutocastGuard autocast = mixed ? mp.autocast() : AutocastGuard(DType::float32);
      loss = cross_entropy(model->forward(tokens).reshape({-1, vocab}), tokens.reshape({-1}));
    }
    optimizer.zero_grad();
    loss.backward();
    for (const Tensor& p : model->parameters()) {
      REQUIRE(p.grad().defined());
      REQUIRE(p.grad().dtype() == DType::float32);
    }
    optimizer.step();
    mp.refresh();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// The element sizes of the operands of every product one training step of `model` ran, read
// from a by-shape profile: each row "matmul Bx[MxK][KxN]" (or "linear [relu] 1x[MxK][KxN]^T")
// records the bytes of its operands (B*M*K + B*K*N elements, an operand marked (bcast) one
// matrix shared by the batch, plus the bias's N for linear) and of its float32 out (B*M*N),
// which both modes write.
std::set<double> product_element_sizes(nn::MaskedLM& model, const Tensor& tokens,
                                       const nn::MixedPrecision* mp) {
  const Profiler profiler(true);
  {
    const AutocastGuard autocast = mp ? mp->autocast() : AutocastGuard(DType::float32);
    const Tensor logits = model.forward(tokens);
    cross_entropy(logits.reshape({-1, logits.size(-1)}), tokens.reshape({-1})).backward();
  }
  std::set<double> sizes;
  for (const OpProfile& row : profiler.ops()) {
    // "linear " and not "linear_backward_epilogue", the pass before a linear layer's backward
    // products.
    const bool product = row.name.rfind("matmul", 0) == 0 || row.name.rfind("linear ", 0) == 0;
    if (!product) continue;
    // "... <B>x[<M>x<K>]...[<K>x<N>]...": the batch starts after the last space before '['.
    const std::size_t bracket = row.name.find('[');
    REQUIRE(bracket != std::string::npos);
    const std::size_t start = row.name.rfind(' ', bracket) + 1;
    long long batch = 0, m_rows = 0, k_inner = 0, k_again = 0, n_cols = 0;
    const std::size_t second = row.name.find('[', bracket + 1);
    REQUIRE(second != std::string::npos);
    REQUIRE(std::sscanf(row.name.c_str() + start, "%lldx[%lldx%lld]", &batch, &m_rows, &k_inner) ==
            3);
    REQUIRE(std::sscanf(row.name.c_str() + second, "[%lldx%lld]", &k_again, &n_cols) == 2);
    REQUIRE(k_again == k_inner);
    const auto b = static_cast<double>(batch), rows = static_cast<double>(m_rows),
               inner = static_cast<double>(k_inner), cols = static_cast<double>(n_cols);
    const double out_bytes = 4.0 * b * rows * cols;
    // A linear layer's float32 bias (all of them have one here) counts with the out.
    const double bias_bytes = row.name.rfind("linear", 0) == 0 ? 4.0 * cols : 0.0;
    const std::string_view name = row.name;
    const bool a_shared = name.substr(second - 7, 7) == "(bcast)";
    const bool b_shared = name.ends_with("(bcast)");
    const double operand_elements =
        (a_shared ? 1.0 : b) * rows * inner + (b_shared ? 1.0 : b) * inner * cols;
    sizes.insert((row.bytes / static_cast<double>(row.calls) - out_bytes - bias_bytes) /
                 operand_elements);
  }
  return sizes;
}

}  // namespace

TEST_CASE("mixed precision: every product of forward and backward runs in bfloat16") {
  // Full attention (fused and composite) and Linformer attention with its projections, the
  // tied output layer, and every weight gradient dW = g^T x.
  for (const auto& entry :
       {std::pair{nn::AttentionKind::full, true}, std::pair{nn::AttentionKind::full, false},
        std::pair{nn::AttentionKind::linformer, true}}) {
    const auto& attention = std::get<0>(entry);
    const auto& fused = std::get<1>(entry);
    manual_seed(14);
    nn::EncoderConfig config = tiny_config();
    config.attention = attention;
    config.fused_attention = fused;
    config.linformer.k = 8;
    nn::MaskedLM model(config, 24);
    const Tensor tokens = pattern_tokens(2, 16, 24);
    const nn::MixedPrecision mp(model);
    CAPTURE(fused);
    CHECK(product_element_sizes(model, tokens, nullptr) == std::set<double>{4.0});
    CHECK(product_element_sizes(model, tokens, &mp) == std::set<double>{2.0});
    for (const Tensor& p : model.parameters()) {
      REQUIRE(p.grad().defined());
      CHECK(p.grad().dtype() == DType::float32);
    }
  }
}

TEST_CASE("mixed precision: bfloat16 copies of the matrix parameters only") {
  manual_seed(12);
  nn::MaskedLM model(tiny_config(), 24);
  const nn::MixedPrecision mp(model);
  std::size_t matrices = 0;
  for (const Tensor& p : model.parameters()) {
    const Tensor copy = mp.cache().copy_of(p);
    CHECK(copy.defined() == (p.dim() >= 2));
    if (!copy.defined()) continue;
    matrices += 1;
    CHECK(copy.dtype() == DType::bfloat16);
    CHECK(p.dtype() == DType::float32);  // the master stays float32
  }
  CHECK(matrices == mp.cache().size());
  CHECK(mp.cache().conversions() == static_cast<std::int64_t>(matrices));  // one refresh
}

TEST_CASE("mixed precision: the copies follow the optimizer, once per step") {
  manual_seed(13);
  nn::Linear layer(12, 6);
  nn::optim::AdamW optimizer(layer.parameters(), {.lr = 1e-2});
  nn::MixedPrecision mp(layer);
  REQUIRE(mp.cache().size() == 1);  // the weight; the bias enters a float32 addition
  const Tensor x = randn({4, 12});
  const Tensor before = mp.cache().copy_of(layer.weight);
  for (int forward = 0; forward < 3; ++forward) {  // three forwards, one step
    const AutocastGuard autocast = mp.autocast();
    sum(layer.forward(x)).backward();
  }
  CHECK(mp.cache().conversions() == 1);
  CHECK(mp.cache().copy_of(layer.weight).storage() == before.storage());
  CHECK(layer.weight.grad().dtype() == DType::float32);
  optimizer.step();
  mp.refresh();
  CHECK(mp.cache().conversions() == 2);
  const Tensor after = mp.cache().copy_of(layer.weight);
  CHECK(after.storage() != before.storage());
  const std::vector<bfloat16> got = after.to_vector<bfloat16>();
  const std::vector<bfloat16> want =
      layer.weight.detach().to(DType::bfloat16).to_vector<bfloat16>();
  const std::vector<bfloat16> old = before.to_vector<bfloat16>();
  bool changed = false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].bits == want[i].bits);
    changed = changed || got[i].bits != old[i].bits;
  }
  CHECK(changed);
}

TEST_CASE("mixed precision: a tiny MaskedLM's loss curve tracks float32 training") {
  // 40 AdamW steps at lr 3e-3 on one batch. Each product rounds its operands to bfloat16
  // (relative 2^-9) and its result (2^-9); the curves drift apart through the updates, but the
  // optimizer sees the same landscape: the losses stay within 1% of each other (they differ by
  // about 0.1% here, with or without bfloat16 instructions; the float32 loss falls by 75%, so a
  // mixed mode that does not learn, or learns something else, fails), and the mixed curve is not
  // the float32 one (it really ran).
  // ctest also runs this case with oneDNN capped below AVX-512: products through float32.
  if (std::getenv("TINYFORMER_EXPECT_BF16_FALLBACK") != nullptr) {
    CHECK(runtime_info().find("bfloat16 products: no oneDNN kernel") != std::string::npos);
  }
  const std::vector<double> f32 = train_losses(false, 40);
  const std::vector<double> mixed = train_losses(true, 40);
  CHECK(f32.back() < 0.5 * f32.front());
  bool differs = false;
  double worst = 0;
  for (std::size_t i = 0; i < f32.size(); ++i) {
    worst = std::max(worst, std::abs(mixed[i] - f32[i]) / f32[i]);
    differs = differs || mixed[i] != f32[i];
  }
  INFO("float32 " << f32.front() << " -> " << f32.back() << ", mixed " << mixed.front() << " -> "
                  << mixed.back() << ", worst relative difference " << worst);
  CHECK(worst < 0.01);
  CHECK(differs);
}
