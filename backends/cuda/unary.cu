// Elementwise functions of one tensor on the GPU, and their derivatives: one functor per op,
// handed to map() (elementwise.cuh), which picks the vectorized contiguous loop or the strided
// one. bfloat16 is computed in float32, float64 in double. float32 uses the device's library
// functions (expf, tanhf, erfcf: a few ulp at most), as accurate as the CPU's polynomials.
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/strided.cuh"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

template <typename A>
struct Constants {
  static constexpr A inv_sqrt2 = static_cast<A>(0.70710678118654752440);
  static constexpr A inv_sqrt_2pi = static_cast<A>(0.39894228040143267794);  // 1 / sqrt(2 pi)
  static constexpr A sqrt_2_over_pi = static_cast<A>(0.79788456080286535588);
  static constexpr A gelu_c = static_cast<A>(0.044715);
};

// The library functions in the precision of A: the float versions for float, so that float32
// does not silently compute in double.
template <typename A>
struct Math;
template <>
struct Math<float> {
  __device__ static float exp(float v) { return expf(v); }
  __device__ static float log(float v) { return logf(v); }
  __device__ static float sqrt(float v) { return sqrtf(v); }
  __device__ static float abs(float v) { return fabsf(v); }
  __device__ static float tanh(float v) { return tanhf(v); }
  __device__ static float erfc(float v) { return erfcf(v); }
  __device__ static float pow(float v, float a) { return powf(v, a); }
};
template <>
struct Math<double> {
  __device__ static double exp(double v) { return ::exp(v); }
  __device__ static double log(double v) { return ::log(v); }
  __device__ static double sqrt(double v) { return ::sqrt(v); }
  __device__ static double abs(double v) { return ::fabs(v); }
  __device__ static double tanh(double v) { return ::tanh(v); }
  __device__ static double erfc(double v) { return ::erfc(v); }
  __device__ static double pow(double v, double a) { return ::pow(v, a); }
};

// Phi(x) = erfc(-x / sqrt 2) / 2, the standard normal CDF. erfc keeps the relative accuracy in
// the left tail, where 1 + erf(x) would cancel.
template <typename A>
__device__ inline A normal_cdf(A v) {
  return A(0.5) * Math<A>::erfc(-v * Constants<A>::inv_sqrt2);
}

// The argument of tanh in the tanh form of GELU: sqrt(2 / pi) (x + 0.044715 x^3).
template <typename A>
__device__ inline A gelu_tanh_inner(A v) {
  return Constants<A>::sqrt_2_over_pi * (v + Constants<A>::gelu_c * v * v * v);
}

// Integer negation wraps around at INT64_MIN (as on the CPU) instead of overflowing.
__device__ inline std::int64_t wrapping_neg(std::int64_t v) {
  return static_cast<std::int64_t>(0ull - static_cast<std::uint64_t>(v));
}

// --- forward functors: A is the arithmetic type (float for bfloat16) ---

