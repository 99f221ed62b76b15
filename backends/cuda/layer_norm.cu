// CudaBackend::layer_norm, add_layer_norm and layer_norm_backward over the last dim of a
// contiguous [R, C] tensor. add_layer_norm is the forward with a residual: each element's
// h = x + residual is rounded to the dtype (as an add would), written to `sum`, and normalised
// from the registers (warp rows) or re-read from `sum` (block rows).
//
// Per row (the forward, and the backward's grad_x): rows of up to 1024 elements take one warp
// each and live in its registers; longer rows take one block each and are re-read per pass (they
// stay in L2). The backward's grad_weight and grad_bias are sums over rows, done in two passes
// with a fixed partition (partial sums per chunk of rows, then the chunks added in order), so
// they are the same bit for bit from run to run; no float atomics. bfloat16 is computed in
// float32, float64 in double. mean and rstd have x's dtype, as on the CPU; a bfloat16 x may
// also keep them in float32.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/strided.cuh"
#include "core/math.h"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

// The weight at column c, or 1 without a weight; the bias, or 0.
template <typename T>
__device__ inline acc_t<T> weight_at(const T* w, std::int64_t c) {
  return w != nullptr ? to_acc(w[c]) : acc_t<T>(1);
}
template <typename T>
__device__ inline acc_t<T> bias_at(const T* b, std::int64_t c) {
  return b != nullptr ? to_acc(b[c]) : acc_t<T>(0);
}

// --- forward ---

// y = (x - mean) * rstd * w + b with rstd = 1 / sqrt(var + eps), mean and rstd saved per row.
// Lane l holds columns l, l + 32, ...; the variance is a second pass over the registers:
// sum((x - mean)^2) does not cancel the way sum(x^2) - C mean^2 does when |mean| >> std.
// x, y: [R, C], C <= 32 kItems; w, b: [C] or null; mean, rstd: [R] (S: T, or float for bf16);
// residual, h: [R, C] or both null (add_layer_norm: x + residual is normalised and kept in h)
template <typename T, typename S, int kItems>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    layer_norm_warp_kernel(const T* x, const T* w, const T* b, acc_t<T> eps, T* y, S* mean_out,
                           S* rstd_out, std::int64_t rows, int cols, const T* residual, T* h) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  // Every lane of a warp has the same row: all 32 lanes reach the full-mask shuffles.
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
       r < rows; r += static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    A v[kItems];
    A sum = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = lane + 32 * k;
      v[k] = A(0);
      if (c < cols && residual != nullptr) {
        const T hc = from_acc<T>(to_acc(xr[c]) + to_acc(residual[r * cols + c]));
        h[r * cols + c] = hc;
        v[k] = to_acc(hc);
      } else if (c < cols) {
        v[k] = to_acc(xr[c]);
      }
      sum += v[k];
    }
    const A mean = warp_sum(sum) / static_cast<A>(cols);
    A sq = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (lane + 32 * k < cols) sq += (v[k] - mean) * (v[k] - mean);
    }
    const A rstd = math::layer_norm_rstd(warp_sum(sq), static_cast<A>(cols), eps);
    if (lane == 0) {
      mean_out[r] = from_acc<S>(mean);
      rstd_out[r] = from_acc<S>(rstd);
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = lane + 32 * k;
      if (c < cols) yr[c] = from_acc<T>((v[k] - mean) * rstd * weight_at(w, c) + bias_at(b, c));
    }
  }
}

// As layer_norm_warp_kernel, one block per row, three passes over the row (sum, squared
// deviations, write).
// x, y: [R, C]; w, b: [C] or null; mean, rstd: [R]; residual, h: [R, C] or both null (the first
// pass writes h = x + residual, which the later passes read in place of x)
template <typename T, typename S>
__global__ void __launch_bounds__(kRowBlock)
    layer_norm_block_kernel(const T* x, const T* w, const T* b, acc_t<T> eps, T* y, S* mean_out,
                            S* rstd_out, std::int64_t rows, std::int64_t cols, const T* residual,
                            T* h) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  // The row is the same for the whole block, so every thread reaches the block reductions.
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    A sum = 0;
    if (residual != nullptr) {
      // Each thread reads back only the columns it wrote itself.
      T* hr = h + r * cols;
      for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        hr[c] = from_acc<T>(to_acc(xr[c]) + to_acc(residual[r * cols + c]));
        sum += to_acc(hr[c]);
      }
      xr = hr;
    } else {
      for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += to_acc(xr[c]);
    }
    const A mean = block_sum(sum, scratch) / static_cast<A>(cols);
    A sq = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A d = to_acc(xr[c]) - mean;
      sq += d * d;
    }
    const A rstd = math::layer_norm_rstd(block_sum(sq, scratch), static_cast<A>(cols), eps);
    if (threadIdx.x == 0) {
      mean_out[r] = from_acc<S>(mean);
      rstd_out[r] = from_acc<S>(rstd);
    }
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      yr[c] = from_acc<T>((to_acc(xr[c]) - mean) * rstd * weight_at(w, c) + bias_at(b, c));
    }
  }
}

