// The fused linear layer product.
//   linear: out[i, j] = act(sum_q x[i, q] * weight[j, q] + bias[j])
//           x: [M, K], weight: [N, K] (read transposed), bias: [N] or undefined, out: [M, N];
//           act is the epilogue: the identity, relu, gelu (x Phi(x)) or gelu_tanh.
// The sum, the bias and the activation run in double whatever the dtype, so the only rounding
// is the final write.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

namespace {

double activation(Epilogue epilogue, double z) {
  switch (epilogue) {
    case Epilogue::none:
      return z;
    case Epilogue::relu:
      return z < 0.0 ? 0.0 : z;
    case Epilogue::gelu:  // z Phi(z), Phi the standard normal CDF
      return z * 0.5 * std::erfc(-z / std::numbers::sqrt2);
    case Epilogue::gelu_tanh:  // z (1 + tanh(sqrt(2 / pi) (z + 0.044715 z^3))) / 2
      return 0.5 * z *
             (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (z + 0.044715 * z * z * z)));
  }
  return z;
}

}  // namespace

void ReferenceBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              Epilogue epilogue, const Tensor& out) {
  const LinearShape s = check_linear_args(x, weight, bias, epilogue, out, *this);
  const Matrix a = read_matrix(x, 0), w = read_matrix(weight, 0);
  Matrix y(s.m, s.n);
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      double z = 0.0;
      for (std::int64_t q = 0; q < s.k; ++q) z += a(i, q) * w(j, q);
      if (bias.defined()) z += at(bias, {j});
      y(i, j) = activation(epilogue, z);
    }
  }
  write_matrix(out, 0, y);
}

}  // namespace tinyformer::reference

namespace tinyformer::reference {

// grad_z[i, j] = grad[i, j] * act'(z[i, j]) (relu: where y[i, j] > 0), grad_bias[j] = the sum of
// grad_z[i, j] over i, in double, before grad_z is rounded to its dtype.
void ReferenceBackend::linear_backward_epilogue(const Tensor& grad, const Tensor& y,
                                                Epilogue epilogue, const Tensor& grad_z,
                                                const Tensor& grad_bias) {
  const LinearGradShape s =
      check_linear_backward_epilogue_args(grad, y, epilogue, grad_z, grad_bias, *this);
  for (std::int64_t j = 0; j < s.n; ++j) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < s.m; ++i) {
      double g = at(grad, {i, j});
      if (epilogue == Epilogue::relu && !(at(y, {i, j}) > 0.0)) g = 0.0;
      sum += g;
      if (grad_z.defined()) set_at(grad_z, {i, j}, g);
    }
    if (grad_bias.defined()) set_at(grad_bias, {j}, sum);
  }
}

}  // namespace tinyformer::reference
