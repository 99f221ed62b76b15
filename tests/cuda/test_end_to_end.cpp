// End to end on the GPU: a tiny masked-LM (full and Linformer attention) trained for a few AdamW
// steps on the same batches on the CPU and on the GPU, from the same weights and with the same
// dropout masks, loses the same at every step. (The loss of each step depends on every weight
// the steps before it updated, so it checks the whole forward, backward and optimizer chain.)
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/random.h"
#include "nn/models.h"
#include "nn/optim.h"
#include "parity/parity.h"

namespace {

using namespace tinyformer;

constexpr std::int64_t kVocab = 40, kBatch = 4, kLength = 16, kIgnore = -100;

struct Batch {
  Tensor tokens;   // [B, n] int64
  Tensor labels;   // [B, n] int64, kIgnore where not predicted
  Tensor padding;  // [B, n] bool, true = padding
};

// Random tokens; about a quarter of the real positions are targets; row 1 ends in padding.
Batch make_batch(std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> token(4, kVocab - 1);
  std::bernoulli_distribution pick(0.25);
  std::vector<std::int64_t> tokens(kBatch * kLength), labels(kBatch * kLength, kIgnore);
  std::vector<bool> padding(kBatch * kLength, false);
  for (std::int64_t b = 0; b < kBatch; ++b) {
    for (std::int64_t i = 0; i < kLength; ++i) {
      const auto at = static_cast<std::size_t>(b * kLength + i);
      tokens[at] = token(gen);
      padding[at] = b == 1 && i >= kLength - 5;
      if (!padding[at] && (pick(gen) || i == 0)) labels[at] = tokens[at];
      if (padding[at]) tokens[at] = 0;
    }
  }
  return {from<std::int64_t>(tokens, {kBatch, kLength}),
          from<std::int64_t>(labels, {kBatch, kLength}), from<bool>(padding, {kBatch, kLength})};
}

// One training step on `device`; the dropout masks come from the default generator, reseeded
// with `mask_seed` so that both devices draw the same ones. Returns the loss before the update.
double train_step(nn::MaskedLM& model, nn::optim::AdamW& optimizer, const Batch& batch,
                  Device device, std::uint64_t mask_seed) {
  manual_seed(mask_seed);
  const Tensor logits = model.forward(batch.tokens.to(device), batch.padding.to(device));
  const Tensor loss =
      cross_entropy(logits.reshape({-1, kVocab}), batch.labels.to(device).reshape({-1}), kIgnore);
  optimizer.zero_grad();
  loss.backward();
  nn::optim::clip_grad_norm(model.parameters(), 1.0);
  optimizer.step();
  return loss.item<double>();
}

}  // namespace

TEST_CASE("end to end: a tiny masked-LM trains alike on the CPU and the GPU") {
  if (!parity::available()) return;
  for (nn::AttentionKind attention : {nn::AttentionKind::full, nn::AttentionKind::linformer}) {
    CAPTURE(attention == nn::AttentionKind::full ? "full" : "linformer");
    const nn::EncoderConfig config = {.layers = 2,
                                      .d_model = 32,
                                      .heads = 4,
                                      .d_ff = 64,
                                      .max_seq_len = kLength,
                                      .dropout = 0.1,
                                      .attention = attention,
                                      .linformer = {.k = 8}};
    manual_seed(3);
    auto cpu_model = std::make_shared<nn::MaskedLM>(config, kVocab);
    auto gpu_model = std::make_shared<nn::MaskedLM>(config, kVocab);
    gpu_model->load_state_dict(cpu_model->state_dict());  // the CPU model's weights
    gpu_model->to(Device::cuda());
    for (const Tensor& p : gpu_model->parameters()) REQUIRE(p.device() == Device::cuda());

    nn::optim::AdamW cpu_opt(cpu_model->parameters(), {.lr = 3e-3});
    nn::optim::AdamW gpu_opt(gpu_model->parameters(), {.lr = 3e-3});
    double first = 0, last = 0;
    for (int step = 0; step < 5; ++step) {
      CAPTURE(step);
      const Batch batch = make_batch(static_cast<std::uint64_t>(100 + step % 2));
      const double cpu_loss = train_step(*cpu_model, cpu_opt, batch, Device::cpu(), 500 + step);
      const double gpu_loss = train_step(*gpu_model, gpu_opt, batch, Device::cuda(), 500 + step);
      CHECK(std::isfinite(cpu_loss));
      CHECK(std::abs(gpu_loss - cpu_loss) <= 1e-4 * std::abs(cpu_loss));
      if (step == 0) first = cpu_loss;
      last = cpu_loss;
    }
    // The steps did something (the same two batches come round again, so the loss falls).
    CHECK(last < first);
  }
}
