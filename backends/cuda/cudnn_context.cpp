// The cuDNN helpers of cudnn_context.h: data types, scaling factors, NCHW descriptors of
// [B, C, L] tensors, workspaces and the convolution algorithm cache.
#include "backends/cuda/cudnn_context.h"

#include <climits>
#include <map>
#include <mutex>

namespace tinyformer::cuda {

cudnnDataType_t cudnn_dtype(DType dtype, const char* op) {
  switch (dtype) {
    case DType::float32:
      return CUDNN_DATA_FLOAT;
    case DType::float64:
      return CUDNN_DATA_DOUBLE;
    case DType::bfloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      fail(op, ": expected float32, float64 or bfloat16, got ", dtype);
  }
}

const void* cudnn_one(DType dtype) {
  static const float one_f = 1.0f;
  static const double one_d = 1.0;
  return dtype == DType::float64 ? static_cast<const void*>(&one_d) : &one_f;
}

const void* cudnn_zero(DType dtype) {
  static const float zero_f = 0.0f;
  static const double zero_d = 0.0;
  return dtype == DType::float64 ? static_cast<const void*>(&zero_d) : &zero_f;
}

void describe_ncw(const TensorDescriptor& desc, DType dtype, std::int64_t n, std::int64_t c,
                  std::int64_t w, const char* op) {
  TF_CHECK(n <= INT_MAX && c <= INT_MAX && w <= INT_MAX && n * c * w <= INT_MAX, op,
           ": cuDNN indexes tensors of at most ", INT_MAX, " elements, got [", n, ", ", c, ", ", w,
           "]");
  TF_CUDNN_CHECK(op, cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW,
                                                cudnn_dtype(dtype, op), static_cast<int>(n),
                                                static_cast<int>(c), 1, static_cast<int>(w)));
}

Tensor cudnn_workspace(std::size_t bytes, Device device) {
  if (bytes == 0) return {};
  // int64 elements: 8-byte granules, and at least the 8-byte alignment cuDNN expects.
  const auto granules = static_cast<std::int64_t>((bytes + 7) / 8);
  return empty({granules}, {.dtype = DType::int64, .device = device});
}

ConvAlgorithm cached_conv_algorithm(const std::vector<std::int64_t>& key,
                                    const std::function<ConvAlgorithm()>& pick) {
  static std::mutex mutex;
  static std::map<std::vector<std::int64_t>, ConvAlgorithm> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  // Picked outside the lock: the query calls into cuDNN, and two threads racing on one new
  // shape at worst both ask and store the same answer.
  const ConvAlgorithm chosen = pick();
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, chosen);
  return chosen;
}

}  // namespace tinyformer::cuda
