// One Adam/AdamW step of one element, shared by every backend's adamw_step kernel (a CPU loop,
// a GPU kernel), so that all devices do the same arithmetic in the same order: core/ops.def's
// formula term by term, in the order torch.optim.Adam evaluates it.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace tinyformer {

// The step's scalars in the parameter's dtype, worked out once per call on the host.
template <typename T>
struct AdamConstants {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  T decay;      // AdamW: the parameter's shrink factor 1 - lr * weight_decay (else 1)
  T l2;         // Adam: the weight decay added to the gradient (0 for AdamW)
  T step_size;  // lr / bias_correction1
  T sqrt_bias_correction2;

  static AdamConstants make(double lr, double beta1, double beta2, double eps, double weight_decay,
                            bool decoupled, double bias_correction1, double bias_correction2) {
    return {.beta1 = static_cast<T>(beta1),
            .one_minus_beta1 = static_cast<T>(1.0 - beta1),
            .beta2 = static_cast<T>(beta2),
            .one_minus_beta2 = static_cast<T>(1.0 - beta2),
            .eps = static_cast<T>(eps),
            .decay = static_cast<T>(decoupled ? 1.0 - lr * weight_decay : 1.0),
            .l2 = static_cast<T>(decoupled ? 0.0 : weight_decay),
            .step_size = static_cast<T>(lr / bias_correction1),
            .sqrt_bias_correction2 = static_cast<T>(std::sqrt(bias_correction2))};
  }
  // Whether the coupled (Adam) decay applies. It is skipped when 0 rather than added as
  // 0 * param, which would turn an infinite parameter's gradient into NaN.
  bool coupled_decay() const { return l2 != T(0); }
};

// p, m, v updated in place from gradient g. L2 = c.coupled_decay(), fixed at compile time so
// that a loop over elements has no branch and vectorizes.
template <bool L2, typename T>
TF_HOST_DEVICE inline void adam_update(T& p, T g, T& m, T& v, const AdamConstants<T>& c) {
  if constexpr (L2) g = g + p * c.l2;
  m = m * c.beta1 + g * c.one_minus_beta1;
  v = v * c.beta2 + g * g * c.one_minus_beta2;
#if defined(__CUDA_ARCH__)
  const T root = sqrt(v);
#else
  const T root = std::sqrt(v);
#endif
  const T denom = root / c.sqrt_bias_correction2 + c.eps;
  p = p * c.decay - m / denom * c.step_size;
}

}  // namespace tinyformer
