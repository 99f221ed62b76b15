// Reductions over one or more dims (negative dims count from the end), with keepdim.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace tinyformer {

// The sum of a floating tensor has its dtype; of an int64 or bool tensor it is an int64 count
// (sum(labels == predictions)), as in PyTorch.
Tensor sum(const Tensor& x);  // over every element: a 0-dim tensor
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
// Floating tensors only: the mean of int64 or bool is an Error, as in PyTorch (take
// mean(x.to(kFloat32))).
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
// Variance over dims; unbiased divides by (count - 1) as PyTorch's default does.
Tensor var(const Tensor& x, const Shape& dims, bool unbiased = true, bool keepdim = false);
Tensor max(const Tensor& x);  // the largest element: a 0-dim tensor
// Values and int64 indices of the maxima along dim; the first maximum wins ties and receives
// the gradient.
std::pair<Tensor, Tensor> max(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);

}  // namespace tinyformer
