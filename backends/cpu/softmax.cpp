// CpuBackend::softmax and softmax_backward: (log-)softmax over the last dim of a contiguous
// [R, C] tensor.
//
// float32 softmax forward: oneDNN's softmax primitive. Log-softmax, the backward, and float64
// (which oneDNN lacks): loops, one row per iteration, rows spread over the OpenMP threads. The
// log-softmax loop computes (x - max) - log(sum), whose maximum's term is exactly 0, so that no
// log-probability comes out positive (oneDNN's logsoftmax rounds some to small positive values).
// oneDNN 2.6's softmax backward on AVX2 is its reference kernel, slower than the loop at every
// size; the loop is memory-bound. The softmax loop is close to oneDNN's but not as fast (its
// reductions wait on one accumulator), so float32 softmax stays on oneDNN. benchmark_ops --quick
// compares both directions with oneDNN's (rows "softmax" and "softmax_backward"). Mixed precision's
// float32 -> bfloat16 forward has a loop of its own (softmax_rows_to_bfloat16): each row's float32
// result stays in L1 and is rounded there, which saves writing the float32 tensor and a rounding
// pass over it.
//
// Mixed precision (fused attention under autocast): the forward may round its float32 result
// into a bfloat16 out, and the backward may read a bfloat16 y and write a bfloat16 out; both
// compute in float32. The bfloat16-writing loop takes less time than oneDNN's float32 forward and
// a rounding pass, and the backward with a bfloat16 y and out less than in float32: the passes
// are memory-bound, and a bfloat16 tensor has half the bytes. The bfloat16-writing forward
// computes each row with softmax_row (AVX-512's exponential where the CPU has it, rather than
// math::exp) into a float32 row in L1 and rounds from there. On AVX-512 the scaling and the
// rounding run in one vectorized pass (avx512::softmax_row_bf16), and the backward from a
// bfloat16 y a row at a time (avx512::softmax_grad_row_bf16): the portable loops, compiled for the
// baseline x86-64, round only four lanes at a time. benchmark_libtorch --bf16 --profile shows
// these passes' time in the mixed-precision encoder layer (rows "softmax" and
// "softmax_backward").
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/avx512.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/softmax_row.h"
#include "core/bfloat16.h"
#include "core/error.h"
#include "core/math.h"
#include "core/op_checks.h"
#include "core/softmax_math.h"

namespace tinyformer::cpu {

namespace {

// A row element's time against a streaming copy's (parallel.h): a softmax reads its row two or
// three times and takes an exponential per element.
constexpr std::int64_t kElementCost = 4;

template <typename Body>
void for_rows(std::int64_t rows, std::int64_t cols, Body body) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols, kElementCost))
  for (std::int64_t r = 0; r < rows; ++r) body(r);
}

// y = softmax(x) or log_softmax(x) over each row. x, y: [R, C] (y may be x)
template <typename T>
void softmax_rows(const T* x, T* y, std::int64_t rows, std::int64_t cols, bool log) {
  for_rows(rows, cols, [&](std::int64_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    if (!log) {
      softmax_row(xr, yr, cols);
      return;
    }
    // Subtracting the row max keeps exp() from overflowing; it cancels in the ratio.
    const T m = row_max(xr, cols);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = 0; i < cols; ++i) sum += math::exp(xr[i] - m);
    // (x - m) <= 0 exactly, and the normaliser >= 0: no log-probability is positive.
    const T lse = log_softmax_normaliser(sum);
#pragma omp simd
    for (std::int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] - m) - lse;
  });
}

// *p = v, rounded to nearest even where D is bfloat16 (v then float). The bits are written
// directly: assigning a constructed bfloat16 keeps GCC from vectorizing the loops, which then
// run several times slower (benchmark_libtorch --bf16 --profile, rows "softmax" and
// "softmax_backward").
template <typename D, typename V>
void store(D* p, V v) {
  if constexpr (std::is_same_v<D, bfloat16>) {
    p->bits = bfloat16::round(v);
  } else {
    *p = v;
  }
}

// The float32 forward with its result rounded to bfloat16: softmax's row (softmax_row) goes to a
// float32 scratch row and is rounded from there, so the rounding sees the float32 probabilities
// of softmax_row; log-softmax rounds (x - max) - log sum. Where the CPU has AVX-512,
// avx512::softmax_row_bf16 scales and rounds in one pass (the same bits).
// x: [R, C] float32, y: [R, C] bfloat16
void softmax_rows_to_bfloat16(const float* x, bfloat16* y, std::int64_t rows, std::int64_t cols,
                              bool log) {
#pragma omp parallel if (parallel_worth(rows * cols, kElementCost))
  {
    std::vector<float> scratch(static_cast<std::size_t>(cols));
    float* e = scratch.data();
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      bfloat16* yr = y + r * cols;
      if (!log) {
        if (avx512::available()) {
          static_assert(sizeof(bfloat16) == sizeof(std::uint16_t));
          avx512::softmax_row_bf16(xr, e, reinterpret_cast<std::uint16_t*>(yr), cols);
          continue;
        }
        softmax_row(xr, e, cols);
#pragma omp simd
        for (std::int64_t i = 0; i < cols; ++i) store(yr + i, e[i]);
        continue;
      }
      const float m = row_max(xr, cols);
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t i = 0; i < cols; ++i) sum += math::exp(xr[i] - m);
      const float lse = log_softmax_normaliser(sum);
#pragma omp simd
      for (std::int64_t i = 0; i < cols; ++i) store(yr + i, (xr[i] - m) - lse);
    }
  }
}

