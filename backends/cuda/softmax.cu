// CudaBackend::softmax and softmax_backward: (log-)softmax over the last dim of a contiguous
// [R, C] tensor, and its gradient.
//
// Rows of up to 1024 elements take one warp each and live in that warp's registers: one read of
// x, one write of y, and the row's max and sum are warp shuffles (no shared memory, no
// __syncthreads). Longer rows take one block each and are read three times (max, sum, write);
// they are L2-resident between the passes. bfloat16 is computed in float32, float64 in double.
// Mixed precision's pairs compute in float32 too: a float32 forward may round its result into a
// bfloat16 out, and a float32 backward may read a bfloat16 y and write a bfloat16 out.
// Rows of -inf (fully masked) become NaN, as on the CPU: -inf - max is NaN.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/strided.cuh"
#include "core/math.h"
#include "core/op_checks.h"
#include "core/softmax_math.h"

namespace tinyformer::cuda {

namespace {

// --- one warp per row (C <= 1024) ---

// y = softmax(x) or log_softmax(x) per row. Lane l holds columns l, l + 32, ..., l + 32 (kItems
// - 1), so each load is one coalesced 32-element access; columns past C are padding (-inf for
// the max, skipped in the sum). y may be x.
// x, y: [R, C], C <= 32 kItems; Y: T, or bfloat16 for a float32 T
template <typename T, typename Y, int kItems>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    softmax_warp_kernel(const T* x, Y* y, std::int64_t rows, int cols, bool log) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  // Every lane of a warp has the same row, so the loop keeps all 32 lanes together for the
  // full-mask shuffles.
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
       r < rows; r += static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* xr = x + r * cols;
    Y* yr = y + r * cols;
    A v[kItems];
    A m = -std::numeric_limits<A>::infinity();
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = lane + 32 * k;
      v[k] = c < cols ? to_acc(xr[c]) : -std::numeric_limits<A>::infinity();
      m = v[k] > m ? v[k] : m;
    }
    // Subtracting the row max keeps exp() from overflowing; it cancels in the ratio.
    m = warp_max(m);
    A sum = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (lane + 32 * k < cols) {
        const A e = math::exp(v[k] - m);
        sum += e;
        if (!log) v[k] = e;
      }
    }
    sum = warp_sum(sum);
    // (x - m) <= 0 exactly, and the normaliser >= 0: no log-probability is positive.
    const A lse = log_softmax_normaliser(sum), inv = A(1) / sum;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = lane + 32 * k;
      if (c < cols) yr[c] = from_acc<Y>(log ? (v[k] - m) - lse : v[k] * inv);
    }
  }
}

// softmax:     dx = y * (g - sum(g * y))
// log_softmax: dx = g - exp(y) * sum(g)
// y, g, dx: [R, C], C <= 32 kItems (dx may be y or g); Y, D: T, or bfloat16 for a float32 T
template <typename T, typename Y, typename D, int kItems>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    softmax_backward_warp_kernel(const Y* y, const T* g, D* dx, std::int64_t rows, int cols,
                                 bool log) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
       r < rows; r += static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock) {
    const Y* yr = y + r * cols;
    const T* gr = g + r * cols;
    D* dr = dx + r * cols;
    A yv[kItems], gv[kItems];
    A dot = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = lane + 32 * k;
      yv[k] = c < cols ? to_acc(yr[c]) : A(0);
      gv[k] = c < cols ? to_acc(gr[c]) : A(0);
      dot += log ? gv[k] : gv[k] * yv[k];
    }
    dot = warp_sum(dot);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = lane + 32 * k;
      if (c < cols) {
        dr[c] = from_acc<D>(log ? log_softmax_grad(yv[k], gv[k], dot)
                                : softmax_grad(yv[k], gv[k], dot));
      }
    }
  }
}

// --- one block per row (C > 1024) ---

// As softmax_warp_kernel, with the row read from global memory once per pass. y may be x: each
// thread reads an element before it writes it.
// x, y: [R, C]
template <typename T, typename Y>
__global__ void __launch_bounds__(kRowBlock)
    softmax_block_kernel(const T* x, Y* y, std::int64_t rows, std::int64_t cols, bool log) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  // The row is the same for the whole block, so every thread reaches the block reductions.
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    Y* yr = y + r * cols;
    A m = -std::numeric_limits<A>::infinity();
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A v = to_acc(xr[c]);
      m = v > m ? v : m;
    }
    m = block_max(m, scratch);
    A sum = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      sum += math::exp(to_acc(xr[c]) - m);
    sum = block_sum(sum, scratch);
    const A shift = m + math::log(sum), inv = A(1) / sum;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A v = to_acc(xr[c]);
      yr[c] = from_acc<Y>(log ? v - shift : math::exp(v - m) * inv);
    }
  }
}