// --- backward: grad_x per row ---

// With xhat = (x - mean) * rstd and gy = g * w (g when there is no weight):
//   dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))
// g, x, dx: [R, C], C <= 32 kItems; w: [C] or null; mean, rstd: [R]
template <typename T, typename S, int kItems>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    layer_norm_backward_warp_kernel(const T* g, const T* x, const T* w, const S* mean,
                                    const S* rstd, T* dx, std::int64_t rows, int cols) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
       r < rows; r += static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* gr = g + r * cols;
    const T* xr = x + r * cols;
    const A m = to_acc(mean[r]), s = to_acc(rstd[r]);
    A xhat[kItems], gy[kItems];
    A sum_gy = 0, sum_gy_xhat = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = lane + 32 * k;
      xhat[k] = c < cols ? (to_acc(xr[c]) - m) * s : A(0);
      gy[k] = c < cols ? to_acc(gr[c]) * weight_at(w, c) : A(0);
      sum_gy += gy[k];
      sum_gy_xhat += gy[k] * xhat[k];
    }
    const A a = warp_sum(sum_gy) / static_cast<A>(cols);
    const A bq = warp_sum(sum_gy_xhat) / static_cast<A>(cols);
    T* dr = dx + r * cols;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = lane + 32 * k;
      if (c < cols) dr[c] = from_acc<T>(math::layer_norm_dx(gy[k], xhat[k], a, bq, s));
    }
  }
}

// As layer_norm_backward_warp_kernel, one block per row, two passes (sums, write).
// g, x, dx: [R, C]; w: [C] or null; mean, rstd: [R]
template <typename T, typename S>
__global__ void __launch_bounds__(kRowBlock)
    layer_norm_backward_block_kernel(const T* g, const T* x, const T* w, const S* mean,
                                     const S* rstd, T* dx, std::int64_t rows, std::int64_t cols) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = g + r * cols;
    const T* xr = x + r * cols;
    const A m = to_acc(mean[r]), s = to_acc(rstd[r]);
    A sum_gy = 0, sum_gy_xhat = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A gy = to_acc(gr[c]) * weight_at(w, c);
      sum_gy += gy;
      sum_gy_xhat += gy * ((to_acc(xr[c]) - m) * s);
    }
    const A a = block_sum(sum_gy, scratch) / static_cast<A>(cols);
    const A bq = block_sum(sum_gy_xhat, scratch) / static_cast<A>(cols);
    T* dr = dx + r * cols;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A gy = to_acc(gr[c]) * weight_at(w, c);
      dr[c] = from_acc<T>(math::layer_norm_dx(gy, (to_acc(xr[c]) - m) * s, a, bq, s));
    }
  }
}

// --- backward: grad_weight and grad_bias, a column sum over rows in two passes ---

// dw = sum over rows of g * xhat, db = sum over rows of g.
constexpr int kColumnTile = 32;    // columns per block: one warp reads 32 adjacent columns
constexpr int kColumnStrides = 8;  // warps per block, each taking every 8th row of the chunk
constexpr int kColumnThreads = kColumnTile * kColumnStrides;
constexpr int kMinChunkRows = 64;         // rows per chunk at least ...
constexpr std::int64_t kMaxChunks = 256;  // ... and at most this many chunks

