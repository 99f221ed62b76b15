// CpuBackend::layer_norm, add_layer_norm and layer_norm_backward over the last dim of a
// contiguous [R, C] tensor.
//
// float32 on a CPU with AVX-512: add_layer_norm and every backward run a row at a time on
// avx512::layer_norm_row and layer_norm_backward_row (each row's sums in four chains), rows spread
// over the OpenMP threads; add_layer_norm writes each row's sum x + residual once and normalises
// it while it is in L1. layer_norm alone runs oneDNN's layer_normalization, which is faster than
// the row kernel where there is no residual to fuse; add_layer_norm is faster on the row kernel
// than as a separate add then oneDNN, and the backward faster than on the portable loop.
// benchmark_ops --quick compares layer_norm and its backward with oneDNN's (rows "layer_norm"
// and "layer_norm_backward"); benchmark_libtorch --profile shows the three ops' time in the
// encoder layer.
// Elsewhere: float32 layer_norm on oneDNN, add_layer_norm as a plain add loop then oneDNN, and the
// backward on the portable loop; float64 (which oneDNN lacks) on loops, one row per iteration (a
// row fits in L1), add_layer_norm's sum written once and normalised while it is in L1. The
// backward's loop takes the saved rstd as it is (oneDNN wants the variance back) and skips the
// weight and bias sums when they are not wanted.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cpu/avx512.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/strided.h"
#include "core/error.h"
#include "core/math.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

// A row element's time against a streaming copy's (parallel.h): a row is read two or three
// times, and the backward reads two tensors.
constexpr std::int64_t kElementCost = 4;

// float32 rows on avx512::layer_norm_row (x + residual first when residual is not null), rows
// spread over the threads.
void layer_norm_rows_avx512(const float* x, const float* w, const float* b, float eps, float* y,
                            float* mean, float* rstd, std::int64_t rows, std::int64_t cols,
                            const float* residual = nullptr, float* h = nullptr) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols, kElementCost))
  for (std::int64_t r = 0; r < rows; ++r) {
    avx512::layer_norm_row(x + r * cols, residual != nullptr ? residual + r * cols : nullptr,
                           h != nullptr ? h + r * cols : nullptr, w, b, eps, y + r * cols, mean + r,
                           rstd + r, cols);
  }
}

// The backward's column sums (dw, db) are taken over this many blocks of rows at most, each
// block's sums added in row order and the blocks' in block order: the same bits on any
// number of threads.
constexpr std::int64_t kColumnBlocks = 64;

// y = (x - mean) * rstd * w + b, with mean and rstd = 1 / sqrt(var + eps) saved per row. With a
// residual, x is first replaced by h = x + residual, stored in `h` (add_layer_norm).
// x, y: [R, C]; w, b: [C] or null; mean, rstd: [R]; residual, h: [R, C] or both null
template <typename T>
void layer_norm_rows(const T* x, const T* w, const T* b, T eps, T* y, T* mean_out, T* rstd_out,
                     std::int64_t rows, std::int64_t cols, const T* residual = nullptr,
                     T* h = nullptr) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols, kElementCost))
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T sum = 0;
    if (residual != nullptr) {
      const T* rr = residual + r * cols;
      T* hr = h + r * cols;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t c = 0; c < cols; ++c) {
        hr[c] = xr[c] + rr[c];
        sum += hr[c];
      }
      xr = hr;
    } else {
#pragma omp simd reduction(+ : sum)
      for (std::int64_t c = 0; c < cols; ++c) sum += xr[c];
    }
    const T mean = sum / static_cast<T>(cols);
    // Two passes over the row (it is in L1): sum((x - mean)^2) does not cancel the way
    // sum(x^2) - C mean^2 does when |mean| >> std.
    T sq = 0;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t c = 0; c < cols; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
    const T rstd = math::layer_norm_rstd(sq, static_cast<T>(cols), eps);
    mean_out[r] = mean;
    rstd_out[r] = rstd;
    if (w != nullptr && b != nullptr) {
#pragma omp simd
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
    } else if (w != nullptr) {
#pragma omp simd
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c];
    } else if (b != nullptr) {
#pragma omp simd
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd + b[c];
    } else {
#pragma omp simd
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd;
    }
  }
}

