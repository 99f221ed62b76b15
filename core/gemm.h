// How a strided operand of a batched matrix product reaches a GEMM kernel: as it is (row- or
// column-major with a leading dimension, i.e. a transpose flag) or through a copy. One function,
// gemm_operand, decides this for every GEMM call of every backend (OpenBLAS, oneDNN, cuBLAS), so
// the backends pass and copy exactly the same layouts.
#pragma once

#include <cstdint>

#include "core/shape.h"

namespace tinyformer {

struct GemmOperand {
  bool copy = false;        // no GEMM can read this layout: pack it contiguous first
  bool broadcast = false;   // one matrix serves every batch (batch stride 0, or a batch of 1)
  bool transposed = false;  // column-major: BLAS's Trans flag, oneDNN strides {1, ld}
  std::int64_t ld = 1;      // leading dimension, in elements
  std::int64_t batch_stride = 0;
};

// `shape` and `strides` describe [batch, rows, cols]. A matrix is readable as it is when one of
// its strides is 1 and the other is at least the extent of that dimension (so rows do not
// overlap); sizes of 1 make a stride irrelevant. Batches must not overlap each other either
// (oneDNN rejects such layouts), unless the batch stride is 0, which is a broadcast.
GemmOperand gemm_operand(const Shape& shape, const Shape& strides);

}  // namespace tinyformer
