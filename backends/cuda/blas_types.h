// What the CUDA backend's products (matmul, linear) pass to cuBLAS and cuBLASLt for a dtype, and
// the check that a size fits cuBLAS's int.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "core/dtype.h"

namespace tinyformer::cuda {

// v as cuBLAS's int; Error naming `op` and `what` when it does not fit.
int blas_int(std::int64_t v, const char* op, const char* what);

// The cuBLAS element type of a float64, float32 or bfloat16 operand.
cudaDataType_t cuda_type(DType dtype);

// How a product of `dtype` operands computes: float64 in double, bfloat16 with float32
// accumulation, float32 as matmul_precision() allows (exact, TF32 or bfloat16 inputs).
cublasComputeType_t compute_type(DType dtype);

}  // namespace tinyformer::cuda
