// Matrix products with PyTorch's matmul semantics.
#pragma once

#include "core/tensor.h"

namespace tinyformer {

// 1-D x 1-D: dot product; 2-D x 2-D: matrix product; 1-D operands get a dim prepended
// (left) or appended (right) that is removed afterwards; N-D: batched over the leading dims,
// which broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);

// matmul whose result lies in memory in the dim order of `like`, a tensor with as many dims as
// the result (its sizes may differ) that is a dense permutation of a contiguous one with its last
// dim innermost. Attention's heads use it: a product laid out like a [B, H, n, d] view of a
// [B, n, H, d] buffer is itself such a view, so merging the heads back into [B, n, H * d] is a
// view too. Any other `like` (undefined, contiguous, sliced, broadcast) gives matmul's contiguous
// result. Differentiable like matmul.
Tensor matmul_like(const Tensor& a, const Tensor& b, const Tensor& like);

}  // namespace tinyformer
