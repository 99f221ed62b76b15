// CpuBackend::adamw_step: one Adam or AdamW update of a parameter and its two moment buffers, in
// one pass over memory (one read of each tensor, one write of param, exp_avg and exp_avg_sq)
// instead of the dozen temporaries the same formula costs as a chain of elementwise ops.
// CpuBackend::sum_squares: a gradient's sum of squares in float64 for clip_grad_norm, in one read
// of the gradient (the composition it replaces copied it to float64, squared the copy and summed
// that).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/adam.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

// p, g, m, v: [n] contiguous. L2 picks Adam's coupled weight decay at compile time, so the loop
// body has no branch and vectorizes.
template <typename T, bool L2>
void adam_loop(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamConstants<T>& c) {
  // Four tensors read and three written per element, and a square root: the cost of four
  // streaming elements (parallel.h).
  constexpr std::int64_t kCost = 4;
  parallel_for(
      n,
      [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
        for (std::int64_t i = begin; i < end; ++i) adam_update<L2>(p[i], g[i], m[i], v[i], c);
      },
      1, kCost);
}

// Elements per block of sum_squares: the blocks' partial sums are added in order, so the sum's
// order depends on the size alone; a block's kLanes partial sums vectorize.
constexpr std::int64_t kSquaresBlock = 16384;
constexpr std::int64_t kLanes = 8;

// The sum of double(x[i])^2 over [0, n), in kLanes interleaved partial sums added at the end.
template <typename T>
double block_sum_squares(const T* x, std::int64_t n) {
  double lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (std::int64_t l = 0; l < kLanes; ++l) {
      const auto v = static_cast<double>(x[i + l]);
      lanes[l] += v * v;
    }
  }
  for (; i < n; ++i) {
    const auto v = static_cast<double>(x[i]);
    lanes[i % kLanes] += v * v;
  }
  double sum = 0.0;
  for (const double l : lanes) sum += l;
  return sum;
}

}  // namespace

// x: contiguous; out: one float64 element (see core/ops.def).
void CpuBackend::sum_squares(const Tensor& x, const Tensor& out) {
  check_sum_squares_args(x, out, *this);
  const std::int64_t n = x.numel();
  double total = 0.0;
  if (n > 0) {
    dispatch_floating(x.dtype(), "sum_squares", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      const std::int64_t blocks = (n + kSquaresBlock - 1) / kSquaresBlock;
      if (blocks == 1) {
        total = block_sum_squares(px, n);
        return;
      }
      std::vector<double> partial(static_cast<std::size_t>(blocks));
      parallel_for(
          blocks,
          [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t b = begin; b < end; ++b) {
              const std::int64_t start = b * kSquaresBlock;
              partial[static_cast<std::size_t>(b)] =
                  block_sum_squares(px + start, std::min(kSquaresBlock, n - start));
            }
          },
          kSquaresBlock);
      for (const double p : partial) total += p;
    });
  }
  *out.data<double>() = total;
}

// param, grad, exp_avg, exp_avg_sq: same shape and dtype, contiguous; the first, third and
// fourth are updated in place (see core/ops.def for the formula).
void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                            double eps, double weight_decay, bool decoupled,
                            double bias_correction1, double bias_correction2) {
  check_adamw_step_args(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
                        bias_correction1, bias_correction2, *this);
  if (param.numel() == 0) return;
  dispatch_floating(param.dtype(), "adamw_step", [&](auto tag) {
    using T = decltype(tag);
    const auto c = AdamConstants<T>::make(lr, beta1, beta2, eps, weight_decay, decoupled,
                                          bias_correction1, bias_correction2);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    if (c.coupled_decay()) {
      adam_loop<T, true>(p, g, m, v, param.numel(), c);
    } else {
      adam_loop<T, false>(p, g, m, v, param.numel(), c);
    }
  });
}

}  // namespace tinyformer::cpu