// Pass 1: block (x, y) sums the rows of chunk blockIdx.y for columns blockIdx.x * 32 + [0, 32)
// into partial[chunk, 0, c] (dw) and partial[chunk, 1, c] (db). Inside the block, the 8 warps'
// sums are added in warp order, so the partition (and the result) depends only on R and C.
// g, x: [R, C]; mean, rstd: [R]; partial: [chunks, 2, C] in the accumulation type
template <typename T, typename S>
__global__ void __launch_bounds__(kColumnThreads)
    layer_norm_column_partials_kernel(const T* g, const T* x, const S* mean, const S* rstd,
                                      acc_t<T>* partial, std::int64_t rows, std::int64_t cols,
                                      std::int64_t chunk_rows) {
  using A = acc_t<T>;
  __shared__ A tile_w[kColumnStrides][kColumnTile];
  __shared__ A tile_b[kColumnStrides][kColumnTile];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t r0 = chunk * chunk_rows;
  const std::int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  A sw = 0, sb = 0;
  if (c < cols) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kColumnStrides) {
      const A gv = to_acc(g[r * cols + c]);
      sw += gv * ((to_acc(x[r * cols + c]) - to_acc(mean[r])) * to_acc(rstd[r]));
      sb += gv;
    }
  }
  tile_w[threadIdx.y][threadIdx.x] = sw;
  tile_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 1; k < kColumnStrides; ++k) {
      sw += tile_w[k][threadIdx.x];
      sb += tile_b[k][threadIdx.x];
    }
    partial[(chunk * 2) * cols + c] = sw;
    partial[(chunk * 2 + 1) * cols + c] = sb;
  }
}

// Pass 2: adds the chunks' partial sums column by column, in chunk order. With no rows
// (chunks == 0) the sums are 0, as on the CPU.
// partial: [chunks, 2, C]; dw, db: [C] or null
template <typename T>
__global__ void layer_norm_column_finish_kernel(const acc_t<T>* partial, std::int64_t chunks,
                                                std::int64_t cols, T* dw, T* db) {
  using A = acc_t<T>;
  for (std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    A sw = 0, sb = 0;
    for (std::int64_t k = 0; k < chunks; ++k) {
      sw += partial[(k * 2) * cols + c];
      sb += partial[(k * 2 + 1) * cols + c];
    }
    if (dw != nullptr) dw[c] = from_acc<T>(sw);
    if (db != nullptr) db[c] = from_acc<T>(sb);
  }
}

// --- host side ---

// Calls f(T{}, S{}) with T the type of x's dtype and S that of mean and rstd: T, or float for a
// bfloat16 x whose statistics are float32.
template <typename F>
void dispatch_stats(const Tensor& x, const Tensor& mean, const char* op, F&& f) {
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bf16>) {
      if (mean.dtype() == DType::float32) {
        f(T{}, float{});
        return;
      }
    }
    f(T{}, T{});
  });
}

// The data of an optional tensor (weight, bias, a gradient that may not be wanted), or null.
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? device_data<T>(t) : nullptr;
}

}  // namespace

// x, out: [R, C]; weight, bias: [C] or undefined; mean, rstd: [R]
void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                             const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm";
  check_layer_norm_args(x, weight, bias, eps, out, mean, rstd, *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  dispatch_stats(x, mean, op, [&](auto t_tag, auto s_tag) {
    using T = decltype(t_tag);
    using S = decltype(s_tag);
    using A = acc_t<T>;
    const T* xp = device_data<T>(x);
    const T* wp = data_or_null<T>(weight);
    const T* bp = data_or_null<T>(bias);
    T* yp = device_data<T>(out);
    S* mp = device_data<S>(mean);
    S* rp = device_data<S>(rstd);
    const A e = static_cast<A>(eps);
    if (cols <= kWarpRowMax) {
      with_items(cols, [&](auto items) {
        layer_norm_warp_kernel<T, S, decltype(items)::value>
            <<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * 32, 0, stream()>>>(
                xp, wp, bp, e, yp, mp, rp, rows, static_cast<int>(cols), nullptr, nullptr);
      });
    } else {
      layer_norm_block_kernel<T, S><<<grid_for(rows, 1), kRowBlock, 0, stream()>>>(
          xp, wp, bp, e, yp, mp, rp, rows, cols, nullptr, nullptr);
    }
    TF_CUDA_CHECK_LAUNCH(op);
  });
}

