// Small layers.
#include "nn/layers.h"

#include <cmath>

#include "autograd/ops.h"
#include "nn/init.h"

namespace tinyformer::nn {

LayerNorm::LayerNorm(std::int64_t dim, double eps, bool affine) : dim_(dim), eps_(eps) {
  TF_CHECK(dim > 0 && eps > 0, "LayerNorm: expected a positive size and eps, got ", dim, ", ", eps);
  if (affine) {
    weight = register_parameter("weight", ones({dim}));
    bias = register_parameter("bias", zeros({dim}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, {dim_}, weight, bias, eps_);
}

Tensor LayerNorm::forward_add(const Tensor& x, const Tensor& residual) const {
  return add_layer_norm(x, residual, {dim_}, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  return std::to_string(dim_) + (weight.defined() ? "" : ", affine=false");
}

Dropout::Dropout(double p) : p_(p) {
  TF_CHECK(p >= 0 && p <= 1, "Dropout: expected p in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) const {
  return dropout(x, p_, is_training());
}

Conv1d::Conv1d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
               std::int64_t stride, std::int64_t padding, bool with_bias)
    : stride_(stride), padding_(padding) {
  TF_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && stride > 0 && padding >= 0,
           "Conv1d: expected positive channels, kernel and stride and padding >= 0, got in=",
           in_channels, ", out=", out_channels, ", kernel=", kernel_size, ", stride=", stride,
           ", padding=", padding);
  weight = register_parameter("weight", empty({out_channels, in_channels, kernel_size}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    bias = register_parameter("bias", empty({out_channels}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel_size));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv1d::forward(const Tensor& x) const {
  return conv1d(x, weight, bias, stride_, padding_);
}

std::string Conv1d::extra_repr() const {
  return std::to_string(weight.size(1)) + ", " + std::to_string(weight.size(0)) +
         ", kernel=" + std::to_string(weight.size(2)) + ", stride=" + std::to_string(stride_);
}

Tensor AvgPool1d::forward(const Tensor& x) const {
  return avg_pool1d(x, kernel_, stride_);
}
Tensor MaxPool1d::forward(const Tensor& x) const {
  return max_pool1d(x, kernel_, stride_);
}

}  // namespace tinyformer::nn
