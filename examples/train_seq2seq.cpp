// An encoder-decoder Transformer built from MultiHeadAttention's PyTorch-style call: the decoder
// attends to itself causally and to the encoder's output (cross-attention), and learns to
// reverse sequences of digits. Trained with teacher forcing, evaluated by greedy decoding on
// held-out sequences; the program fails unless the decoded sequences come out right.
//
//   train_seq2seq [steps]        (default 300; a few seconds on two cores)
#include <tinyformer/tinyformer.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace tinyformer;

namespace {

constexpr std::int64_t kDigits = 10, kBos = 10, kVocab = 11, kLength = 8;

// One pre-norm layer: self-attention (causal in the decoder), cross-attention to the encoder's
// output (decoder only), and a feed-forward block, each with a residual connection.
class Layer : public nn::Module {
 public:
  Layer(std::int64_t d_model, std::int64_t heads, bool decoder) {
    self_norm = register_module("self_norm", std::make_shared<nn::LayerNorm>(d_model));
    self_attention =
        register_module("self_attention", std::make_shared<nn::MultiHeadAttention>(d_model, heads));
    if (decoder) {
      cross_norm = register_module("cross_norm", std::make_shared<nn::LayerNorm>(d_model));
      cross_attention = register_module("cross_attention",
                                        std::make_shared<nn::MultiHeadAttention>(d_model, heads));
    }
    ff_norm = register_module("ff_norm", std::make_shared<nn::LayerNorm>(d_model));
    ff = register_module("ff", std::make_shared<nn::FeedForward>(d_model, 4 * d_model));
  }

  // x: [B, n, d_model]; memory: the encoder's output [B, m, d_model] (decoder only).
  Tensor forward(Tensor x, const Tensor& memory = {}) {
    const Tensor h = self_norm->forward(x);
    x = x + self_attention
                ->forward(h, h, h, {.need_weights = false, .is_causal = cross_attention != nullptr})
                .first;
    if (cross_attention) {
      const Tensor q = cross_norm->forward(x);
      x = x + cross_attention->forward(q, memory, memory, {.need_weights = false}).first;
    }
    return x + ff->forward(ff_norm->forward(x));
  }

  std::shared_ptr<nn::LayerNorm> self_norm, cross_norm, ff_norm;
  std::shared_ptr<nn::MultiHeadAttention> self_attention, cross_attention;
  std::shared_ptr<nn::FeedForward> ff;
};

class Seq2Seq : public nn::Module {
 public:
  explicit Seq2Seq(std::int64_t d_model = 64, std::int64_t heads = 4) {
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(kVocab, d_model));
    positions = register_module(
        "positions", std::make_shared<nn::SinusoidalPositionalEncoding>(kLength + 1, d_model));
    encoder = register_module("encoder", std::make_shared<Layer>(d_model, heads, false));
    decoder = register_module("decoder", std::make_shared<Layer>(d_model, heads, true));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(d_model));
    head = register_module("head", std::make_shared<nn::Linear>(d_model, kDigits));
  }

  // source: [B, m] digits; target_in: [B, n] (BOS, then the digits so far) -> logits [B, n, 10]
  Tensor forward(const Tensor& source, const Tensor& target_in) {
    const Tensor memory = encoder->forward(positions->forward(embedding->forward(source)));
    const Tensor x = decoder->forward(positions->forward(embedding->forward(target_in)), memory);
    return head->forward(norm->forward(x));
  }

  std::shared_ptr<nn::Embedding> embedding;
  std::shared_ptr<nn::SinusoidalPositionalEncoding> positions;
  std::shared_ptr<Layer> encoder, decoder;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;
};

// A batch of random digit sequences and their reversals: source [B, L], the decoder's input
// [B, L] (BOS, then the reversal without its last digit), and the target [B, L].
struct Batch {
  Tensor source, target_in, target;
};
Batch make_batch(std::mt19937& rng, std::int64_t batch) {
  std::uniform_int_distribution<std::int64_t> digit(0, kDigits - 1);
  std::vector<std::int64_t> src(batch * kLength), in(batch * kLength), out(batch * kLength);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < kLength; ++i) src[b * kLength + i] = digit(rng);
    for (std::int64_t i = 0; i < kLength; ++i) {
      out[b * kLength + i] = src[b * kLength + kLength - 1 - i];
      in[b * kLength + i] = i == 0 ? kBos : out[b * kLength + i - 1];
    }
  }
  return {from(src, {batch, kLength}), from(in, {batch, kLength}), from(out, {batch, kLength})};
}

// Greedy decoding, one digit at a time: the share of sequences reversed without an error.
double sequence_accuracy(Seq2Seq& model, const Batch& data) {
  const NoGradGuard no_grad;
  const std::int64_t batch = data.source.size(0);
  std::vector<std::int64_t> decoded(static_cast<std::size_t>(batch), kBos);  // [B, t]
  std::int64_t t = 1;
  for (; t <= kLength; ++t) {
    const Tensor logits = model.forward(data.source, from(decoded, {batch, t}));
    const std::vector<std::int64_t> next =
        argmax(logits.select(1, t - 1), -1).to_vector<std::int64_t>();
    std::vector<std::int64_t> grown;
    for (std::int64_t b = 0; b < batch; ++b) {
      grown.insert(grown.end(), decoded.begin() + b * t, decoded.begin() + (b + 1) * t);
      grown.push_back(next[static_cast<std::size_t>(b)]);
    }
    decoded = std::move(grown);
  }
  const std::vector<std::int64_t> target = data.target.to_vector<std::int64_t>();
  std::int64_t right = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    bool all = true;
    for (std::int64_t i = 0; i < kLength; ++i) {
      all = all && decoded[b * (kLength + 1) + 1 + i] == target[b * kLength + i];
    }
    right += all ? 1 : 0;
  }
  return static_cast<double>(right) / static_cast<double>(batch);
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  if (steps <= 0) {
    std::fprintf(stderr, "train_seq2seq: expected a positive number of steps, got %s\n", argv[1]);
    return 1;
  }
  manual_seed(0);
  std::mt19937 rng(1);
  Seq2Seq model;
  nn::optim::AdamW optimizer(model.parameters(), {.lr = 2e-3, .weight_decay = 0.0});
  const nn::optim::WarmupCosine schedule(2e-3, /*warmup=*/50, steps);
  const Batch held_out = make_batch(rng, 256);
  for (std::int64_t step = 1; step <= steps; ++step) {
    const Batch b = make_batch(rng, 64);
    optimizer.set_lr(schedule.lr_at(step - 1));
    const Tensor logits = model.forward(b.source, b.target_in);  // [B, L, 10]
    const Tensor loss = cross_entropy(logits.reshape({-1, kDigits}), b.target.reshape({-1}));
    optimizer.zero_grad();
    loss.backward();
    nn::optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    if (step % 100 == 0 || step == steps) {
      std::printf("step %4lld  loss %.4f  held-out sequences reversed %.1f%%\n",
                  static_cast<long long>(step), loss.item<double>(),
                  100.0 * sequence_accuracy(model, held_out));
    }
  }
  const double accuracy = sequence_accuracy(model, held_out);
  if (steps >= 300 && accuracy < 0.95) {
    std::fprintf(stderr, "train_seq2seq: only %.1f%% of the held-out sequences were reversed\n",
                 100.0 * accuracy);
    return 1;
  }
  return 0;
}
