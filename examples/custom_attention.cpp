// Adding an attention to the encoder: talking-heads attention registered by name and used in
// every layer of a classifier; trained on a toy task with padded sequences, saved with its model
// description and reopened with nn::load_model, which finds the attention again in the registry.
// The program fails unless the loss falls and the reopened model gives the same outputs bit for
// bit.
#include <tinyformer/tinyformer.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace tinyformer;

// Talking-heads attention (Shazeer et al. 2020, "Talking-Heads Attention"): multi-head attention
// whose heads exchange information through two learned [H, H] mixes, one of the scores before
// the softmax and one of the probabilities after it:
//   scores = pre_mix (q k^T / sqrt(d_head)),  probs = post_mix softmax(scores),  out = probs v
// where a mix forms each head's [n, n] matrix as a weighted sum of all heads' matrices.
// x: [B, n, d_model] -> [B, n, d_model]
class TalkingHeadsAttention : public nn::Attention {
 public:
  TalkingHeadsAttention(std::int64_t d_model, std::int64_t heads)
      : nn::Attention(d_model, heads, /*dropout=*/0.0, /*fused=*/false) {
    // Both mixes start as the identity: the layer starts as standard multi-head attention.
    std::vector<float> identity(heads * heads, 0.0f);
    for (std::int64_t h = 0; h < heads; ++h) identity[h * heads + h] = 1.0f;
    pre_mix = register_parameter("pre_mix", from<float>(identity, {heads, heads}));
    post_mix = register_parameter("post_mix", from<float>(identity, {heads, heads}));
  }

  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {},
                 bool causal = false) override {
    check_input(x, key_padding_mask, "TalkingHeadsAttention");
    const std::int64_t batch = x.size(0), n = x.size(1);
    Tensor query = split_heads(q_proj->forward(x));  // [B, H, n, d_head]
    Tensor key = split_heads(k_proj->forward(x));
    Tensor value = split_heads(v_proj->forward(x));
    Tensor scores = matmul(query, key.transpose(2, 3)) / std::sqrt(double(head_dim()));
    scores = mix_heads(pre_mix, scores);  // [B, H, n, n]
    // Excluded keys after the first mix, so that no head's scores carry them back in; their
    // probabilities are then 0 in every head, and the second mix keeps them 0.
    const double excluded = -std::numeric_limits<double>::infinity();
    if (key_padding_mask.defined()) {
      scores = masked_fill(scores, key_padding_mask.view({batch, 1, 1, n}), excluded);
    }
    if (causal) scores = masked_fill(scores, future_mask(n, n, x.device()), excluded);
    Tensor probs = mix_heads(post_mix, softmax(scores, -1));
    if (keep_) last_attention_ = probs.detach();  // for nn::attention_maps and keep_attention
    return out_proj->forward(merge_heads(matmul(probs, value)));
  }
  std::string type_name() const override { return "TalkingHeadsAttention"; }

  Tensor pre_mix, post_mix;  // [H, H]: row h holds the weights of head h's mix

 private:
  // mix: [H, H], t: [B, H, n, m] -> [B, H, n, m], out[b, h] = sum_g mix[h, g] t[b, g]: one
  // product of mix with each batch's heads as the rows of an [H, n * m] matrix.
  static Tensor mix_heads(const Tensor& mix, const Tensor& t) {
    return matmul(mix, t.reshape({t.size(0), t.size(1), -1})).view(t.shape());
  }
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
  const std::string path = argc > 1 ? argv[1] : "custom_attention.safetensors";
  // A factory gets the layer's spec. This attention has no compressed keys, so it serves full
  // attention layers only, and says so for a Linformer layer.
  nn::register_attention("talking_heads", [](const nn::AttentionSpec& spec) {
    if (spec.spec.attention != nn::AttentionKind::full) {
      throw Error("talking_heads: an attention for full-attention layers (layer " +
                  std::to_string(spec.layer) + " is a Linformer layer)");
    }
    return std::make_shared<TalkingHeadsAttention>(spec.config.d_model, spec.config.heads);
  });

  const std::int64_t vocab = 12, n = 16, batch = 32;
  // The model as a description: plain data, which a checkpoint carries. The config names the
  // attention; a name is all the file keeps of it.
  const nn::EncoderConfig config{.layers = 2,
                                 .d_model = 32,
                                 .heads = 4,
                                 .d_ff = 64,
                                 .max_seq_len = n,
                                 .dropout = 0.0,
                                 .attention_module = "talking_heads",
                                 .attention = nn::AttentionKind::full};
  const nn::ModelDescription description{.kind = nn::ModelKind::sequence_classifier,
                                         .encoder = config,
                                         .vocabulary = {.size = vocab, .tokenizer = "toy"},
                                         .classes = 2};
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

  // The checkpoint holds the weights (the mixes under "...attention.pre_mix" and so on) and the
  // description; load_model builds the model from the description, the attention by its
  // registered name, then loads the weights into it. A program that opens the file registers
  // "talking_heads" first, as main does above.
  model->eval();
  nn::save_model(path, *model, description);
  const nn::LoadedModel loaded = nn::load_model(path);
  std::filesystem::remove(path);
  auto reopened = loaded.as<nn::SequenceClassifier>();
  const bool found = std::dynamic_pointer_cast<TalkingHeadsAttention>(
                         reopened->body->encoder->layer(1)->attention) != nullptr;
  const Batch data = make_batch(rng, batch, n, vocab);
  const bool same = reopened->forward(data.tokens, data.padding).to_vector<float>() ==
                    model->forward(data.tokens, data.padding).to_vector<float>();
  std::printf("reopened with %s; its outputs are %s\n",
              found ? "TalkingHeadsAttention" : "another attention",
              same ? "the same" : "different");
  return found && same ? 0 : 1;
}
