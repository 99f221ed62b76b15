// The math of every binary elementwise op (the TF_BINARY rows of core/elementwise.def), written
// once for both devices: BinaryMath<op, T> is the op's functor, and visit_binary() hands it to
// a backend's loop, so the CPU and CUDA backends keep one generic loop and no formula.
//
// T is the arithmetic type: float, double (bfloat16 is computed in float by the GPU's loop),
// int64, or bool (comparisons only). Arithmetic ops return T, comparisons bool.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/host_device.h"
#include "core/math.h"
#include "core/ops.h"

namespace tinyformer {

// int64 arithmetic wraps around (two's complement) instead of overflowing, which C++ leaves
// undefined: computed on the unsigned type, where overflow is defined.
template <typename T>
TF_HOST_DEVICE inline std::uint64_t as_unsigned(T v) {
  return static_cast<std::uint64_t>(v);
}

template <BinaryOp op, typename T>
struct BinaryMath;

template <typename T>
struct BinaryMath<BinaryOp::add, T> {
  TF_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(as_unsigned(a) + as_unsigned(b));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct BinaryMath<BinaryOp::sub, T> {
  TF_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(as_unsigned(a) - as_unsigned(b));
    } else {
      return a - b;
    }
  }
};

template <typename T>
struct BinaryMath<BinaryOp::mul, T> {
  TF_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(as_unsigned(a) * as_unsigned(b));
    } else {
      return a * b;
    }
  }
};

// Integer division truncates toward zero and INT64_MIN / -1 wraps. A zero divisor would trap, so
// its lane gives 0; the backend checks divides_by_zero(b) and throws after the loop.
template <typename T>
struct BinaryMath<BinaryOp::div, T> {
  TF_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return 0;
      return b == -1 ? static_cast<T>(0ull - as_unsigned(a)) : a / b;
    } else {
      return a / b;
    }
  }
  TF_HOST_DEVICE static bool divides_by_zero(T b) { return std::is_integral_v<T> && b == 0; }
};

// maximum and minimum propagate NaN, as PyTorch does (a plain a > b ? a : b would drop it).
template <typename T>
struct BinaryMath<BinaryOp::maximum, T> {
  TF_HOST_DEVICE T operator()(T a, T b) const { return math::is_nan(a) || a > b ? a : b; }
};

template <typename T>
struct BinaryMath<BinaryOp::minimum, T> {
  TF_HOST_DEVICE T operator()(T a, T b) const { return math::is_nan(a) || a < b ? a : b; }
};

template <typename T>
struct BinaryMath<BinaryOp::eq, T> {
  TF_HOST_DEVICE bool operator()(T a, T b) const { return a == b; }
};
template <typename T>
struct BinaryMath<BinaryOp::ne, T> {
  TF_HOST_DEVICE bool operator()(T a, T b) const { return a != b; }
};
template <typename T>
struct BinaryMath<BinaryOp::lt, T> {
  TF_HOST_DEVICE bool operator()(T a, T b) const { return a < b; }
};
template <typename T>
struct BinaryMath<BinaryOp::le, T> {
  TF_HOST_DEVICE bool operator()(T a, T b) const { return a <= b; }
};
template <typename T>
struct BinaryMath<BinaryOp::gt, T> {
  TF_HOST_DEVICE bool operator()(T a, T b) const { return a > b; }
};
template <typename T>
struct BinaryMath<BinaryOp::ge, T> {
  TF_HOST_DEVICE bool operator()(T a, T b) const { return a >= b; }
};

// Calls f(row, math): row is std::integral_constant<BinaryOp, op> (is_comparison(row.value) is
// a compile-time constant), math the op's functor for arithmetic type T.
template <typename T, typename F>
void visit_binary(BinaryOp op, F&& f) {
  switch (op) {
#define TF_BINARY(name, kind)                                                               \
  case BinaryOp::name:                                                                      \
    f(std::integral_constant<BinaryOp, BinaryOp::name>{}, BinaryMath<BinaryOp::name, T>{}); \
    return;
#include "core/elementwise.def"
  }
}

}  // namespace tinyformer
