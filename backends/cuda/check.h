// Checked CUDA, cuBLAS and cuDNN calls: a failure becomes a tinyformer::Error naming the op and
// carrying the library's own message, e.g. "matmul: cublasGemmStridedBatchedEx failed:
// CUBLAS_STATUS_INVALID_VALUE".
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/error.h"

namespace tinyformer::cuda {

const char* cublas_status_name(cublasStatus_t status);

}  // namespace tinyformer::cuda

// `op` is the tinyformer op being run ("matmul"); the call is named in the message.
#define TF_CUDA_CHECK(op, call)                                                              \
  do {                                                                                       \
    const cudaError_t tf_status_ = (call);                                                   \
    if (tf_status_ != cudaSuccess) {                                                         \
      ::tinyformer::fail(op, ": ", #call, " failed: ", ::cudaGetErrorName(tf_status_), " (", \
                         ::cudaGetErrorString(tf_status_), ")");                             \
    }                                                                                        \
  } while (0)

#define TF_CUBLAS_CHECK(op, call)                                                          \
  do {                                                                                     \
    const cublasStatus_t tf_status_ = (call);                                              \
    if (tf_status_ != CUBLAS_STATUS_SUCCESS) {                                             \
      ::tinyformer::fail(op, ": ", #call,                                                  \
                         " failed: ", ::tinyformer::cuda::cublas_status_name(tf_status_)); \
    }                                                                                      \
  } while (0)

#define TF_CUDNN_CHECK(op, call)                                                           \
  do {                                                                                     \
    const cudnnStatus_t tf_status_ = (call);                                               \
    if (tf_status_ != CUDNN_STATUS_SUCCESS) {                                              \
      ::tinyformer::fail(op, ": ", #call, " failed: ", ::cudnnGetErrorString(tf_status_)); \
    }                                                                                      \
  } while (0)

// After a kernel launch: a bad launch configuration shows up here, not at the next sync.
#define TF_CUDA_CHECK_LAUNCH(op) TF_CUDA_CHECK(op, ::cudaGetLastError())
