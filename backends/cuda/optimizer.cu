// CudaBackend::adamw_step: the fused Adam/AdamW update, one thread per element (grid-stride),
// reading param, grad and the two moments once and writing param and the moments once: the
// step is memory-bound, so that is all its cost. float32 moves four elements per load when the
// four pointers allow it.
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

}  // namespace tinyformer::cuda
