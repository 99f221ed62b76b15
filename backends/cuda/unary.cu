// Elementwise functions of one tensor on the GPU, and their derivatives: one generic kernel
// each, which runs the op's functor from core/unary_math.h (the math every device shares)
// inside map() (elementwise.cuh), which picks the vectorized contiguous loop or the strided one.
// bfloat16 is computed in float32 (Widened converts), float64 in double.
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/strided.cuh"
#include "core/op_checks.h"
#include "core/unary_math.h"

namespace tinyformer::cuda {

namespace {

// The device-side calls of a UnaryMath functor M (A is its arithmetic type).
template <typename M>
struct Forward {
  M math;
  template <typename A>
  __device__ A operator()(A x) const {
    return math.forward(x);
  }
};
template <typename M>
struct Derivative {  // (grad, x or y)
  M math;
  template <typename A>
  __device__ A operator()(A g, A v) const {
    return math.derivative(g, v);
  }
};
template <typename M>
struct DerivativeOfGrad {  // rows that read neither x nor y
  M math;
  template <typename A>
  __device__ A operator()(A g) const {
    return math.derivative(g, A(0));
  }
};

// out = op(x); T is the storage type.
template <typename T>
void unary_kernel(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  const char* name = unary_name(op);
  visit_unary<acc_t<T>>(op, alpha, [&](auto row, auto math) {
    if constexpr (std::is_integral_v<T> && !unary_traits(row.value).int64) {
      fail(name, ": unsupported dtype ", x.dtype(), " (expected float32, float64 or bfloat16)");
    } else {
      using F = Forward<decltype(math)>;
      map<T, T>(name, Widened<T, F>{F{math}}, out, {x});
    }
  });
}

// out = grad * op'(x), reading x, y = op(x) or neither (the row's `reads`).
template <typename T>
void unary_backward_kernel(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                           const Tensor& out, double alpha) {
  const char* name = unary_name(op);
  visit_unary<acc_t<T>>(op, alpha, [&](auto row, auto math) {
    constexpr UnaryReads reads = unary_traits(row.value).reads;
    if constexpr (reads == UnaryReads::none) {
      using F = DerivativeOfGrad<decltype(math)>;
      map<T, T>(name, Widened<T, F>{F{math}}, out, {grad});
    } else {
      using F = Derivative<decltype(math)>;
      map<T, T, T>(name, Widened<T, F>{F{math}}, out, {grad, reads == UnaryReads::x ? x : y});
    }
  });
}

}  // namespace

// x, out: same shape, any strides; out = op(x).
void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  const char* name = unary_name(op);
  check_unary_args(op, x, out, *this);
  dispatch<float, double, bf16, std::int64_t>(
      x.dtype(), name, [&](auto tag) { unary_kernel<decltype(tag)>(op, x, out, alpha); });
}

// grad, x or y, out: same shape; out = grad * op'(x).
void CudaBackend::unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                                 const Tensor& out, double alpha) {
  const char* name = unary_name(op);
  check_unary_backward_args(op, grad, x, y, out, *this);
  dispatch_floating(out.dtype(), name, [&](auto tag) {
    unary_backward_kernel<decltype(tag)>(op, grad, x, y, out, alpha);
  });
}

}  // namespace tinyformer::cuda
