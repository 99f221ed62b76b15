// One-dimensional pooling over full windows, and its backward.
//   pool1d:   out[b, c, t] = max or average of x[b, c, t * stride + k], k in [0, kernel)
//   backward: average: every element of window t gets grad[b, c, t] / kernel;
//             max: the window's first maximum gets all of grad[b, c, t] (a NaN counts as the
//             maximum). Overlapping windows (stride < kernel) add up.
// x, grad_x: [B, C, L]; out, grad: [B, C, Lout] with Lout = (L - kernel) / stride + 1.
#include <cmath>
#include <vector>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

namespace {

// The position in [0, kernel) of the first maximum of window t of row (b, c).
std::int64_t first_max(const Tensor& x, std::int64_t b, std::int64_t c, std::int64_t start,
                       std::int64_t kernel) {
  std::int64_t best = 0;
  for (std::int64_t k = 1; k < kernel; ++k) {
    const double v = at(x, {b, c, start + k}), m = at(x, {b, c, start + best});
    if (!std::isnan(m) && (v > m || std::isnan(v))) best = k;
  }
  return best;
}

}  // namespace

void ReferenceBackend::pool1d(PoolKind kind, const Tensor& x, std::int64_t kernel,
                              std::int64_t stride, const Tensor& out) {
  const char* op = kind == PoolKind::max ? "max_pool1d" : "avg_pool1d";
  const std::int64_t out_length = check_pool1d_args(op, x, kernel, stride, out, *this);
  for (std::int64_t b = 0; b < x.size(0); ++b) {
    for (std::int64_t c = 0; c < x.size(1); ++c) {
      for (std::int64_t t = 0; t < out_length; ++t) {
        const std::int64_t start = t * stride;
        double v = 0.0;
        if (kind == PoolKind::max) {
          v = at(x, {b, c, start + first_max(x, b, c, start, kernel)});
        } else {
          for (std::int64_t k = 0; k < kernel; ++k) v += at(x, {b, c, start + k});
          v /= static_cast<double>(kernel);
        }
        set_at(out, {b, c, t}, v);
      }
    }
  }
}

void ReferenceBackend::pool1d_backward(PoolKind kind, const Tensor& grad, const Tensor& x,
                                       std::int64_t kernel, std::int64_t stride,
                                       const Tensor& grad_x) {
  const char* op = kind == PoolKind::max ? "max_pool1d_backward" : "avg_pool1d_backward";
  const std::int64_t out_length =
      check_pool1d_backward_args(op, grad, x, kernel, stride, grad_x, *this);
  const std::int64_t length = x.size(2);
  for (std::int64_t b = 0; b < x.size(0); ++b) {
    for (std::int64_t c = 0; c < x.size(1); ++c) {
      std::vector<double> row(static_cast<std::size_t>(length), 0.0);
      for (std::int64_t t = 0; t < out_length; ++t) {
        const std::int64_t start = t * stride;
        const double g = at(grad, {b, c, t});
        if (kind == PoolKind::max) {
          row[static_cast<std::size_t>(start + first_max(x, b, c, start, kernel))] += g;
        } else {
          for (std::int64_t k = 0; k < kernel; ++k) {
            row[static_cast<std::size_t>(start + k)] += g / static_cast<double>(kernel);
          }
        }
      }
      for (std::int64_t s = 0; s < length; ++s)
        set_at(grad_x, {b, c, s}, row[static_cast<std::size_t>(s)]);
    }
  }
}

}  // namespace tinyformer::reference
