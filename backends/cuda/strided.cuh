// What every kernel file of the CUDA backend shares: the C++ type of each dtype on the device,
// float accumulation for bfloat16, a dtype dispatcher, strided element addressing, launch sizes
// and warp and block reductions. Kernels read tensors of any strides through StridedIndex (a view's
// strides, not a copy).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tinyformer::cuda {

using bf16 = __nv_bfloat16;

// --- types ---

// The arithmetic type of a storage type: bfloat16 values are computed on (and accumulated in)
// float32; float32 and float64 compute in themselves.
template <typename T>
struct AccType {
  using type = T;
};
template <>
struct AccType<bf16> {
  using type = float;
};
template <typename T>
using acc_t = typename AccType<T>::type;

template <typename T>
__host__ __device__ inline acc_t<T> to_acc(T v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

// Rounds to nearest even when T is bfloat16.
template <typename T, typename A>
__host__ __device__ inline T from_acc(A v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
constexpr DType device_dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::float32;
  if constexpr (std::is_same_v<T, double>) return DType::float64;
  if constexpr (std::is_same_v<T, bf16>) return DType::bfloat16;
  if constexpr (std::is_same_v<T, std::int64_t>) return DType::int64;
  if constexpr (std::is_same_v<T, bool>) return DType::boolean;
}

// The element pointer of t (its storage plus offset), typed; t must hold T.
template <typename T>
T* device_data(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// Calls f(T{}) for the T among Ts whose dtype is `dtype`; throws Error for any other dtype:
//   dispatch<float, bf16>(x.dtype(), "softmax", [&](auto tag) { using T = decltype(tag); ... });
template <typename... Ts, typename F>
void dispatch(DType dtype, const char* op, F&& f) {
  const bool found = ((device_dtype_of<Ts>() == dtype ? (f(Ts{}), true) : false) || ...);
  if (!found) fail(op, ": the CUDA backend does not support dtype ", dtype, " here");
}
template <typename F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  dispatch<float, double, bf16>(dtype, op, static_cast<F&&>(f));
}

// --- strided addressing ---

// The shape and strides of a tensor view, passed to kernels by value. offset(i) maps the
// row-major linear index i of the view to an element offset from the view's data pointer.
// Dims of size 1 are dropped and dims that are contiguous in memory merged on the host, so most
// views need one or two divisions per element.
constexpr int kMaxDims = 8;

struct StridedIndex {
  int dims = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};

  __device__ std::int64_t offset(std::int64_t i) const {
    std::int64_t off = 0;
    for (int d = dims - 1; d >= 0; --d) {
      const std::int64_t size = sizes[d];
      const std::int64_t q = i / size;
      off += (i - q * size) * strides[d];
      i = q;
    }
    return off;
  }
};

// The addressing of the view `t`, or of a view with these sizes and strides, after core's
// coalesce() (core/strided_layout.h). Throws Error when the view has more than kMaxDims dims
// after merging.
StridedIndex strided_index(const Tensor& t, const char* op);
StridedIndex strided_index(const Shape& sizes, const Shape& strides, const char* op);

// True when every tensor is contiguous: kernels then take the plain i -> i path.
bool all_contiguous(std::initializer_list<const Tensor*> tensors);

// --- launch sizes ---

constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, not one per element.
inline unsigned grid_for(std::int64_t n, int block = kBlock) {
  const std::int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

// --- warp and block reductions (float or double accumulators) ---

template <typename A>
__device__ inline A warp_sum(A v) {
  for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
  return v;
}
template <typename A>
__device__ inline A warp_max(A v) {
  for (int s = 16; s > 0; s >>= 1) {
    const A o = __shfl_xor_sync(0xffffffffu, v, s);
    v = o > v ? o : v;
  }
  return v;
}

// The sum of v over the block, returned to every thread. `scratch` holds 32 values of A in shared
// memory; blockDim.x must be a multiple of 32.
template <typename A>
__device__ inline A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? scratch[lane] : A(0);
  return warp_sum(v);
}

// The max of v over the block, returned to every thread, with the CPU's comparison (a NaN never
// wins; it poisons the row through the sum instead). `scratch` holds 32 values in shared memory;
// blockDim.x must be a multiple of 32.
template <typename A>
__device__ inline A block_max(A v, A* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? scratch[lane] : -std::numeric_limits<A>::infinity();
  return warp_max(v);
}

// --- row kernels (softmax, layer_norm): a warp per row up to kWarpRowMax columns, else a block ---

constexpr int kWarpRowMax = 1024;  // the longest row one warp holds in registers
constexpr int kRowsPerBlock = 4;   // warps (rows) per block of the warp-per-row kernels
constexpr int kRowBlock = 512;     // threads per block of the block-per-row kernels

// Calls f(std::integral_constant<int, K>{}) for the smallest K in {1, 2, 4, ..., 32} with
// 32 K >= cols: the registers per lane a warp-per-row kernel needs. cols <= kWarpRowMax.
template <typename F>
void with_items(std::int64_t cols, F&& f) {
  if (cols <= 32) {
    f(std::integral_constant<int, 1>{});
  } else if (cols <= 64) {
    f(std::integral_constant<int, 2>{});
  } else if (cols <= 128) {
    f(std::integral_constant<int, 4>{});
  } else if (cols <= 256) {
    f(std::integral_constant<int, 8>{});
  } else if (cols <= 512) {
    f(std::integral_constant<int, 16>{});
  } else {
    f(std::integral_constant<int, 32>{});
  }
}

}  // namespace tinyformer::cuda
