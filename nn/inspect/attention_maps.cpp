// Attention probabilities per layer: every attention layer keeps its P for one forward pass.
#include "nn/inspect/attention_maps.h"

#include "autograd/grad_mode.h"

namespace tinyformer::nn {

namespace {

// Turns keep_attention on for the layers, and off again however the forward pass ends, so that
// an exception leaves no layer keeping the probabilities of later passes.
class KeepAttention {
 public:
  explicit KeepAttention(std::vector<std::shared_ptr<Attention>> layers)
      : layers_(std::move(layers)) {
    for (const auto& a : layers_) a->keep_attention(true);
  }
  ~KeepAttention() {
    for (const auto& a : layers_) a->keep_attention(false);
  }
  KeepAttention(const KeepAttention&) = delete;
  KeepAttention& operator=(const KeepAttention&) = delete;

  std::vector<Tensor> collect() const {
    std::vector<Tensor> out;
    for (const auto& a : layers_) out.push_back(a->last_attention());
    return out;
  }

 private:
  std::vector<std::shared_ptr<Attention>> layers_;
};

// Evaluation mode for the guard's lifetime, then the mode the module was in.
class EvalMode {
 public:
  explicit EvalMode(Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalMode() { module_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  Module& module_;
  bool was_training_;
};

}  // namespace

std::vector<Tensor> encoder_attention(TransformerEncoder& encoder, const Tensor& x,
                                      const Tensor& key_padding_mask) {
  KeepAttention keep(encoder.attention_layers());
  NoGradGuard no_grad;
  encoder.forward(x, key_padding_mask);
  return keep.collect();
}

std::vector<Tensor> attention_maps(TokenEncoder& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask) {
  KeepAttention keep(model.encoder->attention_layers());
  EvalMode eval(model);
  NoGradGuard no_grad;
  model.forward(tokens, key_padding_mask);
  return keep.collect();
}

std::vector<Tensor> attention_maps(MaskedLM& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask) {
  return attention_maps(*model.body, tokens, key_padding_mask);
}

std::vector<Tensor> attention_maps(SequenceClassifier& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask) {
  return attention_maps(*model.body, tokens, key_padding_mask);
}

std::vector<Tensor> attention_maps(CausalLM& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask) {
  TF_CHECK(!key_padding_mask.defined(),
           "attention_maps: a CausalLM takes no key padding mask (its queries see earlier "
           "positions only)");
  KeepAttention keep(model.encoder->attention_layers());
  EvalMode eval(model);
  NoGradGuard no_grad;
  model.forward(tokens);
  return keep.collect();
}

std::vector<Tensor> attention_maps(Module& model, const Tensor& tokens,
                                   const Tensor& key_padding_mask) {
  if (auto* m = dynamic_cast<MaskedLM*>(&model))
    return attention_maps(*m, tokens, key_padding_mask);
  if (auto* m = dynamic_cast<SequenceClassifier*>(&model)) {
    return attention_maps(*m, tokens, key_padding_mask);
  }
  if (auto* m = dynamic_cast<CausalLM*>(&model))
    return attention_maps(*m, tokens, key_padding_mask);
  if (auto* m = dynamic_cast<TokenEncoder*>(&model)) {
    return attention_maps(*m, tokens, key_padding_mask);
  }
  fail("attention_maps: expected a MaskedLM, SequenceClassifier, CausalLM or TokenEncoder, got a ",
       model.type_name());
}

}  // namespace tinyformer::nn
