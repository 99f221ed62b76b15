// Small layers: LayerNorm, Dropout, activations, 1-D convolution and pooling.
#pragma once

#include "autograd/elementwise.h"
#include "nn/block_parts.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace tinyformer::nn {

// Normalises the last dim; weight = 1, bias = 0 initially. The encoder's norm part "layer_norm"
// (nn/block.h).
class LayerNorm : public NormModule {
 public:
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) const override;
  // forward(x + residual) in one fused op (add_layer_norm); x and residual have one shape.
  Tensor forward_add(const Tensor& x, const Tensor& residual) const;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  Tensor weight, bias;

 private:
  std::int64_t dim_;
  double eps_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.1);
  Tensor forward(const Tensor& x) const;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override { return "p=" + std::to_string(p_); }

 private:
  double p_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return relu(x); }
  std::string type_name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::none)
      : approximate_(approximate) {}
  Tensor forward(const Tensor& x) const { return gelu(x, approximate_); }
  std::string type_name() const override { return "GELU"; }

 private:
  GeluApproximation approximate_;
};

// x: [B, Cin, L] -> [B, Cout, Lout]; weight [Cout, Cin, K] and bias initialised as PyTorch does
// (U(-1/sqrt(Cin*K), 1/sqrt(Cin*K))).
class Conv1d : public Module {
 public:
  Conv1d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         std::int64_t stride = 1, std::int64_t padding = 0, bool bias = true);
  Tensor forward(const Tensor& x) const;
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;

  Tensor weight, bias;

 private:
  std::int64_t stride_, padding_;
};

class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(std::int64_t kernel, std::int64_t stride = 0)
      : kernel_(kernel), stride_(stride) {}
  Tensor forward(const Tensor& x) const;
  std::string type_name() const override { return "AvgPool1d"; }

 private:
  std::int64_t kernel_, stride_;
};

class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(std::int64_t kernel, std::int64_t stride = 0)
      : kernel_(kernel), stride_(stride) {}
  Tensor forward(const Tensor& x) const;
  std::string type_name() const override { return "MaxPool1d"; }

 private:
  std::int64_t kernel_, stride_;
};

}  // namespace tinyformer::nn
