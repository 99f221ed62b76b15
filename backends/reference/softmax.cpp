// Softmax and log-softmax over the last dim, and their backwards.
//   softmax:     y[r, c] = exp(x[r, c] - m) / sum_j exp(x[r, j] - m),   m = max_j x[r, j]
//   log_softmax: y[r, c] = x[r, c] - m - log(sum_j exp(x[r, j] - m))
//   backward:    softmax:     dx[r, c] = y[r, c] (g[r, c] - sum_j g[r, j] y[r, j])
//                log_softmax: dx[r, c] = g[r, c] - exp(y[r, c]) sum_j g[r, j]
// x, y, grad, out: [R, C]. Subtracting the row's maximum m changes nothing mathematically and
// keeps exp from overflowing; a row of -inf but one entry puts probability 1 there.
#include <cmath>
#include <limits>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::softmax(const Tensor& x, bool log, const Tensor& out) {
  check_softmax_args(log ? "log_softmax" : "softmax", {&x, &out}, *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < cols; ++c) m = std::fmax(m, at(x, {r, c}));
    double sum = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(at(x, {r, c}) - m);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double shifted = at(x, {r, c}) - m;
      set_at(out, {r, c}, log ? shifted - std::log(sum) : std::exp(shifted) / sum);
    }
  }
}

void ReferenceBackend::softmax_backward(const Tensor& y, const Tensor& grad, bool log,
                                        const Tensor& out) {
  check_softmax_args(log ? "log_softmax_backward" : "softmax_backward", {&y, &grad, &out}, *this);
  const std::int64_t rows = y.size(0), cols = y.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;  // sum_j g y (softmax) or sum_j g (log_softmax)
    for (std::int64_t c = 0; c < cols; ++c) {
      dot += log ? at(grad, {r, c}) : at(grad, {r, c}) * at(y, {r, c});
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      const double g = at(grad, {r, c}), v = at(y, {r, c});
      set_at(out, {r, c}, log ? g - std::exp(v) * dot : v * (g - dot));
    }
  }
}

}  // namespace tinyformer::reference
