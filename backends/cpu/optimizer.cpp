// CpuBackend::adamw_step: one Adam or AdamW update of a parameter and its two moment buffers, in
// one pass over memory (one read of each tensor, one write of param, exp_avg and exp_avg_sq)
// instead of the dozen temporaries the same formula costs as a chain of elementwise ops.
#include <cmath>
#include <cstdint>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/adam.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

// p, g, m, v: [n] contiguous. L2 picks Adam's coupled weight decay at compile time, so the loop
// body has no branch and vectorizes.
template <typename T, bool L2>
void adam_loop(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamConstants<T>& c) {
  // Four tensors read and three written per element, and a square root: the cost of four
  // streaming elements (parallel.h).
  constexpr std::int64_t kCost = 4;
  parallel_for(
      n,
      [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
        for (std::int64_t i = begin; i < end; ++i) adam_update<L2>(p[i], g[i], m[i], v[i], c);
      },
      1, kCost);
}

}  // namespace

// param, grad, exp_avg, exp_avg_sq: same shape and dtype, contiguous; the first, third and
// fourth are updated in place (see core/ops.def for the formula).
void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                            double eps, double weight_decay, bool decoupled,
                            double bias_correction1, double bias_correction2) {
  check_adamw_step_args(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
                        bias_correction1, bias_correction2, *this);
  if (param.numel() == 0) return;
  dispatch_floating(param.dtype(), "adamw_step", [&](auto tag) {
    using T = decltype(tag);
    const auto c = AdamConstants<T>::make(lr, beta1, beta2, eps, weight_decay, decoupled,
                                          bias_correction1, bias_correction2);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    if (c.coupled_decay()) {
      adam_loop<T, true>(p, g, m, v, param.numel(), c);
    } else {
      adam_loop<T, false>(p, g, m, v, param.numel(), c);
    }
  });
}

}  // namespace tinyformer::cpu
