// The math of every unary elementwise op (the TF_UNARY rows of core/elementwise.def), written
// once for both devices: UnaryMath<op, T> holds the forward and the derivative, and
// visit_unary() hands the op's functor to a backend's loop (the CPU's map() and the CUDA
// kernels), so a backend has one generic loop each for forward and backward and no formula.
//
// T is the arithmetic type: float or double (bfloat16 is computed in float by the GPU's loop),
// or int64 for the rows whose int64 column is true. Each UnaryMath has
//   forward(x)        op(x)
//   derivative(g, v)  g * op'(x), where v is what the row's `reads` column names: x, y = op(x),
//                     or nothing (then the loop passes 0 and the derivative ignores it).
// Adding a row without its UnaryMath here is a compile error in every backend.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "core/host_device.h"
#include "core/math.h"
#include "core/ops.h"

namespace tinyformer {

template <UnaryOp op, typename T>
struct UnaryMath;

template <typename T>
struct UnaryMath<UnaryOp::neg, T> {
  TF_HOST_DEVICE T forward(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return math::wrapping_neg(x);
    } else {
      return -x;
    }
  }
  TF_HOST_DEVICE T derivative(T g, T) const { return -g; }
};

template <typename T>
struct UnaryMath<UnaryOp::exp, T> {
  TF_HOST_DEVICE T forward(T x) const { return math::exp(x); }
  TF_HOST_DEVICE T derivative(T g, T y) const { return g * y; }  // d e^x = e^x = y
};

template <typename T>
struct UnaryMath<UnaryOp::log, T> {
  TF_HOST_DEVICE T forward(T x) const { return math::log(x); }
  TF_HOST_DEVICE T derivative(T g, T x) const { return g / x; }
};

template <typename T>
struct UnaryMath<UnaryOp::sqrt, T> {
  TF_HOST_DEVICE T forward(T x) const { return math::sqrt(x); }
  // 1 / (2 sqrt(x)) = 1 / (2 y)
  TF_HOST_DEVICE T derivative(T g, T y) const { return g / (T(2) * y); }
};

template <typename T>
struct UnaryMath<UnaryOp::rsqrt, T> {
  // 1 / sqrt(x) rounded twice (a hardware rsqrt would differ between devices)
  TF_HOST_DEVICE T forward(T x) const { return T(1) / math::sqrt(x); }
  // -x^(-3/2) / 2 = -y^3 / 2
  TF_HOST_DEVICE T derivative(T g, T y) const { return T(-0.5) * g * y * y * y; }
};

template <typename T>
struct UnaryMath<UnaryOp::abs, T> {
  TF_HOST_DEVICE T forward(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return x < 0 ? math::wrapping_neg(x) : x;
    } else {
      return math::abs(x);
    }
  }
  // sign(x), 0 at 0
  TF_HOST_DEVICE T derivative(T g, T x) const { return x > T(0) ? g : (x < T(0) ? -g : T(0)); }
};

template <typename T>
struct UnaryMath<UnaryOp::tanh, T> {
  TF_HOST_DEVICE T forward(T x) const { return math::tanh(x); }
  TF_HOST_DEVICE T derivative(T g, T y) const { return g * (T(1) - y * y); }
};

template <typename T>
struct UnaryMath<UnaryOp::sigmoid, T> {
  TF_HOST_DEVICE T forward(T x) const { return math::sigmoid(x); }
  TF_HOST_DEVICE T derivative(T g, T y) const { return g * y * (T(1) - y); }
};

template <typename T>
struct UnaryMath<UnaryOp::relu, T> {
  TF_HOST_DEVICE T forward(T x) const { return x < T(0) ? T(0) : x; }  // NaN passes through
  TF_HOST_DEVICE T derivative(T g, T y) const { return y > T(0) ? g : T(0); }
};

// x Phi(x), Phi the standard normal CDF.
template <typename T>
struct UnaryMath<UnaryOp::gelu, T> {
  TF_HOST_DEVICE T forward(T x) const { return x * math::normal_cdf(x); }
  // Phi(x) + x phi(x), both from one call (for float32, one exponential)
  TF_HOST_DEVICE T derivative(T g, T x) const {
    const math::NormalPair<T> n = math::normal_cdf_pdf(x);
    return g * (n.cdf + x * n.pdf);
  }
};

// x (1 + tanh(u)) / 2 with u = k (x + c x^3), k = sqrt(2 / pi), c = 0.044715.
template <typename T>
struct UnaryMath<UnaryOp::gelu_tanh, T> {
  TF_HOST_DEVICE T forward(T x) const {
    return T(0.5) * x * (T(1) + math::tanh(math::gelu_tanh_inner(x)));
  }
  // (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2, t = tanh(u)
  TF_HOST_DEVICE T derivative(T g, T x) const {
    using C = math::Constants<T>;
    const T t = math::tanh(math::gelu_tanh_inner(x));
    const T du = C::sqrt_2_over_pi * (T(1) + T(3) * C::gelu_c * x * x);
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
  }
};

