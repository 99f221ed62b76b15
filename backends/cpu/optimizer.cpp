// CpuBackend::adamw_step: one Adam or AdamW update of a parameter and its two moment buffers, in
// one pass over memory (one read of each tensor, one write of param, exp_avg and exp_avg_sq)
// instead of the dozen temporaries the same formula costs as a chain of elementwise ops.
#include <cmath>
#include <cstdint>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

// The step's scalars in the parameter's dtype, worked out once per call.
template <typename T>
struct AdamConstants {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  T decay;      // AdamW: the parameter's shrink factor 1 - lr * weight_decay (else 1)
  T l2;         // Adam: the weight decay added to the gradient (else unused)
  T step_size;  // lr / bias_correction1
  T sqrt_bias_correction2;
};

// p, g, m, v: [n] contiguous. L2 picks Adam's coupled weight decay at compile time, so the loop
// body has no branch and vectorizes. The arithmetic follows the formula of core/ops.def term by
// term, in the order torch.optim.Adam evaluates it.
template <typename T, bool L2>
void adam_loop(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamConstants<T>& c) {
  parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
    for (std::int64_t i = begin; i < end; ++i) {
      const T param = p[i];
      T grad = g[i];
      if constexpr (L2) grad = grad + param * c.l2;
      const T exp_avg = m[i] * c.beta1 + grad * c.one_minus_beta1;
      const T exp_avg_sq = v[i] * c.beta2 + grad * grad * c.one_minus_beta2;
      const T denom = std::sqrt(exp_avg_sq) / c.sqrt_bias_correction2 + c.eps;
      m[i] = exp_avg;
      v[i] = exp_avg_sq;
      p[i] = param * c.decay - exp_avg / denom * c.step_size;
    }
  });
}

}  // namespace

// param, grad, exp_avg, exp_avg_sq: same shape and dtype, contiguous; the first, third and
// fourth are updated in place (see core/ops.def for the formula).
void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                            double eps, double weight_decay, bool decoupled,
                            double bias_correction1, double bias_correction2) {
  check_adamw_step_args(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
                        bias_correction1, bias_correction2, DeviceType::cpu);
  if (param.numel() == 0) return;
  const bool l2 = !decoupled && weight_decay != 0.0;
  dispatch_floating(param.dtype(), "adamw_step", [&](auto tag) {
    using T = decltype(tag);
    const AdamConstants<T> c{
        .beta1 = static_cast<T>(beta1),
        .one_minus_beta1 = static_cast<T>(1.0 - beta1),
        .beta2 = static_cast<T>(beta2),
        .one_minus_beta2 = static_cast<T>(1.0 - beta2),
        .eps = static_cast<T>(eps),
        .decay = static_cast<T>(decoupled ? 1.0 - lr * weight_decay : 1.0),
        .l2 = static_cast<T>(weight_decay),
        .step_size = static_cast<T>(lr / bias_correction1),
        .sqrt_bias_correction2 = static_cast<T>(std::sqrt(bias_correction2)),
    };
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    if (l2) {
      adam_loop<T, true>(p, g, m, v, param.numel(), c);
    } else {
      adam_loop<T, false>(p, g, m, v, param.numel(), c);
    }
  });
}

}  // namespace tinyformer::cpu
