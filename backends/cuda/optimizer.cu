// CudaBackend::adamw_step: the fused Adam/AdamW update, one thread per element (grid-stride),
// reading param, grad and the two moments once and writing param and the moments once: the
// step is memory-bound, so that is all its cost. float32 moves four elements per load when the
// four pointers allow it.
// CudaBackend::sum_squares: a gradient's sum of squares in float64, in two kernels whose order of
// summation depends on the size alone: each block sums a fixed chunk into a partial sum, then one
// block sums the partial sums.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/strided.cuh"
#include "core/adam.h"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

// p, g, m, v: [n] contiguous. L2: c.coupled_decay(), fixed at compile time as on the CPU.
template <bool L2, typename T>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                            T* __restrict__ v, std::int64_t n, AdamConstants<T> c) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    T pi = p[i], mi = m[i], vi = v[i];
    adam_update<L2>(pi, g[i], mi, vi, c);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// The same over float4 groups: element 4k..4k+3 of each tensor in one 16-byte load and store.
// n4 = n / 4 groups; the caller runs the scalar kernel on the remaining n % 4 elements.
template <bool L2>
__global__ void adam_kernel_float4(float4* __restrict__ p, const float4* __restrict__ g,
                                   float4* __restrict__ m, float4* __restrict__ v, std::int64_t n4,
                                   AdamConstants<float> c) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += step) {
    float4 pi = p[i], mi = m[i], vi = v[i];
    const float4 gi = g[i];
    adam_update<L2>(pi.x, gi.x, mi.x, vi.x, c);
    adam_update<L2>(pi.y, gi.y, mi.y, vi.y, c);
    adam_update<L2>(pi.z, gi.z, mi.z, vi.z, c);
    adam_update<L2>(pi.w, gi.w, mi.w, vi.w, c);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// sum_squares: kBlock threads a block; a block's chunk is kSquaresPerThread elements a thread.
constexpr int kSquaresPerThread = 16;
constexpr std::int64_t kSquaresChunk = std::int64_t{kBlock} * kSquaresPerThread;

// The block's kBlock values summed in shared memory by halves: a fixed tree, so a fixed order.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

// partial[b] = the sum of double(x[i])^2 over block b's chunk of x ([n] contiguous); thread t
// takes elements t, t + kBlock, ... of the chunk, so that a warp reads consecutive elements.
template <typename T>
__global__ void squares_kernel(const T* __restrict__ x, std::int64_t n,
                               double* __restrict__ partial) {
  __shared__ double shared[kBlock];
  const std::int64_t start = static_cast<std::int64_t>(blockIdx.x) * kSquaresChunk;
  double acc = 0.0;
  for (int k = 0; k < kSquaresPerThread; ++k) {
    const std::int64_t i = start + k * kBlock + threadIdx.x;
    if (i < n) {
      const auto v = static_cast<double>(x[i]);
      acc += v * v;
    }
  }
  const double sum = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// *out = the sum of partial[0, count), one block: thread t sums t, t + kBlock, ... in order.
__global__ void sum_partials_kernel(const double* __restrict__ partial, std::int64_t count,
                                    double* __restrict__ out) {
  __shared__ double shared[kBlock];
  double acc = 0.0;
  for (std::int64_t i = threadIdx.x; i < count; i += kBlock) acc += partial[i];
  const double sum = block_sum(acc, shared);
  if (threadIdx.x == 0) *out = sum;
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0;
}

}  // namespace

// param, grad, exp_avg, exp_avg_sq: same shape and dtype, contiguous; param, exp_avg and
// exp_avg_sq are updated in place (see core/ops.def for the formula).
void CudaBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                             double eps, double weight_decay, bool decoupled,
                             double bias_correction1, double bias_correction2) {
  check_adamw_step_args(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
                        bias_correction1, bias_correction2, *this);
  const std::int64_t n = param.numel();
  if (n == 0) return;

  dispatch<float, double>(param.dtype(), "adamw_step", [&](auto tag) {
    using T = decltype(tag);
    const auto c = AdamConstants<T>::make(lr, beta1, beta2, eps, weight_decay, decoupled,
                                          bias_correction1, bias_correction2);
    T* p = device_data<T>(param);
    const T* g = device_data<T>(grad);
    T* m = device_data<T>(exp_avg);
    T* v = device_data<T>(exp_avg_sq);
    // The float4 kernel where all four pointers allow 16-byte access, the scalar one for the
    // rest; each with or without the coupled decay.
    const auto launch = [&](auto l2) {
      constexpr bool L2 = decltype(l2)::value;
      std::int64_t done = 0;
      if constexpr (std::is_same_v<T, float>) {
        if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v) && n >= 4) {
          const std::int64_t n4 = n / 4;
          adam_kernel_float4<L2><<<grid_for(n4), kBlock, 0, stream()>>>(
              reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g),
              reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v), n4, c);
          TF_CUDA_CHECK_LAUNCH("adamw_step");
          done = n4 * 4;
        }
      }
      if (done < n) {
        const std::int64_t rest = n - done;
        adam_kernel<L2, T><<<grid_for(rest), kBlock, 0, stream()>>>(p + done, g + done, m + done,
                                                                    v + done, rest, c);
        TF_CUDA_CHECK_LAUNCH("adamw_step");
      }
    };
    if (c.coupled_decay()) {
      launch(std::true_type{});
    } else {
      launch(std::false_type{});
    }
  });
}

// x: [n] contiguous; out: one float64 element (see core/ops.def).
void CudaBackend::sum_squares(const Tensor& x, const Tensor& out) {
  check_sum_squares_args(x, out, *this);
  const std::int64_t n = x.numel();
  const std::int64_t chunks = std::max<std::int64_t>(1, (n + kSquaresChunk - 1) / kSquaresChunk);
  TF_CHECK(chunks <= std::int64_t{2147483647}, "sum_squares: ", n, " elements are too many");
  const Tensor partial = empty({chunks}, {.dtype = DType::float64, .device = x.device()});
  dispatch<float, double>(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    squares_kernel<T><<<static_cast<unsigned>(chunks), kBlock, 0, stream()>>>(
        device_data<const T>(x), n, device_data<double>(partial));
    TF_CUDA_CHECK_LAUNCH("sum_squares");
  });
  sum_partials_kernel<<<1, kBlock, 0, stream()>>>(device_data<const double>(partial), chunks,
                                                  device_data<double>(out));
  TF_CUDA_CHECK_LAUNCH("sum_squares");
}

}  // namespace tinyformer::cuda