// SiLU (swish): x sigmoid(x).
template <typename T>
struct UnaryMath<UnaryOp::silu, T> {
  TF_HOST_DEVICE T forward(T x) const { return x * math::sigmoid(x); }
  // s + x s (1 - s) = s (1 + x (1 - s)), s = sigmoid(x)
  TF_HOST_DEVICE T derivative(T g, T x) const {
    const T s = math::sigmoid(x);
    return g * s * (T(1) + x * (T(1) - s));
  }
};

// x^alpha. The common exponents skip pow(), which is many times slower than a multiply; the
// results can differ from pow() in the last bit, so every device takes the same branch: the
// one visit() picks once per call, outside the loop.
template <typename T>
struct UnaryMath<UnaryOp::pow_scalar, T> {
  T alpha;
  TF_HOST_DEVICE T forward(T x) const { return math::pow(x, alpha); }
  TF_HOST_DEVICE T derivative(T g, T x) const { return g * alpha * math::pow(x, alpha - T(1)); }

  struct Zero {  // x^0 = 1, NaN included (as pow gives)
    TF_HOST_DEVICE T forward(T) const { return T(1); }
    TF_HOST_DEVICE T derivative(T, T) const { return T(0); }
  };
  struct One {
    TF_HOST_DEVICE T forward(T x) const { return x; }
    TF_HOST_DEVICE T derivative(T g, T) const { return g; }
  };
  struct Two {
    TF_HOST_DEVICE T forward(T x) const { return x * x; }
    TF_HOST_DEVICE T derivative(T g, T x) const { return T(2) * g * x; }
  };
  struct Half {
    TF_HOST_DEVICE T forward(T x) const { return math::sqrt(x); }
    TF_HOST_DEVICE T derivative(T g, T x) const { return g / (T(2) * math::sqrt(x)); }
  };
  struct MinusOne {
    TF_HOST_DEVICE T forward(T x) const { return T(1) / x; }
    TF_HOST_DEVICE T derivative(T g, T x) const { return -g / (x * x); }
  };

  template <typename F>
  static void visit(double exponent, F&& f) {
    if (exponent == 0) return f(Zero{});
    if (exponent == 1) return f(One{});
    if (exponent == 2) return f(Two{});
    if (exponent == 0.5) return f(Half{});
    if (exponent == -1) return f(MinusOne{});
    f(UnaryMath{static_cast<T>(exponent)});
  }
};

// Whether a row's UnaryMath takes the call's alpha (its visit() picks the functor from it).
template <UnaryOp op>
inline constexpr bool unary_takes_alpha = requires(void (*f)(UnaryMath<op, float>)) {
  UnaryMath<op, float>::visit(0.0, f);
};

// The same, per op at run time (for tests and callers that hold a UnaryOp value).
inline constexpr std::array<bool, unary_op_count> unary_takes_alpha_table = {
#define TF_UNARY(name, reads, domain, int64) unary_takes_alpha<UnaryOp::name>,
#include "core/elementwise.def"
};
inline constexpr bool takes_alpha(UnaryOp op) {
  return unary_takes_alpha_table[static_cast<std::size_t>(op)];
}

// Calls f(row, math): row is std::integral_constant<UnaryOp, op> (so the loop can read the row's
// traits at compile time: unary_traits(row.value)), math the op's functor for arithmetic type T,
// built from alpha where the op takes one.
template <typename T, typename F>
void visit_unary(UnaryOp op, double alpha, F&& f) {
  switch (op) {
#define TF_UNARY(name, reads, domain, int64)                    \
  case UnaryOp::name: {                                         \
    using Row = std::integral_constant<UnaryOp, UnaryOp::name>; \
    using Math = UnaryMath<UnaryOp::name, T>;                   \
    if constexpr (unary_takes_alpha<UnaryOp::name>) {           \
      Math::visit(alpha, [&](auto math) { f(Row{}, math); });   \
    } else {                                                    \
      f(Row{}, Math{});                                         \
    }                                                           \
    return;                                                     \
  }
#include "core/elementwise.def"
  }
}

// The activation of a fused product's epilogue (core/ops.h), for the loops that apply it after
// a library's product: calls f(math) with the row's UnaryMath for arithmetic type T, or with
// the identity for Epilogue::none; math.forward(z) is the activation.
template <typename T>
struct IdentityMath {
  TF_HOST_DEVICE T forward(T x) const { return x; }
};
template <typename T, typename F>
void visit_epilogue(Epilogue epilogue, F&& f) {
  switch (epilogue) {
    case Epilogue::none:
      return f(IdentityMath<T>{});
    case Epilogue::relu:
      return f(UnaryMath<UnaryOp::relu, T>{});
    case Epilogue::gelu:
      return f(UnaryMath<UnaryOp::gelu, T>{});
    case Epilogue::gelu_tanh:
      return f(UnaryMath<UnaryOp::gelu_tanh, T>{});
  }
}

}  // namespace tinyformer
