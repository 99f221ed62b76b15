// Adding a Linformer projection kind: a fixed random Gaussian E (not learned), as in the
// Linformer paper's proof that k = O(d / eps^2) rows suffice. One class, one registration; the
// encoder then builds it by name. The program compares the attention output of the new kind
// with full attention on the same weights, for growing k; then trains a Linformer classifier
// with it on a toy task with padded sequences, saves it with its model description and reopens
// it with nn::load_model, which finds the kind again in the registry. It fails unless the error
// falls with k, the loss falls and the reopened model gives the same outputs bit for bit.
#include <tinyformer/tinyformer.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

using namespace tinyformer;

// x (the keys or the values): [B, H, n, d] -> [B, H, k, d] as x' = E[:, :n] x, with
// E ~ N(0, 1/k) fixed.
struct FixedGaussianProjection : nn::Projection {
  Tensor e;  // [k, max_seq_len], a buffer: saved with the model, never trained

  explicit FixedGaussianProjection(const nn::ProjectionSpec& spec) {
    e = register_buffer("e",
                        randn({spec.k, spec.max_seq_len}) / std::sqrt(static_cast<double>(spec.k)));
  }
  Tensor forward(const Tensor& x) const override {
    return matmul(e.narrow(1, 0, x.size(2)).to(x.dtype()), x);
  }
  std::int64_t k() const override { return e.size(0); }
  std::string type_name() const override { return "FixedGaussianProjection"; }
};

// The toy task: does token 1 occur among a sequence's real tokens? The second half of the batch
// is padded after n / 2 tokens, and the padding may hold a 1 that must not count.
struct Batch {
  Tensor tokens, padding, labels;  // [B, n] int64, [B, n] bool (true = padding), [B] int64
};
Batch make_batch(std::mt19937& rng, std::int64_t batch, std::int64_t n, std::int64_t vocab) {
  std::vector<std::int64_t> tokens(batch * n), labels(batch, 0);
  std::vector<bool> padding(batch * n);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t real = b < batch / 2 ? n : n / 2;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t token = rng() % 24 == 0 ? 1 : 2 + rng() % (vocab - 2);
      tokens[b * n + i] = token;
      padding[b * n + i] = i >= real;
      if (i < real && token == 1) labels[b] = 1;
    }
  }
  return {from<std::int64_t>(tokens, {batch, n}), from<bool>(padding, {batch, n}),
          from<std::int64_t>(labels, {batch})};
}

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "custom_projection.safetensors";
  nn::register_projection("fixed_gaussian", [](const nn::ProjectionSpec& spec) {
    return std::make_shared<FixedGaussianProjection>(spec);
  });

  manual_seed(0);
  const std::int64_t n = 256, d_model = 64, heads = 4;
  nn::MultiHeadAttention full(d_model, heads);
  full.eval();
  Tensor x = randn({1, n, d_model});
  Tensor reference = full.forward(x);

  std::printf("k     relative error of the attention output against full attention\n");
  double previous = 1e9;
  bool improving = true;
  for (std::int64_t k : {8, 64, 256}) {
    const nn::ProjectionSpec spec{.k = k, .max_seq_len = n, .head_dim = d_model / heads};
    auto e = nn::make_projection("fixed_gaussian", spec);
    nn::LinformerAttention lin(d_model, heads, e, e);
    lin.load_state_dict(full.state_dict(), /*strict=*/false);  // same q/k/v/out_proj weights
    lin.eval();
    Tensor diff = lin.forward(x) - reference;
    const double error =
        std::sqrt(sum(diff * diff).item<float>() / sum(reference * reference).item<float>());
    std::printf("%-5lld %.4f\n", static_cast<long long>(k), error);
    improving = improving && error < previous;
    previous = error;
  }
  std::printf("%s\n", improving ? "the error falls as k grows" : "the error did not fall with k");
  if (!improving) return 1;

  // A Linformer classifier whose layers project their keys and values with the new kind, by
  // name, as a model description (plain data, which a checkpoint carries).
  const std::int64_t vocab = 12, seq_len = 16, batch = 32;
  const nn::EncoderConfig config{
      .layers = 2,
      .d_model = 32,
      .heads = 4,
      .d_ff = 64,
      .max_seq_len = seq_len,
      .dropout = 0.0,
      .attention = nn::AttentionKind::linformer,
      .linformer = {
          .k = 8, .projection_name = "fixed_gaussian", .sharing = nn::Sharing::layerwise}};
  const nn::ModelDescription description{.kind = nn::ModelKind::sequence_classifier,
                                         .encoder = config,
                                         .vocabulary = {.size = vocab, .tokenizer = "toy"},
                                         .classes = 2};
  auto model = nn::make_model<nn::SequenceClassifier>(description);
  nn::optim::AdamW optimizer(model->parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  std::mt19937 rng(1);
  double first = 0, last = 0;
  for (int step = 0; step < 120; ++step) {
    const Batch data = make_batch(rng, batch, seq_len, vocab);
    Tensor loss = cross_entropy(model->forward(data.tokens, data.padding), data.labels);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 10 == 0) std::printf("step %3d  loss %.4f\n", step, last);
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  if (!(last < 0.6 * first)) return 1;

  // load_model builds the model from the description, the projection by its registered name
  // (drawing a new E), then loads the file's weights and buffers: E comes back as it was saved.
  // A program that opens the file registers "fixed_gaussian" first, as main does above.
  model->eval();
  nn::save_model(path, *model, description);
  const nn::LoadedModel loaded = nn::load_model(path);
  std::filesystem::remove(path);
  const Batch data = make_batch(rng, batch, seq_len, vocab);
  const bool same =
      loaded.as<nn::SequenceClassifier>()->forward(data.tokens, data.padding).to_vector<float>() ==
      model->forward(data.tokens, data.padding).to_vector<float>();
  std::printf("the reopened model's outputs are %s\n", same ? "the same" : "different");
  return same ? 0 : 1;
}
