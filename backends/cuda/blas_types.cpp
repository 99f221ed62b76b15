// cuBLAS types and sizes for the CUDA backend's products (backends/cuda/blas_types.h).
#include "backends/cuda/blas_types.h"

#include <climits>

#include "core/backend.h"
#include "core/error.h"

namespace tinyformer::cuda {

int blas_int(std::int64_t v, const char* op, const char* what) {
  TF_CHECK(v <= INT_MAX, op, ": ", what, " ", v, " exceeds what cuBLAS can index (", INT_MAX, ")");
  return static_cast<int>(v);
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::float64:
      return CUDA_R_64F;
    case DType::bfloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

cublasComputeType_t compute_type(DType dtype) {
  if (dtype == DType::float64) return CUBLAS_COMPUTE_64F;
  if (dtype == DType::bfloat16) return CUBLAS_COMPUTE_32F;
  switch (matmul_precision()) {
    case MatmulPrecision::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MatmulPrecision::bf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case MatmulPrecision::exact:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

}  // namespace tinyformer::cuda
