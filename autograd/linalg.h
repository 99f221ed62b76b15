// Matrix products with PyTorch's matmul semantics.
#pragma once

#include "core/tensor.h"

namespace tinyformer {

// 1-D x 1-D: dot product; 2-D x 2-D: matrix product; 1-D operands get a dim prepended
// (left) or appended (right) that is removed afterwards; N-D: batched over the leading dims,
// which broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace tinyformer
