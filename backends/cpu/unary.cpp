// Elementwise functions of one tensor on the CPU, and their derivatives: one generic loop each,
// which hands the op's functor from core/unary_math.h (the math every device shares) to map()
// (strided.h), which picks the contiguous or strided loop. The float32 math is built to
// vectorize in these loops (core/math.h).
#include <cstdint>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/op_checks.h"
#include "core/unary_math.h"

namespace tinyformer::cpu {

namespace {

// An op's time per element against a streaming copy's (parallel.h): the ops that only move,
// negate or clamp a value are as cheap as a copy; the others evaluate a polynomial or more.
constexpr std::int64_t unary_cost(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::relu ? 1 : 8;
}

// out = op(x)
template <typename T>
void unary_kernel(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  visit_unary<T>(op, alpha, [&](auto row, auto math) {
    if constexpr (std::is_integral_v<T> && !unary_traits(row.value).int64) {
      fail(unary_name(op), ": unsupported dtype ", x.dtype(), " (expected float32 or float64)");
    } else {
      map<T, T>(
          out, {x}, [math](T v) { return math.forward(v); }, unary_cost(op));
    }
  });
}

// out = grad * op'(x), reading x, y = op(x) or neither (the row's `reads`).
template <typename T>
void unary_backward_kernel(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                           const Tensor& out, double alpha) {
  visit_unary<T>(op, alpha, [&](auto row, auto math) {
    constexpr UnaryReads reads = unary_traits(row.value).reads;
    if constexpr (reads == UnaryReads::none) {
      map<T, T>(
          out, {grad}, [math](T g) { return math.derivative(g, T(0)); }, unary_cost(op));
    } else {
      map<T, T, T>(
          out, {grad, reads == UnaryReads::x ? x : y},
          [math](T g, T v) { return math.derivative(g, v); }, unary_cost(op));
    }
  });
}

}  // namespace

// x, out: same shape, any strides; out = op(x).
void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  const char* name = unary_name(op);
  check_unary_args(op, x, out, *this);
  dispatch<float, double, std::int64_t>(
      x.dtype(), name, [&](auto tag) { unary_kernel<decltype(tag)>(op, x, out, alpha); });
}

// grad, x or y, out: same shape; out = grad * op'(x).
void CpuBackend::unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                                const Tensor& out, double alpha) {
  const char* name = unary_name(op);
  check_unary_backward_args(op, grad, x, y, out, *this);
  dispatch_floating(out.dtype(), name, [&](auto tag) {
    unary_backward_kernel<decltype(tag)>(op, grad, x, y, out, alpha);
  });
}

}  // namespace tinyformer::cpu
