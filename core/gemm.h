// How a strided operand of a batched matrix product reaches a GEMM kernel: as it is (row- or
// column-major with a leading dimension, i.e. a transpose flag) or through a copy. One function,
// gemm_operand, decides this for every GEMM call of every backend (whichever BLAS-like library
// it calls), so the backends pass and copy exactly the same layouts.
#pragma once

#include <cstdint>

#include "core/shape.h"
#include "core/tensor.h"

namespace tinyformer {

struct GemmOperand {
  bool copy = false;        // no GEMM can read this layout: pack it contiguous first
  bool broadcast = false;   // one matrix serves every batch (batch stride 0, or a batch of 1)
  bool transposed = false;  // column-major: BLAS's Trans flag, or strides {1, ld}
  std::int64_t ld = 1;      // leading dimension, in elements
  std::int64_t batch_stride = 0;
};

// `shape` and `strides` describe [batch, rows, cols]. A matrix is readable as it is when one of
// its strides is 1 and the other is at least the extent of that dimension (so rows do not
// overlap); sizes of 1 make a stride irrelevant. Batches must not overlap each other either
// (GEMM libraries reject such layouts), unless the batch stride is 0, which is a broadcast.
GemmOperand gemm_operand(const Shape& shape, const Shape& strides);

// A [batch, rows, cols] operand made ready for a GEMM: `t` itself when gemm_operand can read it,
// else a packed contiguous copy on t's device (one matrix for a broadcast operand). `data`
// points at batch 0; `storage` keeps the copy alive until the GEMM has read it.
struct GemmInput {
  Tensor storage;
  GemmOperand layout;
  const void* data = nullptr;
};
GemmInput gemm_input(const Tensor& t);

// Where a GEMM writes a [batch, M, N] output: row-major matrices (unit stride along N, a leading
// dimension ld >= N) that start batch_stride elements apart, no element written twice. A
// contiguous out has ld = N and batch_stride = M * N; a [B, H, n, dh] view of a [B, n, H, dh]
// buffer, one b at a time, has ld = H * dh and batch_stride = dh. Throws Error for any other
// layout (a column-major, overlapping or broadcast out).
struct GemmOutput {
  std::int64_t ld = 1;
  std::int64_t batch_stride = 0;
};
GemmOutput gemm_output(const Tensor& out);

// Entry i of a [B1, B2, rows, cols] operand or out of a product with two batch dims: the
// [B2, rows, cols] view that a product with one batch dim takes (a B1 of 1, or a stride of 0,
// serves every i).
Tensor matmul_entry(const Tensor& t, std::int64_t i);

// Throws Error unless `out` ([B1, B2, M, N]) is what a product with two batch dims may write:
// each entry a gemm_output, and the entries apart by at least one entry's extent (no element
// written twice).
void check_matmul_out4(const Tensor& out);

}  // namespace tinyformer