struct Neg {
  template <typename A>
  __device__ A operator()(A v) const {
    if constexpr (std::is_integral_v<A>) {
      return wrapping_neg(v);
    } else {
      return -v;
    }
  }
};
struct Abs {
  template <typename A>
  __device__ A operator()(A v) const {
    if constexpr (std::is_integral_v<A>) {
      return v < 0 ? wrapping_neg(v) : v;
    } else {
      return Math<A>::abs(v);
    }
  }
};
struct Exp {
  template <typename A>
  __device__ A operator()(A v) const {
    return Math<A>::exp(v);
  }
};
struct Log {
  template <typename A>
  __device__ A operator()(A v) const {
    return Math<A>::log(v);
  }
};
struct Sqrt {
  template <typename A>
  __device__ A operator()(A v) const {
    return Math<A>::sqrt(v);
  }
};
struct Rsqrt {  // 1 / sqrt(x) rounded twice, as on the CPU (rsqrtf would differ by an ulp)
  template <typename A>
  __device__ A operator()(A v) const {
    return A(1) / Math<A>::sqrt(v);
  }
};
struct Tanh {
  template <typename A>
  __device__ A operator()(A v) const {
    return Math<A>::tanh(v);
  }
};
struct Sigmoid {
  template <typename A>
  __device__ A operator()(A v) const {
    return A(1) / (A(1) + Math<A>::exp(-v));
  }
};
struct Relu {
  template <typename A>
  __device__ A operator()(A v) const {
    return v < A(0) ? A(0) : v;  // NaN passes through
  }
};
struct Gelu {  // x Phi(x)
  template <typename A>
  __device__ A operator()(A v) const {
    return v * normal_cdf(v);
  }
};
struct GeluTanh {
  template <typename A>
  __device__ A operator()(A v) const {
    return A(0.5) * v * (A(1) + Math<A>::tanh(gelu_tanh_inner(v)));
  }
};
// pow_scalar: the common exponents skip pow(), as on the CPU (the results can differ from
// pow() in the last bit, so the two backends must take the same branch).
struct Square {
  template <typename A>
  __device__ A operator()(A v) const {
    return v * v;
  }
};
struct Identity {
  template <typename A>
  __device__ A operator()(A v) const {
    return v;
  }
};
struct Reciprocal {
  template <typename A>
  __device__ A operator()(A v) const {
    return A(1) / v;
  }
};
template <typename A>
struct Pow {
  A a;
  __device__ A operator()(A v) const { return Math<A>::pow(v, a); }
};

// --- backward functors: (grad, x) or (grad, y), per core/ops.def ---

struct NegGrad {
  template <typename A>
  __device__ A operator()(A g) const {
    return -g;
  }
};
struct ExpGrad {  // d e^x = e^x = y
  template <typename A>
  __device__ A operator()(A g, A y) const {
    return g * y;
  }
};
struct LogGrad {
  template <typename A>
  __device__ A operator()(A g, A x) const {
    return g / x;
  }
};
struct SqrtGrad {  // 1 / (2 sqrt(x)) = 1 / (2 y)
  template <typename A>
  __device__ A operator()(A g, A y) const {
    return g / (A(2) * y);
  }
};
struct RsqrtGrad {  // -x^(-3/2) / 2 = -y^3 / 2
  template <typename A>
  __device__ A operator()(A g, A y) const {
    return A(-0.5) * g * y * y * y;
  }
};
struct AbsGrad {  // sign(x), 0 at 0
  template <typename A>
  __device__ A operator()(A g, A x) const {
    return x > A(0) ? g : (x < A(0) ? -g : A(0));
  }
};
struct TanhGrad {
  template <typename A>
  __device__ A operator()(A g, A y) const {
    return g * (A(1) - y * y);
  }
};
struct SigmoidGrad {
  template <typename A>
  __device__ A operator()(A g, A y) const {
    return g * y * (A(1) - y);
  }
};
struct ReluGrad {
  template <typename A>
  __device__ A operator()(A g, A y) const {
    return y > A(0) ? g : A(0);
  }
};
struct GeluGrad {  // Phi(x) + x phi(x)
  template <typename A>
  __device__ A operator()(A g, A x) const {
    const A pdf = Constants<A>::inv_sqrt_2pi * Math<A>::exp(A(-0.5) * x * x);
    return g * (normal_cdf(x) + x * pdf);
  }
};
// u = k (x + c x^3), t = tanh(u): d/dx = (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2.
struct GeluTanhGrad {
  template <typename A>
  __device__ A operator()(A g, A x) const {
    using C = Constants<A>;
    const A t = Math<A>::tanh(gelu_tanh_inner(x));
    const A du = C::sqrt_2_over_pi * (A(1) + A(3) * C::gelu_c * x * x);
    return g * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du);
  }
};
// pow_scalar: alpha x^(alpha - 1), with the CPU's special exponents.
struct ZeroGrad {  // alpha == 0: the output is constant
  template <typename A>
  __device__ A operator()(A, A) const {
    return A(0);
  }
};
struct PassGrad {  // alpha == 1
  template <typename A>
  __device__ A operator()(A g, A) const {
    return g;
  }
};
struct SquareGrad {  // alpha == 2
  template <typename A>
  __device__ A operator()(A g, A x) const {
    return A(2) * g * x;
  }
};
template <typename A>
struct PowGrad {
  A a;
  __device__ A operator()(A g, A x) const { return g * a * Math<A>::pow(x, a - A(1)); }
};

