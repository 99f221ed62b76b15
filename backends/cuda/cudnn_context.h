// What conv.cpp and pool.cpp share on cuDNN: descriptors as owning C++ objects, a [B, C, L]
// tensor described as cuDNN's NCHW with H = 1, the scaling factors cuDNN reads, workspaces from
// the caching allocator, and the per-shape cache of convolution algorithm choices.
//
// cuDNN 9 still ships the legacy descriptor API (cudnnConvolutionForward, cudnnPoolingForward,
// ...) next to its graph API; it is marked deprecated but compiles without warnings unless
// CUDNN_WARN_DEPRECATED is defined. A 1-D problem is its 2-D one with a height of 1.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "backends/cuda/check.h"
#include "core/tensor.h"

namespace tinyformer::cuda {

// A cuDNN descriptor created in the constructor and destroyed with the object.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDescriptor {
 public:
  explicit CudnnDescriptor(const char* op) { TF_CUDNN_CHECK(op, Create(&desc_)); }
  ~CudnnDescriptor() {
    if (desc_ != nullptr) Destroy(desc_);
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  T get() const { return desc_; }

 private:
  T desc_ = nullptr;
};

using TensorDescriptor = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                         cudnnDestroyTensorDescriptor>;
using FilterDescriptor = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                         cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                    cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                          cudnnDestroyPoolingDescriptor>;

// CUDNN_DATA_FLOAT, _DOUBLE or _BFLOAT16; throws Error naming `op` for any other dtype.
cudnnDataType_t cudnn_dtype(DType dtype, const char* op);

// Pointers to 1 and 0 of the type cuDNN reads its alpha and beta scaling factors as: double for
// float64 data, float for float32 and bfloat16.
const void* cudnn_one(DType dtype);
const void* cudnn_zero(DType dtype);

// Describes a contiguous [n, c, w] tensor as NCHW [n, c, 1, w]. cuDNN's legacy API indexes with
// int: throws Error naming `op` when a size or the element count does not fit.
void describe_ncw(const TensorDescriptor& desc, DType dtype, std::int64_t n, std::int64_t c,
                  std::int64_t w, const char* op);

// An uninitialised device buffer of at least `bytes` bytes from the caching allocator on
// `device` (undefined when bytes is 0); keep it alive until the library call is queued.
Tensor cudnn_workspace(std::size_t bytes, Device device);

// A convolution algorithm picked for one problem: which one, under which math type, and the
// workspace it needs.
struct ConvAlgorithm {
  int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t value
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t workspace = 0;
};

// The algorithm cached under `key` (the direction, dtype, shape, math mode and device of a
// problem), or pick() run once to choose it. Thread-safe; choices are never evicted (a model
// has few distinct convolution shapes).
ConvAlgorithm cached_conv_algorithm(const std::vector<std::int64_t>& key,
                                    const std::function<ConvAlgorithm()>& pick);

// Index of the first usable entry of cuDNN's heuristic ranking (results of
// cudnnGetConvolution*Algorithm_v7, best first): it succeeded, its math type is allowed, and,
// among those, a deterministic algorithm is preferred so that gradients repeat bit for bit run
// to run. `fma_only` allows only CUDNN_FMA_MATH (float32 in exact mode: no TF32 rounding).
// Throws Error naming `op` when no entry is usable.
template <typename Perf>
int choose_algorithm(const Perf* results, int count, bool fma_only, const char* op) {
  auto usable = [&](const Perf& p) {
    return p.status == CUDNN_STATUS_SUCCESS && (!fma_only || p.mathType == CUDNN_FMA_MATH);
  };
  for (int i = 0; i < count; ++i) {
    if (usable(results[i]) && results[i].determinism == CUDNN_DETERMINISTIC) return i;
  }
  for (int i = 0; i < count; ++i) {
    if (usable(results[i])) return i;
  }
  fail(op, ": cuDNN offers no algorithm for this problem (", count, " candidates, none usable",
       fma_only ? " without tensor-core rounding" : "", ")");
}

}  // namespace tinyformer::cuda
