// Adding a layer to the encoder: a gated feed-forward block (SwiGLU) registered by name and
// used in every layer of a Linformer classifier, which keeps everything else of the stack (the
// shared projections, the k of each layer, the padding masks). No library code changes: a
// Module subclass of nn::FeedForwardModule, one register_feed_forward call, and the name in the
// config. The model trains on a toy task, is saved with its model description and reopened with
// nn::load_model, which finds the block again in the registry; the program fails unless the loss
// falls and the reopened model gives the same outputs bit for bit.
#include <tinyformer/tinyformer.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

using namespace tinyformer;

// out = W2 (silu(W1 x) * (W3 x)), as in Shazeer (2020), "GLU Variants Improve Transformer".
// x: [..., d_model] -> [..., d_model]
class SwiGLU : public nn::FeedForwardModule {
 public:
  SwiGLU(std::int64_t d_model, std::int64_t d_hidden) {
    w1 = register_module("w1", std::make_shared<nn::Linear>(d_model, d_hidden));
    w3 = register_module("w3", std::make_shared<nn::Linear>(d_model, d_hidden));
    w2 = register_module("w2", std::make_shared<nn::Linear>(d_hidden, d_model));
  }
  Tensor forward(const Tensor& x) const override {
    return w2->forward(silu(w1->forward(x)) * w3->forward(x));
  }
  std::string type_name() const override { return "SwiGLU"; }

  std::shared_ptr<nn::Linear> w1, w3, w2;
};

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "custom_layer.safetensors";
  // The factory reads what it needs from the config; spec.layer says which layer it builds.
  nn::register_feed_forward("swiglu", [](const nn::BlockPartSpec& spec) {
    // Two thirds of d_ff keeps the parameter count of the standard two-matrix block.
    return std::make_shared<SwiGLU>(spec.config.d_model, 2 * spec.config.d_ff / 3);
  });

  manual_seed(0);
  const std::int64_t vocab = 16, n = 24, batch = 32;
  const nn::EncoderConfig config{
      .layers = 2,
      .d_model = 32,
      .heads = 4,
      .d_ff = 96,
      .max_seq_len = n,
      .dropout = 0.0,
      .feed_forward = "swiglu",  // the registered name: plain data, as a checkpoint stores it
      .attention = nn::AttentionKind::linformer,
      .linformer = {.k_per_layer = {8, 4}, .sharing = nn::Sharing::key_value}};
  // The model as a description (plain data, which a checkpoint carries), and built from it.
  const nn::ModelDescription description{.kind = nn::ModelKind::sequence_classifier,
                                         .encoder = config,
                                         .vocabulary = {.size = vocab, .tokenizer = "toy"},
                                         .classes = 2};
  auto model = nn::make_model<nn::SequenceClassifier>(description);
  std::printf("%s", model->to_string().c_str());

  // The task: does token 1 occur among a sequence's real (unpadded) tokens? The second half of
  // each batch is padded after 16 tokens, and padding may hold a 1 that must not count.
  nn::optim::AdamW optimizer(model->parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  std::mt19937 rng(1);
  auto make_batch = [&](Tensor& tokens, Tensor& padding, Tensor& labels) {
    std::vector<std::int64_t> t(batch * n), y(batch);
    std::vector<bool> pad(batch * n);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t real = b < batch / 2 ? n : 16;
      y[b] = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t token = rng() % 40 == 0 ? 1 : 2 + rng() % (vocab - 2);
        t[b * n + i] = token;
        pad[b * n + i] = i >= real;
        if (i < real && token == 1) y[b] = 1;
      }
    }
    tokens = from<std::int64_t>(t, {batch, n});
    padding = from<bool>(pad, {batch, n});
    labels = from<std::int64_t>(y, {batch});
  };
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    Tensor tokens, padding, labels;
    make_batch(tokens, padding, labels);
    Tensor loss = cross_entropy(model->forward(tokens, padding), labels);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 25 == 0) std::printf("step %3d  loss %.4f\n", step, last);
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  if (!(last < 0.6 * first)) return 1;

  // The checkpoint holds the weights (SwiGLU's under "...feed_forward.w1.weight" and so on) and
  // the description; load_model builds the model from the description, the block by its
  // registered name, then loads the weights into it. A program that opens the file registers
  // "swiglu" first, as main does above: an unregistered name is an Error naming the part.
  model->eval();
  nn::save_model(path, *model, description);
  const nn::LoadedModel loaded = nn::load_model(path);
  std::filesystem::remove(path);
  auto reopened = loaded.as<nn::SequenceClassifier>();
  const bool found =
      std::dynamic_pointer_cast<SwiGLU>(reopened->body->encoder->layer(0)->feed_forward) != nullptr;
  Tensor tokens, padding, labels;
  make_batch(tokens, padding, labels);
  const bool same = reopened->forward(tokens, padding).to_vector<float>() ==
                    model->forward(tokens, padding).to_vector<float>();
  std::printf("reopened with SwiGLU: %s; its outputs are %s\n", found ? "yes" : "no",
              same ? "the same" : "different");
  return found && same ? 0 : 1;
}
