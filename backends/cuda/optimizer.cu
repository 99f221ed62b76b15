// CudaBackend::adamw_step: the fused Adam/AdamW update, one thread per element (grid-stride),
// reading param, grad and the two moments once and writing param and the moments once: the
// step is memory-bound, so that is all its cost. float32 moves four elements per load when the
// four pointers allow it.
#include <cmath>
#include <cstdint>

#include "backends/cuda/strided.cuh"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

// The step's scalars in the parameter's dtype, worked out once per call on the host.
template <typename T>
struct AdamConstants {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  T decay;      // AdamW: the parameter's shrink factor 1 - lr * weight_decay (else 1)
  T l2;         // Adam: the weight decay added to the gradient (0 for AdamW)
  T step_size;  // lr / bias_correction1
  T sqrt_bias_correction2;
};

// One element. The arithmetic follows core/ops.def term by term, in the order of the CPU twin
// (backends/cpu/optimizer.cpp) and of torch.optim.Adam. l2 == 0 skips the coupled decay
// (adding 0 * param would turn an infinite parameter's gradient into NaN).
template <typename T>
__device__ inline void adam_element(T& p, T g, T& m, T& v, const AdamConstants<T>& c) {
  if (c.l2 != T(0)) g = g + p * c.l2;
  m = m * c.beta1 + g * c.one_minus_beta1;
  v = v * c.beta2 + g * g * c.one_minus_beta2;
  const T denom = sqrt(v) / c.sqrt_bias_correction2 + c.eps;
  p = p * c.decay - m / denom * c.step_size;
}

// p, g, m, v: [n] contiguous
template <typename T>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                            T* __restrict__ v, std::int64_t n, AdamConstants<T> c) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    T pi = p[i], mi = m[i], vi = v[i];
    adam_element(pi, g[i], mi, vi, c);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// The same over float4 groups: element 4k..4k+3 of each tensor in one 16-byte load and store.
// n4 = n / 4 groups; the caller runs the scalar kernel on the remaining n % 4 elements.
__global__ void adam_kernel_float4(float4* __restrict__ p, const float4* __restrict__ g,
                                   float4* __restrict__ m, float4* __restrict__ v, std::int64_t n4,
                                   AdamConstants<float> c) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += step) {
    float4 pi = p[i], mi = m[i], vi = v[i];
    const float4 gi = g[i];
    adam_element(pi.x, gi.x, mi.x, vi.x, c);
    adam_element(pi.y, gi.y, mi.y, vi.y, c);
    adam_element(pi.z, gi.z, mi.z, vi.z, c);
    adam_element(pi.w, gi.w, mi.w, vi.w, c);
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
                        bias_correction1, bias_correction2, DeviceType::cuda);
  const std::int64_t n = param.numel();
  if (n == 0) return;

  dispatch<float, double>(param.dtype(), "adamw_step", [&](auto tag) {
    using T = decltype(tag);
    const AdamConstants<T> c{
        .beta1 = static_cast<T>(beta1),
        .one_minus_beta1 = static_cast<T>(1.0 - beta1),
        .beta2 = static_cast<T>(beta2),
        .one_minus_beta2 = static_cast<T>(1.0 - beta2),
        .eps = static_cast<T>(eps),
        .decay = static_cast<T>(decoupled ? 1.0 - lr * weight_decay : 1.0),
        .l2 = static_cast<T>(decoupled ? 0.0 : weight_decay),
        .step_size = static_cast<T>(lr / bias_correction1),
        .sqrt_bias_correction2 = static_cast<T>(std::sqrt(bias_correction2)),
    };
    T* p = device_data<T>(param);
    const T* g = device_data<T>(grad);
    T* m = device_data<T>(exp_avg);
    T* v = device_data<T>(exp_avg_sq);
    std::int64_t done = 0;
    if constexpr (std::is_same_v<T, float>) {
      if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v) && n >= 4) {
        const std::int64_t n4 = n / 4;
        adam_kernel_float4<<<grid_for(n4), kBlock, 0, stream()>>>(
            reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g),
            reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v), n4, c);
        TF_CUDA_CHECK_LAUNCH("adamw_step");
        done = n4 * 4;
      }
    }
    if (done < n) {
      const std::int64_t rest = n - done;
      adam_kernel<T><<<grid_for(rest), kBlock, 0, stream()>>>(p + done, g + done, m + done,
                                                              v + done, rest, c);
      TF_CUDA_CHECK_LAUNCH("adamw_step");
    }
  });
}

}  // namespace tinyformer::cuda
