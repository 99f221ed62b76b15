// One-dimensional convolution (cross-correlation, as in every deep-learning library), and its
// backward.
//   conv1d: out[b, o, t] = bias[o] + sum_{i, k} weight[o, i, k] * x[b, i, t * stride + k - padding]
//           where x is 0 outside [0, L) (the padding)
//   backward: each term above adds weight * grad to grad_x, x * grad to grad_weight, and grad to
//           grad_bias: grad_x[b, i, s] = sum over (o, t, k) with t * stride + k - padding = s of
//           weight[o, i, k] grad[b, o, t]; grad_weight[o, i, k] = sum_{b, t} x[b, i, ...] grad;
//           grad_bias[o] = sum_{b, t} grad[b, o, t]
// x: [B, Cin, L], weight: [Cout, Cin, K], bias: [Cout] or undefined, out, grad: [B, Cout, Lout]
// with Lout = (L + 2 padding - K) / stride + 1.
#include <vector>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              std::int64_t stride, std::int64_t padding, const Tensor& out) {
  const ConvShape s = check_conv1d_args(x, weight, bias, stride, padding, out, *this);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t o = 0; o < s.c_out; ++o) {
      for (std::int64_t t = 0; t < s.out_length; ++t) {
        double sum = bias.defined() ? at(bias, {o}) : 0.0;
        for (std::int64_t i = 0; i < s.c_in; ++i) {
          for (std::int64_t k = 0; k < s.kernel; ++k) {
            const std::int64_t p = t * s.stride + k - s.padding;
            if (p >= 0 && p < s.length) sum += at(weight, {o, i, k}) * at(x, {b, i, p});
          }
        }
        set_at(out, {b, o, t}, sum);
      }
    }
  }
}

void ReferenceBackend::conv1d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                       std::int64_t stride, std::int64_t padding,
                                       const Tensor& grad_x, const Tensor& grad_weight,
                                       const Tensor& grad_bias) {
  const ConvShape s = check_conv1d_backward_args(grad, x, weight, stride, padding, grad_x,
                                                 grad_weight, grad_bias, *this);
  // Accumulate in double, then write each gradient once.
  std::vector<double> gx(static_cast<std::size_t>(s.batch * s.c_in * s.length), 0.0);
  std::vector<double> gw(static_cast<std::size_t>(s.c_out * s.c_in * s.kernel), 0.0);
  std::vector<double> gb(static_cast<std::size_t>(s.c_out), 0.0);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t o = 0; o < s.c_out; ++o) {
      for (std::int64_t t = 0; t < s.out_length; ++t) {
        const double g = at(grad, {b, o, t});
        gb[static_cast<std::size_t>(o)] += g;
        for (std::int64_t i = 0; i < s.c_in; ++i) {
          for (std::int64_t k = 0; k < s.kernel; ++k) {
            const std::int64_t p = t * s.stride + k - s.padding;
            if (p < 0 || p >= s.length) continue;
            gx[static_cast<std::size_t>((b * s.c_in + i) * s.length + p)] +=
                at(weight, {o, i, k}) * g;
            gw[static_cast<std::size_t>((o * s.c_in + i) * s.kernel + k)] += at(x, {b, i, p}) * g;
          }
        }
      }
    }
  }
  // The vectors hold the gradients in row-major order, element i of each tensor.
  if (grad_x.defined()) {
    for (std::int64_t i = 0; i < grad_x.numel(); ++i)
      set(grad_x, i, gx[static_cast<std::size_t>(i)]);
  }
  if (grad_weight.defined()) {
    for (std::int64_t i = 0; i < grad_weight.numel(); ++i) {
      set(grad_weight, i, gw[static_cast<std::size_t>(i)]);
    }
  }
  if (grad_bias.defined()) {
    for (std::int64_t i = 0; i < grad_bias.numel(); ++i)
      set(grad_bias, i, gb[static_cast<std::size_t>(i)]);
  }
}

}  // namespace tinyformer::reference