// out = op(x); T is the storage type.
template <typename T>
void unary_kernel(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  const char* name = unary_name(op);
  const auto run = [&](auto fn) { map<T, T>(name, Widened<T, decltype(fn)>{fn}, out, {x}); };
  if constexpr (std::is_integral_v<T>) {
    if (op == UnaryOp::neg) return run(Neg{});
    if (op == UnaryOp::abs) return run(Abs{});
    fail(name, ": unsupported dtype ", x.dtype(), " (expected float32, float64 or bfloat16)");
  } else {
    using A = acc_t<T>;
    switch (op) {
      case UnaryOp::neg:
        return run(Neg{});
      case UnaryOp::exp:
        return run(Exp{});
      case UnaryOp::log:
        return run(Log{});
      case UnaryOp::sqrt:
        return run(Sqrt{});
      case UnaryOp::rsqrt:
        return run(Rsqrt{});
      case UnaryOp::abs:
        return run(Abs{});
      case UnaryOp::tanh:
        return run(Tanh{});
      case UnaryOp::sigmoid:
        return run(Sigmoid{});
      case UnaryOp::relu:
        return run(Relu{});
      case UnaryOp::gelu:
        return run(Gelu{});
      case UnaryOp::gelu_tanh:
        return run(GeluTanh{});
      case UnaryOp::pow_scalar:
        if (alpha == 2) return run(Square{});
        if (alpha == 1) return run(Identity{});
        if (alpha == 0.5) return run(Sqrt{});
        if (alpha == -1) return run(Reciprocal{});
        return run(Pow<A>{static_cast<A>(alpha)});
    }
    fail("unary: unknown op ", static_cast<int>(op));
  }
}

// out = grad * d op / dx, reading x or y = op(x) (whichever core/ops.def says is defined).
template <typename T>
void unary_backward_kernel(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                           const Tensor& out, double alpha) {
  using A = acc_t<T>;
  const char* name = unary_name(op);
  const auto with_x = [&](auto fn) {
    map<T, T, T>(name, Widened<T, decltype(fn)>{fn}, out, {grad, x});
  };
  const auto with_y = [&](auto fn) {
    map<T, T, T>(name, Widened<T, decltype(fn)>{fn}, out, {grad, y});
  };
  switch (op) {
    case UnaryOp::neg:
      return map<T, T>(name, Widened<T, NegGrad>{}, out, {grad});
    case UnaryOp::exp:
      return with_y(ExpGrad{});
    case UnaryOp::log:
      return with_x(LogGrad{});
    case UnaryOp::sqrt:
      return with_y(SqrtGrad{});
    case UnaryOp::rsqrt:
      return with_y(RsqrtGrad{});
    case UnaryOp::abs:
      return with_x(AbsGrad{});
    case UnaryOp::tanh:
      return with_y(TanhGrad{});
    case UnaryOp::sigmoid:
      return with_y(SigmoidGrad{});
    case UnaryOp::relu:
      return with_y(ReluGrad{});
    case UnaryOp::gelu:
      return with_x(GeluGrad{});
    case UnaryOp::gelu_tanh:
      return with_x(GeluTanhGrad{});
    case UnaryOp::pow_scalar:
      if (alpha == 0) return with_x(ZeroGrad{});
      if (alpha == 1) return with_x(PassGrad{});
      if (alpha == 2) return with_x(SquareGrad{});
      return with_x(PowGrad<A>{static_cast<A>(alpha)});
  }
  fail("unary_backward: unknown op ", static_cast<int>(op));
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
