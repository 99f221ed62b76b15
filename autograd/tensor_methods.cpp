// The differentiable methods declared on Tensor (core/tensor.h): each forwards to its free
// function.
#include "autograd/node.h"
#include "autograd/ops.h"

namespace tinyformer {

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::run_backward(*this, gradient, retain_graph);
}
Tensor Tensor::view(const Shape& s) const {
  return tinyformer::view(*this, s);
}
Tensor Tensor::reshape(const Shape& s) const {
  return tinyformer::reshape(*this, s);
}
Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  return tinyformer::transpose(*this, d0, d1);
}
Tensor Tensor::permute(const Shape& dims) const {
  return tinyformer::permute(*this, dims);
}
Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end,
                     std::int64_t step) const {
  return tinyformer::slice(*this, d, start, end, step);
}
Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  return tinyformer::narrow(*this, d, start, length);
}
Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  return tinyformer::select(*this, d, index);
}
Tensor Tensor::unsqueeze(std::int64_t d) const {
  return tinyformer::unsqueeze(*this, d);
}
Tensor Tensor::squeeze() const {
  return tinyformer::squeeze(*this);
}
Tensor Tensor::squeeze(std::int64_t d) const {
  return tinyformer::squeeze(*this, d);
}
Tensor Tensor::expand(const Shape& s) const {
  return tinyformer::expand(*this, s);
}
Tensor Tensor::flatten(std::int64_t start, std::int64_t end) const {
  return tinyformer::flatten(*this, start, end);
}
Tensor Tensor::contiguous() const {
  return tinyformer::contiguous(*this);
}
Tensor Tensor::clone() const {
  return tinyformer::clone(*this);
}
Tensor Tensor::to(DType dtype) const {
  return tinyformer::to(*this, dtype);
}
Tensor Tensor::to(Device device) const {
  return tinyformer::to(*this, device);
}
Tensor Tensor::sum() const {
  return tinyformer::sum(*this);
}
Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  return tinyformer::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const {
  return tinyformer::mean(*this);
}
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return tinyformer::mean(*this, dims, keepdim);
}
Tensor Tensor::matmul(const Tensor& other) const {
  return tinyformer::matmul(*this, other);
}
Tensor Tensor::exp() const {
  return tinyformer::exp(*this);
}
Tensor Tensor::log() const {
  return tinyformer::log(*this);
}
Tensor Tensor::pow(double exponent) const {
  return tinyformer::pow(*this, exponent);
}
Tensor Tensor::sqrt() const {
  return tinyformer::sqrt(*this);
}
Tensor Tensor::abs() const {
  return tinyformer::abs(*this);
}

}  // namespace tinyformer
