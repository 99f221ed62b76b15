// Linear layers and the feed-forward block.
#include "nn/linear.h"

#include <cmath>
#include <optional>

#include "autograd/ops.h"
#include "core/unary_math.h"
#include "nn/init.h"

namespace tinyformer::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool with_bias)
    : in_(in_features), out_(out_features) {
  TF_CHECK(in_features > 0 && out_features > 0,
           "Linear: expected positive sizes, got in=", in_features, ", out=", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    bias = register_parameter("bias", empty({out_features}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  return forward(x, Epilogue::none);
}

// One fused call (autograd/linear.h): the [rows, in] x [in, out] product with the bias (and the
// activation) applied inside it; the weight is read transposed where it lies, not copied.
Tensor Linear::forward(const Tensor& x, Epilogue activation) const {
  TF_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_, "Linear: expected input [..., ", in_,
           "], got ", x.defined() ? shape_str(x.shape()) : "an undefined Tensor");
  return linear(x, weight, bias, activation);
}

std::string Linear::extra_repr() const {
  return "in=" + std::to_string(in_) + ", out=" + std::to_string(out_) +
         (bias.defined() ? "" : ", bias=false");
}

Tensor activate(const Tensor& x, Activation activation) {
  TF_CHECK(!takes_alpha(activation), "activate: ", unary_name(activation),
           " takes a parameter and is not an activation");
  return unary(activation, x);
}

const char* activation_name(Activation activation) {
  return unary_name(activation);
}

FeedForward::FeedForward(std::int64_t d_model, std::int64_t d_ff, Activation activation,
                         double dropout)
    : activation_(activation), dropout_(dropout) {
  TF_CHECK(dropout >= 0 && dropout <= 1, "FeedForward: expected dropout in [0, 1], got ", dropout);
  TF_CHECK(!takes_alpha(activation), "FeedForward: ", unary_name(activation),
           " takes a parameter and is not an activation");
  fc1 = register_module("fc1", std::make_shared<Linear>(d_model, d_ff));
  fc2 = register_module("fc2", std::make_shared<Linear>(d_ff, d_model));
}

Tensor FeedForward::forward(const Tensor& x) const {
  // relu, gelu and gelu_tanh run inside fc1's product; other activations after it.
  const std::optional<Epilogue> fused = epilogue_of(activation_);
  Tensor h = fused ? fc1->forward(x, *fused) : activate(fc1->forward(x), activation_);
  return fc2->forward(dropout(h, dropout_, is_training()));
}

std::string FeedForward::extra_repr() const {
  return std::string("activation=") + activation_name(activation_) +
         ", dropout=" + std::to_string(dropout_).substr(0, 4);
}

}  // namespace tinyformer::nn
