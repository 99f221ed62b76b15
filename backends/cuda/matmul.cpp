// CudaBackend::matmul: batched matrix products as one cublasGemmStridedBatchedEx call. A strided
// operand is passed as it is whenever a GEMM can read it (row- or column-major per batch, a
// batch stride of 0 for a broadcast operand); the rule is gemm_operand (core/gemm.h), shared
// with the CPU backend, so both backends copy exactly the same layouts. A product with two batch
// dims is one such call per entry of the first (cuBLAS walks one batch stride).
//
// cuBLAS is column-major and our tensors are row-major. A row-major [M, N] matrix C is the
// column-major [N, M] matrix C^T with the same bytes, and C = A B is C^T = B^T A^T. So cuBLAS
// computes C^T with B in the first operand slot and A in the second: m = N, n = M, k = K, and
// each operand's transpose flag is the opposite of what a row-major BLAS would be told.
//
// dtypes and math: float64 on CUBLAS_COMPUTE_64F; float32 on CUBLAS_COMPUTE_32F in exact mode, or
// rounding its inputs to TF32 or bfloat16 on tensor cores when matmul_precision() allows it;
// bfloat16 inputs and outputs on tensor cores with float32 accumulation.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "backends/cuda/blas_types.h"
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/op_checks.h"

namespace tinyformer::cuda {

// a: [B, M, K], b: [B, K, N] (any strides; a batch stride of 0 broadcasts), out: [B, M, N]
// (row-major matrices at any non-overlapping strides: gemm_output), or [B1, B2, ...] each.
void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_matmul_args(a, b, out, *this);
  if (out.dim() == 4) {
    for (std::int64_t i = 0; i < out.size(0); ++i) {
      matmul(matmul_entry(a, i), matmul_entry(b, i), matmul_entry(out, i));
    }
    return;
  }
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum: every element is 0
    fill(out, 0.0);
    return;
  }
  const GemmInput pa = gemm_input(a), pb = gemm_input(b);
  const GemmOutput c = gemm_output(out);
  // When both operands are broadcast every output matrix is the same: compute one, copy it.
  const std::int64_t runs = pa.layout.broadcast && pb.layout.broadcast ? 1 : batch;

  const DType dtype = out.dtype();
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = dtype == DType::float64;
  // Operands of out's dtype, or bfloat16 operands into a float32 out (mixed precision).
  const cudaDataType_t in_type = cuda_type(a.dtype()), type = cuda_type(dtype);
  // C^T [N, M] (ldc = out's row stride) = op(B) [N, K] * op(A) [K, M]: a row-major operand is its
  // own transpose in column-major terms (no flag); a column-major one needs the T flag.
  TF_CUBLAS_CHECK(
      "matmul",
      cublasGemmStridedBatchedEx(
          cublas(), pb.layout.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
          pa.layout.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, blas_int(n, "matmul", "N"),
          blas_int(m, "matmul", "M"), blas_int(k, "matmul", "K"),
          f64 ? static_cast<const void*>(&one_d) : &one_f, pb.data, in_type,
          blas_int(pb.layout.ld, "matmul", "leading dimension"), pb.layout.batch_stride, pa.data,
          in_type, blas_int(pa.layout.ld, "matmul", "leading dimension"), pa.layout.batch_stride,
          f64 ? static_cast<const void*>(&zero_d) : &zero_f, out.data_ptr(), type,
          blas_int(c.ld, "matmul", "leading dimension"), c.batch_stride,
          blas_int(runs, "matmul", "batch count"), compute_type(a.dtype()), CUBLAS_GEMM_DEFAULT));
  if (runs == 1 && batch > 1) {
    // out[1:] = out[0], read as a stride-0 batch.
    const Tensor rest =
        raw::as_strided(out, {batch - 1, m, n}, out.strides(), out.offset() + out.stride(0));
    copy(raw::as_strided(out, rest.shape(), {0, out.stride(1), out.stride(2)}, out.offset()), rest);
  }
}

}  // namespace tinyformer::cuda
