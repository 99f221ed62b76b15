// CpuBackend::pool1d and pool1d_backward: average or max pooling over full windows of a
// contiguous [B, C, L] tensor (no padding; Lout = (L - kernel) / stride + 1), as loops over the
// B * C rows for both dtypes.
//
// Loops, not oneDNN's pooling: on the plain ncw layout oneDNN 2.6 runs its simple_nchw kernel,
// slower than these loops for both kinds, on large inputs and tiny ones. The max backward must
// know which element won each window, and oneDNN's only answer is a workspace from its own
// forward; here the first maximum is found again from x, which is PyTorch's tie rule.
#include <omp.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

// The index in [0, kernel) of the first maximum of w[0..kernel). A NaN counts as larger than
// anything, so it propagates like PyTorch's max pooling.
template <typename T>
std::int64_t first_max(const T* w, std::int64_t kernel) {
  std::int64_t best = 0;
  for (std::int64_t k = 1; k < kernel; ++k) {
    if (w[best] != w[best]) break;
    if (w[k] > w[best] || w[k] != w[k]) best = k;
  }
  return best;
}

// x: [rows, L] -> out: [rows, Lout]
template <typename T>
void pool_forward(PoolKind kind, const T* x, T* out, std::int64_t rows, std::int64_t length,
                  std::int64_t kernel, std::int64_t stride, std::int64_t out_length) {
  const T inv_kernel = T(1) / static_cast<T>(kernel);
#pragma omp parallel for schedule(static) if (parallel_worth(rows * length))
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * length;
    T* yr = out + r * out_length;
    for (std::int64_t t = 0; t < out_length; ++t) {
      const T* w = xr + t * stride;
      if (kind == PoolKind::max) {
        yr[t] = w[first_max(w, kernel)];
      } else {
        T sum = 0;
        for (std::int64_t k = 0; k < kernel; ++k) sum += w[k];
        yr[t] = sum * inv_kernel;
      }
    }
  }
}

// average: each window spreads g / kernel over its elements; max: the window's first maximum
// takes all of g. Overlapping windows (stride < kernel) add up. g: [rows, Lout] -> gx: [rows, L]
template <typename T>
void pool_backward(PoolKind kind, const T* g, const T* x, T* gx, std::int64_t rows,
                   std::int64_t length, std::int64_t kernel, std::int64_t stride,
                   std::int64_t out_length) {
  const T inv_kernel = T(1) / static_cast<T>(kernel);
#pragma omp parallel for schedule(static) if (parallel_worth(rows * length))
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * out_length;
    const T* xr = x + r * length;
    T* dr = gx + r * length;
    std::memset(dr, 0, static_cast<std::size_t>(length) * sizeof(T));
    for (std::int64_t t = 0; t < out_length; ++t) {
      if (kind == PoolKind::max) {
        dr[t * stride + first_max(xr + t * stride, kernel)] += gr[t];
      } else {
        const T share = gr[t] * inv_kernel;
        for (std::int64_t k = 0; k < kernel; ++k) dr[t * stride + k] += share;
      }
    }
  }
}

}  // namespace

// x: [B, C, L], out: [B, C, Lout]
void CpuBackend::pool1d(PoolKind kind, const Tensor& x, std::int64_t kernel, std::int64_t stride,
                        const Tensor& out) {
  const char* op = kind == PoolKind::max ? "max_pool1d" : "avg_pool1d";
  const std::int64_t out_length = check_pool1d_args(op, x, kernel, stride, out, *this);
  const std::int64_t rows = x.size(0) * x.size(1), length = x.size(2);
  if (x.dtype() == DType::float32) {
    pool_forward(kind, x.data<float>(), out.data<float>(), rows, length, kernel, stride,
                 out_length);
  } else {
    pool_forward(kind, x.data<double>(), out.data<double>(), rows, length, kernel, stride,
                 out_length);
  }
}

// grad: [B, C, Lout], x: [B, C, L] (the forward's input), grad_x: [B, C, L]
void CpuBackend::pool1d_backward(PoolKind kind, const Tensor& grad, const Tensor& x,
                                 std::int64_t kernel, std::int64_t stride, const Tensor& grad_x) {
  const char* op = kind == PoolKind::max ? "max_pool1d_backward" : "avg_pool1d_backward";
  const std::int64_t out_length =
      check_pool1d_backward_args(op, grad, x, kernel, stride, grad_x, *this);
  const std::int64_t rows = x.size(0) * x.size(1), length = x.size(2);
  if (x.dtype() == DType::float32) {
    pool_backward(kind, grad.data<float>(), x.data<float>(), grad_x.data<float>(), rows, length,
                  kernel, stride, out_length);
  } else {
    pool_backward(kind, grad.data<double>(), x.data<double>(), grad_x.data<double>(), rows, length,
                  kernel, stride, out_length);
  }
}

}  // namespace tinyformer::cpu