// With xhat = (x - mean) * rstd and gy = g * w (g when there is no weight):
//   dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))      per row
//   dw = sum over rows of g * xhat,  db = sum over rows of g   per column
// The rows are cut into at most kColumnBlocks blocks; each block's column sums go to its own
// row of a [blocks, 2, C] buffer, which is then added up in block order, so the result depends
// neither on timing nor on the number of threads.
// g, x, dx: [R, C]; w: [C] or null; mean, rstd: [R]; dx, dw, db: null when not wanted
template <typename T>
void layer_norm_backward_rows(const T* g, const T* x, const T* w, const T* mean, const T* rstd,
                              T* dx, T* dw, T* db, std::int64_t rows, std::int64_t cols) {
  const int threads = pass_threads(rows * cols, kElementCost);
  const bool columns = dw != nullptr || db != nullptr;
  const bool use_avx512 = std::is_same_v<T, float> && avx512::available();
  const std::int64_t blocks = std::min(rows, kColumnBlocks);
  std::vector<T> partial(columns ? static_cast<std::size_t>(blocks * 2 * cols) : 0, T(0));
  // A scratch row per thread for gy = g * w.
  std::vector<T> scratch(
      w != nullptr && dx != nullptr && !use_avx512 ? static_cast<std::size_t>(threads) * cols : 0);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    T* gy_row = scratch.empty()
                    ? nullptr
                    : scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * cols;
#pragma omp for schedule(static)
    for (std::int64_t block = 0; block < blocks; ++block) {
      T* pw = columns ? partial.data() + static_cast<std::size_t>(block * 2 * cols) : nullptr;
      T* pb = columns ? pw + cols : nullptr;
      const std::int64_t r0 = block * rows / blocks, r1 = (block + 1) * rows / blocks;
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* gr = g + r * cols;
        const T* xr = x + r * cols;
        const T m = mean[r], s = rstd[r];
        if constexpr (std::is_same_v<T, float>) {
          if (use_avx512) {
            avx512::layer_norm_backward_row(gr, xr, w, m, s,
                                            dx != nullptr ? dx + r * cols : nullptr, pw, pb, cols);
            continue;
          }
        }
        if (columns) {
#pragma omp simd
          for (std::int64_t c = 0; c < cols; ++c) {
            pw[c] += gr[c] * ((xr[c] - m) * s);
            pb[c] += gr[c];
          }
        }
        if (dx == nullptr) continue;
        const T* gy = gr;
        if (gy_row != nullptr) {
#pragma omp simd
          for (std::int64_t c = 0; c < cols; ++c) gy_row[c] = gr[c] * w[c];
          gy = gy_row;
        }
        T sum_gy = 0, sum_gy_xhat = 0;
#pragma omp simd reduction(+ : sum_gy, sum_gy_xhat)
        for (std::int64_t c = 0; c < cols; ++c) {
          sum_gy += gy[c];
          sum_gy_xhat += gy[c] * ((xr[c] - m) * s);
        }
        const T a = sum_gy / static_cast<T>(cols), bq = sum_gy_xhat / static_cast<T>(cols);
        T* dr = dx + r * cols;
#pragma omp simd
        for (std::int64_t c = 0; c < cols; ++c) {
          dr[c] = math::layer_norm_dx(gy[c], (xr[c] - m) * s, a, bq, s);
        }
      }
    }
  }
  if (!columns) return;
  for (std::int64_t c = 0; c < cols; ++c) {
    T sw = 0, sb = 0;
    for (std::int64_t block = 0; block < blocks; ++block) {
      sw += partial[static_cast<std::size_t>(block * 2 * cols + c)];
      sb += partial[static_cast<std::size_t>(block * 2 * cols + cols + c)];
    }
    if (dw != nullptr) dw[c] = sw;
    if (db != nullptr) db[c] = sb;
  }
}

