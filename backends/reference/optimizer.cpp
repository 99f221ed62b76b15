// One Adam or AdamW step, in place, element by element in double.
//   AdamW (decoupled): p = p (1 - lr weight_decay);   Adam: g = g + weight_decay p
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
//   p = p - lr / bias_correction1 * m / (sqrt(v) / sqrt(bias_correction2) + eps)
// param, grad, exp_avg (m), exp_avg_sq (v): one shape and dtype, contiguous.
// sum_squares: the sum of x's squares, element by element in double, in order.
#include <cmath>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                  const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                                  double eps, double weight_decay, bool decoupled,
                                  double bias_correction1, double bias_correction2) {
  check_adamw_step_args(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
                        bias_correction1, bias_correction2, *this);
  for (std::int64_t i = 0; i < param.numel(); ++i) {
    double p = get(param, i), g = get(grad, i), m = get(exp_avg, i), v = get(exp_avg_sq, i);
    if (decoupled) {
      p = p * (1.0 - lr * weight_decay);
    } else if (weight_decay != 0.0) {  // skipped at 0, so an infinite p does not make g NaN
      g = g + weight_decay * p;
    }
    m = beta1 * m + (1.0 - beta1) * g;
    v = beta2 * v + (1.0 - beta2) * g * g;
    p = p - lr / bias_correction1 * m / (std::sqrt(v) / std::sqrt(bias_correction2) + eps);
    set(param, i, p);
    set(exp_avg, i, m);
    set(exp_avg_sq, i, v);
  }
}

void ReferenceBackend::sum_squares(const Tensor& x, const Tensor& out) {
  check_sum_squares_args(x, out, *this);
  double sum = 0.0;
  for (std::int64_t i = 0; i < x.numel(); ++i) sum += get(x, i) * get(x, i);
  set(out, 0, sum);
}

}  // namespace tinyformer::reference