// softmax:     dx = y * (g - sum(g * y))
// log_softmax: dx = g - exp(y) * sum(g)
// y, g, dx: [R, C]. T: the computation's dtype (g's); Y, D: y's and dx's, T or (with T float)
// bfloat16.
template <typename T, typename Y = T, typename D = T>
void softmax_backward_rows(const Y* y, const T* g, D* dx, std::int64_t rows, std::int64_t cols,
                           bool log) {
  for_rows(rows, cols, [&](std::int64_t r) {
    const Y* yr = y + r * cols;
    const T* gr = g + r * cols;
    D* dr = dx + r * cols;
    T dot = 0;
    if (log) {
#pragma omp simd reduction(+ : dot)
      for (std::int64_t i = 0; i < cols; ++i) dot += gr[i];
#pragma omp simd
      for (std::int64_t i = 0; i < cols; ++i) {
        store(dr + i, log_softmax_grad(static_cast<T>(yr[i]), gr[i], dot));
      }
    } else {
#pragma omp simd reduction(+ : dot)
      for (std::int64_t i = 0; i < cols; ++i) dot += gr[i] * static_cast<T>(yr[i]);
#pragma omp simd
      for (std::int64_t i = 0; i < cols; ++i) {
        store(dr + i, softmax_grad(static_cast<T>(yr[i]), gr[i], dot));
      }
    }
  });
}

// The float32 forward on oneDNN. x, out: [R, C] contiguous
void softmax_dnnl(const Tensor& x, bool log, const Tensor& out, const char* op) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const auto desc = dnnl_desc(x, op);
  PrimitiveKey key(op);
  key.add(rows).add(cols);
  const CachedPrimitive p = cached_primitive(
      key,
      [&]() -> CachedPrimitive {
        const auto prop = dnnl::prop_kind::forward_inference;
        if (log) {
          dnnl::logsoftmax_forward::primitive_desc pd(dnnl::logsoftmax_forward::desc(prop, desc, 1),
                                                      dnnl_attr(), dnnl_engine());
          return {dnnl::logsoftmax_forward(pd), pd};
        }
        dnnl::softmax_forward::primitive_desc pd(dnnl::softmax_forward::desc(prop, desc, 1),
                                                 dnnl_attr(), dnnl_engine());
        return {dnnl::softmax_forward(pd), pd};
      },
      pass_threads(rows * cols, kElementCost));
  dnnl_execute(p, {{DNNL_ARG_SRC, dnnl_memory(desc, x)}, {DNNL_ARG_DST, dnnl_memory(desc, out)}},
               op, pass_threads(rows * cols, kElementCost));
}

}  // namespace

// x, out: [R, C]
void CpuBackend::softmax(const Tensor& x, bool log, const Tensor& out) {
  const char* op = log ? "log_softmax" : "softmax";
  check_softmax_args(op, {&x, &out}, *this);
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (x.numel() == 0) return;
  if (out.dtype() == DType::bfloat16) {
    softmax_rows_to_bfloat16(x.data<float>(), out.data<bfloat16>(), rows, cols, log);
  } else if (x.dtype() == DType::float32 && !log) {
    softmax_dnnl(x, log, out, op);
  } else if (x.dtype() == DType::float32) {
    softmax_rows(x.data<float>(), out.data<float>(), rows, cols, log);
  } else {
    softmax_rows(x.data<double>(), out.data<double>(), rows, cols, log);
  }
}

// y (the forward's output), grad, out: [R, C]
void CpuBackend::softmax_backward(const Tensor& y, const Tensor& grad, bool log,
                                  const Tensor& out) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_softmax_args(op, {&y, &grad, &out}, *this);
  const std::int64_t rows = y.size(0), cols = y.size(1);
  if (y.numel() == 0) return;
  if (grad.dtype() == DType::float64) {
    softmax_backward_rows(y.data<double>(), grad.data<double>(), out.data<double>(), rows, cols,
                          log);
    return;
  }
  // float32, with y and out each float32 or bfloat16
  const float* g = grad.data<float>();
  const bool y16 = y.dtype() == DType::bfloat16, out16 = out.dtype() == DType::bfloat16;
  if (y16 && !log && avx512::available()) {
    // Mixed precision's attention: a row at a time on AVX-512, the rounding vectorized too; the
    // float32 out has the values that the bfloat16 one rounds.
    static_assert(sizeof(bfloat16) == sizeof(std::uint16_t));
    const auto* yb = reinterpret_cast<const std::uint16_t*>(y.data<bfloat16>());
    for_rows(rows, cols, [&](std::int64_t r) {
      const std::int64_t at = r * cols;
      if (out16) {
        auto* ob = reinterpret_cast<std::uint16_t*>(out.data<bfloat16>());
        avx512::softmax_grad_row_bf16(yb + at, g + at, ob + at, cols);
      } else {
        avx512::softmax_grad_row_bf16(yb + at, g + at, out.data<float>() + at, cols);
      }
    });
  } else if (y16 && out16) {
    softmax_backward_rows(y.data<bfloat16>(), g, out.data<bfloat16>(), rows, cols, log);
  } else if (y16) {
    softmax_backward_rows(y.data<bfloat16>(), g, out.data<float>(), rows, cols, log);
  } else if (out16) {
    softmax_backward_rows(y.data<float>(), g, out.data<bfloat16>(), rows, cols, log);
  } else {
    softmax_backward_rows(y.data<float>(), g, out.data<float>(), rows, cols, log);
  }
}

}  // namespace tinyformer::cpu