// x, residual, out, sum: [R, C]; weight, bias: [C] or undefined; mean, rstd: [R]
void CudaBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                 const Tensor& bias, double eps, const Tensor& out,
                                 const Tensor& sum, const Tensor& mean, const Tensor& rstd) {
  const char* op = "add_layer_norm";
  check_add_layer_norm_args(x, residual, weight, bias, eps, out, sum, mean, rstd, *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  dispatch_stats(x, mean, op, [&](auto t_tag, auto s_tag) {
    using T = decltype(t_tag);
    using S = decltype(s_tag);
    using A = acc_t<T>;
    const T* xp = device_data<T>(x);
    const T* resp = device_data<T>(residual);
    const T* wp = data_or_null<T>(weight);
    const T* bp = data_or_null<T>(bias);
    T* yp = device_data<T>(out);
    T* hp = device_data<T>(sum);
    S* mp = device_data<S>(mean);
    S* rp = device_data<S>(rstd);
    const A e = static_cast<A>(eps);
    if (cols <= kWarpRowMax) {
      with_items(cols, [&](auto items) {
        layer_norm_warp_kernel<T, S, decltype(items)::value>
            <<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * 32, 0, stream()>>>(
                xp, wp, bp, e, yp, mp, rp, rows, static_cast<int>(cols), resp, hp);
      });
    } else {
      layer_norm_block_kernel<T, S><<<grid_for(rows, 1), kRowBlock, 0, stream()>>>(
          xp, wp, bp, e, yp, mp, rp, rows, cols, resp, hp);
    }
    TF_CUDA_CHECK_LAUNCH(op);
  });
}

// grad, x, grad_x: [R, C]; weight: [C] or undefined; mean, rstd: [R] from the forward;
// grad_weight, grad_bias: [C] or undefined (not wanted). grad_x may be undefined too.
void CudaBackend::layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                      const Tensor& grad_weight, const Tensor& grad_bias) {
  const char* op = "layer_norm_backward";
  check_layer_norm_backward_args(grad, x, weight, mean, rstd, grad_x, grad_weight, grad_bias,
                                 *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (cols == 0) return;
  dispatch_stats(x, mean, op, [&](auto t_tag, auto s_tag) {
    using T = decltype(t_tag);
    using S = decltype(s_tag);
    using A = acc_t<T>;
    const T* gp = device_data<T>(grad);
    const T* xp = device_data<T>(x);
    const T* wp = data_or_null<T>(weight);
    const S* mp = device_data<S>(mean);
    const S* rp = device_data<S>(rstd);
    if (grad_x.defined() && rows > 0) {
      T* dxp = device_data<T>(grad_x);
      if (cols <= kWarpRowMax) {
        with_items(cols, [&](auto items) {
          layer_norm_backward_warp_kernel<T, S, decltype(items)::value>
              <<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * 32, 0, stream()>>>(
                  gp, xp, wp, mp, rp, dxp, rows, static_cast<int>(cols));
        });
      } else {
        layer_norm_backward_block_kernel<T, S>
            <<<grid_for(rows, 1), kRowBlock, 0, stream()>>>(gp, xp, wp, mp, rp, dxp, rows, cols);
      }
      TF_CUDA_CHECK_LAUNCH(op);
    }
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    // Chunks of at least kMinChunkRows rows, at most kMaxChunks of them: enough blocks to fill
    // the GPU for a few columns, a partial buffer of at most 2 * 256 rows.
    const std::int64_t chunks = std::min(kMaxChunks, (rows + kMinChunkRows - 1) / kMinChunkRows);
    const std::int64_t chunk_rows = chunks > 0 ? (rows + chunks - 1) / chunks : 0;
    constexpr DType acc_dtype = device_dtype_of<A>();
    const Tensor partial = empty({std::max<std::int64_t>(chunks, 1) * 2 * cols},
                                 {.dtype = acc_dtype, .device = x.device()});
    A* pp = device_data<A>(partial);
    if (chunks > 0) {
      const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile),
                      static_cast<unsigned>(chunks));
      layer_norm_column_partials_kernel<T, S>
          <<<grid, dim3(kColumnTile, kColumnStrides), 0, stream()>>>(gp, xp, mp, rp, pp, rows, cols,
                                                                     chunk_rows);
      TF_CUDA_CHECK_LAUNCH(op);
    }
    layer_norm_column_finish_kernel<T><<<grid_for(cols), kBlock, 0, stream()>>>(
        pp, chunks, cols, data_or_null<T>(grad_weight), data_or_null<T>(grad_bias));
    TF_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace tinyformer::cuda