// The float32 forward on oneDNN. It saves the variance; backward wants rstd = 1 / sqrt(var + eps).
// x, out: [R, C]; weight, bias: [C] or undefined; mean, rstd: [R]
void layer_norm_dnnl(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                     const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm";
  const std::int64_t rows = x.size(0), cols = x.size(1);
  auto flags = dnnl::normalization_flags::none;
  if (weight.defined()) flags |= dnnl::normalization_flags::use_scale;
  if (bias.defined()) flags |= dnnl::normalization_flags::use_shift;
  const auto data_desc = dnnl_desc(x, op);
  const auto stat_desc = dnnl_desc(mean, op);
  PrimitiveKey key(op);
  key.add(rows)
      .add(cols)
      .add(static_cast<std::int64_t>(flags))
      .add(std::bit_cast<std::int32_t>(eps));
  const CachedPrimitive p = cached_primitive(
      key,
      [&] {
        dnnl::layer_normalization_forward::primitive_desc pd(
            dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, data_desc,
                                                    stat_desc, eps, flags),
            dnnl_attr(), dnnl_engine());
        return CachedPrimitive{dnnl::layer_normalization_forward(pd), pd};
      },
      pass_threads(rows * cols, kElementCost));
  // The variance lands in rstd's memory, then becomes rstd in place.
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, dnnl_memory(data_desc, x)},
                                                {DNNL_ARG_DST, dnnl_memory(data_desc, out)},
                                                {DNNL_ARG_MEAN, dnnl_memory(stat_desc, mean)},
                                                {DNNL_ARG_VARIANCE, dnnl_memory(stat_desc, rstd)}};
  if (weight.defined()) args.emplace(DNNL_ARG_SCALE, dnnl_memory(dnnl_desc(weight, op), weight));
  if (bias.defined()) args.emplace(DNNL_ARG_SHIFT, dnnl_memory(dnnl_desc(bias, op), bias));
  dnnl_execute(p, std::move(args), op, pass_threads(rows * cols, kElementCost));
  float* r = rstd.data<float>();
#pragma omp simd
  for (std::int64_t i = 0; i < rows; ++i) r[i] = math::layer_norm_rstd(r[i], 1.0f, eps);
}

// The data of an optional tensor (weight, bias, a gradient that may not be wanted), or null.
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

// x, out: [R, C]; weight, bias: [C] or undefined; mean, rstd: [R]
void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                            const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  check_layer_norm_args(x, weight, bias, eps, out, mean, rstd, *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  if (x.dtype() == DType::float32) {
    layer_norm_dnnl(x, weight, bias, static_cast<float>(eps), out, mean, rstd);
  } else {
    layer_norm_rows(x.data<double>(), data_or_null<double>(weight), data_or_null<double>(bias), eps,
                    out.data<double>(), mean.data<double>(), rstd.data<double>(), rows, cols);
  }
}

// x, residual, out, sum: [R, C]; weight, bias: [C] or undefined; mean, rstd: [R]
void CpuBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                const Tensor& bias, double eps, const Tensor& out,
                                const Tensor& sum, const Tensor& mean, const Tensor& rstd) {
  check_add_layer_norm_args(x, residual, weight, bias, eps, out, sum, mean, rstd, *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  if (x.dtype() == DType::float32 && avx512::available()) {
    layer_norm_rows_avx512(x.data<float>(), data_or_null<float>(weight), data_or_null<float>(bias),
                           static_cast<float>(eps), out.data<float>(), mean.data<float>(),
                           rstd.data<float>(), rows, cols, residual.data<float>(),
                           sum.data<float>());
  } else if (x.dtype() == DType::float32) {
    const float* xp = x.data<float>();
    const float* rp = residual.data<float>();
    float* hp = sum.data<float>();
    const std::int64_t n = rows * cols;
    parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
      for (std::int64_t i = begin; i < end; ++i) hp[i] = xp[i] + rp[i];
    });
    layer_norm_dnnl(sum, weight, bias, static_cast<float>(eps), out, mean, rstd);
  } else {
    layer_norm_rows(x.data<double>(), data_or_null<double>(weight), data_or_null<double>(bias), eps,
                    out.data<double>(), mean.data<double>(), rstd.data<double>(), rows, cols,
                    residual.data<double>(), sum.data<double>());
  }
}

// grad, x, grad_x: [R, C]; weight: [C] or undefined; mean, rstd: [R] from the forward;
// grad_weight, grad_bias: [C] or undefined (not wanted). grad_x may be undefined too.
void CpuBackend::layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                     const Tensor& grad_weight, const Tensor& grad_bias) {
  check_layer_norm_backward_args(grad, x, weight, mean, rstd, grad_x, grad_weight, grad_bias,
                                 *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (cols == 0) return;
  if (x.dtype() == DType::float32) {
    layer_norm_backward_rows(grad.data<float>(), x.data<float>(), data_or_null<float>(weight),
                             mean.data<float>(), rstd.data<float>(), data_or_null<float>(grad_x),
                             data_or_null<float>(grad_weight), data_or_null<float>(grad_bias), rows,
                             cols);
  } else {
    layer_norm_backward_rows(grad.data<double>(), x.data<double>(), data_or_null<double>(weight),
                             mean.data<double>(), rstd.data<double>(), data_or_null<double>(grad_x),
                             data_or_null<double>(grad_weight), data_or_null<double>(grad_bias),
                             rows, cols);
  }
}

}  // namespace tinyformer::cpu
