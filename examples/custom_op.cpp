// Adding a differentiable op: a custom autograd::Function with its own forward and backward,
// checked by gradcheck, then used inside a layer of a model. The op is softplus(x) =
// log(1 + exp(x)), whose derivative is sigmoid(x); the layer is a feed-forward block with softplus
// as its activation, registered by name. The classifier trains on a toy task, is saved with its
// model description and reopened with nn::load_model; the program fails unless the checks pass,
// the loss falls and the reopened model gives the same outputs bit for bit.
#include <tinyformer/tinyformer.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

using namespace tinyformer;

struct Softplus : autograd::Function {
  Tensor x;  // saved for backward

  Tensor forward(const std::vector<Tensor>& inputs) override {
    x = inputs[0];
    // log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)), which never overflows.
    return relu(x) + log(1.0 + exp(-abs(x)));
  }
  std::vector<Tensor> backward(const Tensor& grad) override { return {grad * sigmoid(x)}; }
  std::string name() const override { return "Softplus"; }
};

Tensor softplus(const Tensor& x) {
  return autograd::apply(std::make_shared<Softplus>(), {x});
}

// The op inside a layer: out = W2 softplus(W1 x). x: [..., d_model] -> [..., d_model]
class SoftplusFeedForward : public nn::FeedForwardModule {
 public:
  SoftplusFeedForward(std::int64_t d_model, std::int64_t d_hidden) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(d_model, d_hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(d_hidden, d_model));
  }
  Tensor forward(const Tensor& x) const override { return fc2->forward(softplus(fc1->forward(x))); }
  std::string type_name() const override { return "SoftplusFeedForward"; }

  std::shared_ptr<nn::Linear> fc1, fc2;
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
  const std::string path = argc > 1 ? argv[1] : "custom_op.safetensors";
  manual_seed(0);
  // The op's backward against central finite differences, in float64.
  Tensor x = randn({3, 4}, {.dtype = kFloat64, .requires_grad = true});
  const bool op_ok = gradcheck([](const std::vector<Tensor>& in) { return softplus(in[0]); }, {x});
  std::printf("gradcheck of Softplus: %s\n", op_ok ? "passed" : "failed");

  Tensor y = softplus(from<float>({-30.0f, 0.0f, 30.0f}, {3}));
  std::printf("softplus([-30, 0, 30]) = ");
  for (float v : y.to_vector<float>()) std::printf("%g ", v);
  std::printf("\n");

  // The layer's gradients too, for its input and every parameter (gradcheck perturbs them in
  // place, so this layer is used for the check only).
  SoftplusFeedForward layer(4, 6);
  layer.to(kFloat64);
  std::vector<Tensor> inputs = {randn({2, 3, 4}, {.dtype = kFloat64, .requires_grad = true})};
  for (const Tensor& p : layer.parameters()) inputs.push_back(p);
  const bool layer_ok =
      gradcheck([&](const std::vector<Tensor>& in) { return layer.forward(in[0]); }, inputs);
  std::printf("gradcheck of SoftplusFeedForward: %s\n", layer_ok ? "passed" : "failed");
  if (!op_ok || !layer_ok) return 1;

  // The layer as the feed-forward block of every encoder layer, by name.
  nn::register_feed_forward("softplus", [](const nn::BlockPartSpec& spec) {
    return std::make_shared<SoftplusFeedForward>(spec.config.d_model, spec.config.d_ff);
  });
  const std::int64_t vocab = 12, n = 16, batch = 32;
  const nn::EncoderConfig config{.layers = 2,
                                 .d_model = 32,
                                 .heads = 4,
                                 .d_ff = 64,
                                 .max_seq_len = n,
                                 .dropout = 0.0,
                                 .feed_forward = "softplus"};
  const nn::ModelDescription description{.kind = nn::ModelKind::sequence_classifier,
                                         .encoder = config,
                                         .vocabulary = {.size = vocab, .tokenizer = "toy"},
                                         .classes = 2};
  auto model = nn::make_model<nn::SequenceClassifier>(description);

  nn::optim::AdamW optimizer(model->parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  std::mt19937 rng(1);
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    const Batch data = make_batch(rng, batch, n, vocab);
    Tensor loss = cross_entropy(model->forward(data.tokens, data.padding), data.labels);
    optimizer.zero_grad();
    loss.backward();  // through Softplus::backward in every layer
    optimizer.step();
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 10 == 0) std::printf("step %3d  loss %.4f\n", step, last);
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  if (!(last < 0.6 * first)) return 1;

  // The op has no name of its own in the file: the layer that calls it does ("softplus"), and
  // load_model rebuilds that layer through the registry, then loads its weights.
  model->eval();
  nn::save_model(path, *model, description);
  const nn::LoadedModel loaded = nn::load_model(path);
  std::filesystem::remove(path);
  const Batch data = make_batch(rng, batch, n, vocab);
  const bool same =
      loaded.as<nn::SequenceClassifier>()->forward(data.tokens, data.padding).to_vector<float>() ==
      model->forward(data.tokens, data.padding).to_vector<float>();
  std::printf("the reopened model's outputs are %s\n", same ? "the same" : "different");
  return same ? 0 : 1;
}
