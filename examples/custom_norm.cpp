// Adding a norm to the encoder: RMSNorm registered by name and used for every norm of a
// classifier (both norms of each layer and the pre-norm stack's final norm); trained on a toy
// task, saved with its model description and reopened with nn::load_model, which finds the norm
// again in the registry. The program fails unless the loss falls and the reopened model gives
// the same outputs bit for bit.
#include <tinyformer/tinyformer.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

using namespace tinyformer;

// x / sqrt(mean(x^2) + eps) * weight over the last dim, as in Zhang & Sennrich (2019), "Root Mean
// Square Layer Normalization": LayerNorm without the mean subtraction and the bias.
// x: [..., d_model] -> [..., d_model]
class RMSNorm : public nn::NormModule {
 public:
  explicit RMSNorm(std::int64_t d_model, double eps = 1e-6) : eps_(eps) {
    weight = register_parameter("weight", ones({d_model}));
  }
  Tensor forward(const Tensor& x) const override {
    return x * rsqrt(mean(x * x, {-1}, /*keepdim=*/true) + eps_) * weight;
  }
  std::string type_name() const override { return "RMSNorm"; }

  Tensor weight;  // [d_model]

 private:
  double eps_;
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
  const std::string path = argc > 1 ? argv[1] : "custom_norm.safetensors";
  const std::int64_t vocab = 12, n = 16, batch = 32;
  // The model as a description: plain data, which a checkpoint carries. The config names the
  // norm; a name is all the file keeps of it.
  const nn::EncoderConfig config{.layers = 2,
                                 .d_model = 32,
                                 .heads = 4,
                                 .d_ff = 64,
                                 .max_seq_len = n,
                                 .dropout = 0.0,
                                 .norm = "rms_norm"};
  const nn::ModelDescription description{.kind = nn::ModelKind::sequence_classifier,
                                         .encoder = config,
                                         .vocabulary = {.size = vocab, .tokenizer = "toy"},
                                         .classes = 2};

  // Until the name is registered, nothing that names it builds, load_model included: a program
  // that opens this model's checkpoint registers the norm first, as below.
  try {
    nn::make_model(description);
    std::printf("a model naming an unregistered norm was built\n");
    return 1;
  } catch (const Error& e) {
    std::printf("before register_norm: %s\n", e.what());
  }
  nn::register_norm("rms_norm", [](const nn::BlockPartSpec& spec) {
    return std::make_shared<RMSNorm>(spec.config.d_model);
  });

  manual_seed(0);
  auto model = nn::make_model<nn::SequenceClassifier>(description);
  std::printf("%s", model->to_string().c_str());

  nn::optim::AdamW optimizer(model->parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  std::mt19937 rng(1);
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    const Batch data = make_batch(rng, batch, n, vocab);
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

  // The checkpoint holds the weights (RMSNorm's under "...norm1.weight" and so on) and the
  // description; load_model builds the model from the description, the norm by its registered
  // name, then loads the weights into it.
  model->eval();
  nn::save_model(path, *model, description);
  const nn::LoadedModel loaded = nn::load_model(path);
  std::filesystem::remove(path);
  auto reopened = loaded.as<nn::SequenceClassifier>();
  const bool found =
      std::dynamic_pointer_cast<RMSNorm>(reopened->body->encoder->final_norm) != nullptr;
  const Batch data = make_batch(rng, batch, n, vocab);
  const bool same = reopened->forward(data.tokens, data.padding).to_vector<float>() ==
                    model->forward(data.tokens, data.padding).to_vector<float>();
  std::printf("reopened with %s; its outputs are %s\n", found ? "RMSNorm" : "another norm",
              same ? "the same" : "different");
  return found && same ? 0 : 1;
}