// As softmax_backward_warp_kernel, one block per row.
// y, g, dx: [R, C]
template <typename T, typename Y, typename D>
__global__ void __launch_bounds__(kRowBlock)
    softmax_backward_block_kernel(const Y* y, const T* g, D* dx, std::int64_t rows,
                                  std::int64_t cols, bool log) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const Y* yr = y + r * cols;
    const T* gr = g + r * cols;
    D* dr = dx + r * cols;
    A dot = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A gv = to_acc(gr[c]);
      dot += log ? gv : gv * to_acc(yr[c]);
    }
    dot = block_sum(dot, scratch);
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A yv = to_acc(yr[c]), gv = to_acc(gr[c]);
      dr[c] = from_acc<D>(log ? log_softmax_grad(yv, gv, dot) : softmax_grad(yv, gv, dot));
    }
  }
}

template <typename T, typename Y>
void launch_softmax(const Tensor& x, bool log, const Tensor& out, cudaStream_t stream) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const T* xp = device_data<T>(x);
  Y* yp = device_data<Y>(out);
  if (cols <= kWarpRowMax) {
    with_items(cols, [&](auto items) {
      softmax_warp_kernel<T, Y, decltype(items)::value>
          <<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * 32, 0, stream>>>(
              xp, yp, rows, static_cast<int>(cols), log);
    });
  } else {
    softmax_block_kernel<T, Y>
        <<<grid_for(rows, 1), kRowBlock, 0, stream>>>(xp, yp, rows, cols, log);
  }
}

template <typename T, typename Y, typename D>
void launch_softmax_backward(const Tensor& y, const Tensor& grad, bool log, const Tensor& out,
                             cudaStream_t stream) {
  const std::int64_t rows = y.size(0), cols = y.size(1);
  const Y* yp = device_data<Y>(y);
  const T* gp = device_data<T>(grad);
  D* dp = device_data<D>(out);
  if (cols <= kWarpRowMax) {
    with_items(cols, [&](auto items) {
      softmax_backward_warp_kernel<T, Y, D, decltype(items)::value>
          <<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * 32, 0, stream>>>(
              yp, gp, dp, rows, static_cast<int>(cols), log);
    });
  } else {
    softmax_backward_block_kernel<T, Y, D>
        <<<grid_for(rows, 1), kRowBlock, 0, stream>>>(yp, gp, dp, rows, cols, log);
  }
}

}  // namespace

// x, out: [R, C]
void CudaBackend::softmax(const Tensor& x, bool log, const Tensor& out) {
  const char* op = log ? "log_softmax" : "softmax";
  check_softmax_args(op, {&x, &out}, *this);
  if (x.numel() == 0) return;
  if (x.dtype() != out.dtype()) {  // float32 rounded into bfloat16 (checked)
    launch_softmax<float, bf16>(x, log, out, stream());
  } else {
    dispatch_floating(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      launch_softmax<T, T>(x, log, out, stream());
    });
  }
  TF_CUDA_CHECK_LAUNCH(op);
}

// y (the forward's output), grad, out: [R, C]
void CudaBackend::softmax_backward(const Tensor& y, const Tensor& grad, bool log,
                                   const Tensor& out) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_softmax_args(op, {&y, &grad, &out}, *this);
  if (y.numel() == 0) return;
  const bool y16 = y.dtype() != grad.dtype(), out16 = out.dtype() != grad.dtype();
  if (y16 && out16) {  // mixed precision (checked): float32 grad, bfloat16 y and/or out
    launch_softmax_backward<float, bf16, bf16>(y, grad, log, out, stream());
  } else if (y16) {
    launch_softmax_backward<float, bf16, float>(y, grad, log, out, stream());
  } else if (out16) {
    launch_softmax_backward<float, float, bf16>(y, grad, log, out, stream());
  } else {
    dispatch_floating(grad.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      launch_softmax_backward<T, T, T>(y, grad, log, out, stream());
    });
  }
  TF_CUDA_CHECK_LAUNCH(op);
}

}  // namespace tinyformer::cuda
