// Layer normalisation over the last dim, and its backward.
//   forward:  mean[r] = sum_c x[r, c] / C,   var[r] = sum_c (x[r, c] - mean[r])^2 / C,
//             rstd[r] = 1 / sqrt(var[r] + eps),   xhat = (x - mean) rstd,
//             out[r, c] = xhat[r, c] * weight[c] + bias[c]   (weight 1, bias 0 when undefined)
//   add_layer_norm: sum = x + residual, then the forward on sum
//   backward: with gw = grad * weight,
//             grad_x[r, c] = rstd (gw[r, c] - mean_c(gw) - xhat[r, c] mean_c(gw xhat)),
//             grad_weight[c] = sum_r grad[r, c] xhat[r, c],   grad_bias[c] = sum_r grad[r, c]
// x, out, grad, grad_x: [R, C]; weight, bias, grad_weight, grad_bias: [C]; mean, rstd: [R].
#include <cmath>
#include <vector>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  double eps, const Tensor& out, const Tensor& mean,
                                  const Tensor& rstd) {
  check_layer_norm_args(x, weight, bias, eps, out, mean, rstd, *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    double mu = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) mu += at(x, {r, c});
    mu /= static_cast<double>(cols);
    double var = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) var += (at(x, {r, c}) - mu) * (at(x, {r, c}) - mu);
    var /= static_cast<double>(cols);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double w = weight.defined() ? at(weight, {c}) : 1.0;
      const double b = bias.defined() ? at(bias, {c}) : 0.0;
      set_at(out, {r, c}, (at(x, {r, c}) - mu) * inv * w + b);
    }
    set_at(mean, {r}, mu);
    set_at(rstd, {r}, inv);
  }
}

// sum = x + residual, rounded to the dtype as a separate add would round it; then layer_norm of
// that sum.
void ReferenceBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                      const Tensor& bias, double eps, const Tensor& out,
                                      const Tensor& sum, const Tensor& mean, const Tensor& rstd) {
  check_add_layer_norm_args(x, residual, weight, bias, eps, out, sum, mean, rstd, *this);
  for (std::int64_t r = 0; r < x.size(0); ++r) {
    for (std::int64_t c = 0; c < x.size(1); ++c) {
      set_at(sum, {r, c}, at(x, {r, c}) + at(residual, {r, c}));
    }
  }
  layer_norm(sum, weight, bias, eps, out, mean, rstd);
}

void ReferenceBackend::layer_norm_backward(const Tensor& grad, const Tensor& x,
                                           const Tensor& weight, const Tensor& mean,
                                           const Tensor& rstd, const Tensor& grad_x,
                                           const Tensor& grad_weight, const Tensor& grad_bias) {
  check_layer_norm_backward_args(grad, x, weight, mean, rstd, grad_x, grad_weight, grad_bias,
                                 *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  std::vector<double> sum_weight(static_cast<std::size_t>(cols), 0.0);
  std::vector<double> sum_bias(static_cast<std::size_t>(cols), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double mu = at(mean, {r}), inv = at(rstd, {r});
    double mean_gw = 0.0, mean_gw_xhat = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const double xhat = (at(x, {r, c}) - mu) * inv;
      const double gw = at(grad, {r, c}) * (weight.defined() ? at(weight, {c}) : 1.0);
      mean_gw += gw;
      mean_gw_xhat += gw * xhat;
      sum_weight[static_cast<std::size_t>(c)] += at(grad, {r, c}) * xhat;
      sum_bias[static_cast<std::size_t>(c)] += at(grad, {r, c});
    }
    mean_gw /= static_cast<double>(cols);
    mean_gw_xhat /= static_cast<double>(cols);
    if (!grad_x.defined()) continue;
    for (std::int64_t c = 0; c < cols; ++c) {
      const double xhat = (at(x, {r, c}) - mu) * inv;
      const double gw = at(grad, {r, c}) * (weight.defined() ? at(weight, {c}) : 1.0);
      set_at(grad_x, {r, c}, inv * (gw - mean_gw - xhat * mean_gw_xhat));
    }
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    if (grad_weight.defined()) set_at(grad_weight, {c}, sum_weight[static_cast<std::size_t>(c)]);
    if (grad_bias.defined()) set_at(grad_bias, {c}, sum_bias[static_cast<std::size_t>(c)]);
  }
}

}  // namespace tinyformer::reference
