// Linear and the position-wise feed-forward block built from two of them.
#pragma once

#include <memory>

#include "autograd/elementwise.h"
#include "nn/block_parts.h"
#include "nn/module.h"

namespace tinyformer::nn {

// y = x W^T + b; W: [out, in], b: [out]. x: [..., in] -> [..., out].
// Initialised as PyTorch does: W and b ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;
  // act(x W^T + b) in one fused product (autograd/linear.h): relu, gelu or gelu_tanh applied
  // inside it, as FeedForward does for its first layer.
  Tensor forward(const Tensor& x, Epilogue activation) const;
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  Tensor weight;
  Tensor bias;  // undefined without bias

 private:
  std::int64_t in_, out_;
};

// The activation of a FeedForward: any unary row of core/elementwise.def without a parameter
// (Activation::relu, ::gelu, ::gelu_tanh, ::tanh, ...), so a new row is an activation at once.
using Activation = UnaryOp;
// Throws Error for a row that takes a parameter (pow_scalar).
Tensor activate(const Tensor& x, Activation activation);
const char* activation_name(Activation activation);

// Linear(d_model -> d_ff), activation, dropout, Linear(d_ff -> d_model): the Transformer's
// position-wise feed-forward block. x: [..., d_model].
// The encoder's feed-forward part "standard" (nn/block.h).
class FeedForward : public FeedForwardModule {
 public:
  FeedForward(std::int64_t d_model, std::int64_t d_ff, Activation activation = Activation::gelu,
              double dropout = 0.0);
  Tensor forward(const Tensor& x) const override;
  std::string type_name() const override { return "FeedForward"; }
  std::string extra_repr() const override;

  std::shared_ptr<Linear> fc1, fc2;

 private:
  Activation activation_;
  double dropout_;
};

}  // namespace tinyformer::nn
