// Elementwise functions of one tensor on the CPU, and their derivatives. Each op is a small
// lambda handed to map() (strided.h), which picks the contiguous or strided loop.
//
// float32 exp, tanh, sigmoid and the GELUs use the polynomial versions below instead of
// std::exp/tanh/erf, which are scalar library calls on float: in a contiguous loop the compiler
// vectorizes them (measured on one core, 16M elements: exp 47 -> 9 ms, GELU 77 -> 27 ms). They
// are within a few ulp of the exact result. float64 keeps the library functions: it is the
// dtype of gradient checks, where accuracy is the point.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

template <typename T>
struct Constants {
  static constexpr T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
  static constexpr T inv_sqrt_2pi = static_cast<T>(0.39894228040143267794);  // 1 / sqrt(2 pi)
  static constexpr T sqrt_2_over_pi = static_cast<T>(0.79788456080286535588);
  static constexpr T gelu_c = static_cast<T>(0.044715);
};

// --- float32 math in a form the compiler vectorizes (selects, no calls, no branches) ---

// e^x: x = n ln2 + r with |r| <= ln2 / 2, e^r from Cephes' degree-6 polynomial (about 1 ulp),
// 2^n written into the exponent bits. Results below the smallest normal float flush to 0.
inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kMin = -87.3365447f, kMax = 88.7228391f;
  float xc = x < kMin ? kMin : x;
  xc = xc > kMax ? kMax : xc;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = xc - n * kLn2Hi - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  float y = p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
  y = x < kMin ? 0.0f : y;
  return x > kMax ? std::numeric_limits<float>::infinity() : y;  // NaN stays NaN
}

// tanh: Cephes' odd polynomial below |x| = 0.625 (where 1 - 2 / (e^2x + 1) would cancel),
// the exponential form above. About 2 ulp.
inline float fast_tanh(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float large = 1.0f - 2.0f / (fast_exp(2.0f * std::abs(x)) + 1.0f);
  return std::abs(x) < 0.625f ? small : std::copysign(large, x);
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, with erfc(z), z >= 0, from Numerical
// Recipes' Chebyshev fit (relative error < 1.2e-7). Going through erfc of |x| keeps the relative
// accuracy in the left tail, where 1 + erf(x) would cancel.
inline float fast_normal_cdf(float x) {
  const float z = std::abs(x) * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float half_erfc = 0.5f * t * fast_exp(p - z * z);
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

// The functions the kernels call: fast_* for float, the library for double.
template <typename T>
struct Math {
  static T exp(T v) { return std::exp(v); }
  static T tanh(T v) { return std::tanh(v); }
  static T normal_cdf(T v) { return T(0.5) * std::erfc(-v * Constants<T>::inv_sqrt2); }
};
template <>
struct Math<float> {
  static float exp(float v) { return fast_exp(v); }
  static float tanh(float v) { return fast_tanh(v); }
  static float normal_cdf(float v) { return fast_normal_cdf(v); }
};

// Integer negation and abs wrap around at INT64_MIN instead of overflowing (undefined).
inline std::int64_t wrapping_neg(std::int64_t v) {
  return static_cast<std::int64_t>(0ull - static_cast<std::uint64_t>(v));
}

template <typename T>
void unary_kernel(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  using C = Constants<T>;
  using M = Math<T>;
  const auto run = [&](auto f) { map<T, T>(out, {x}, f); };
  if constexpr (std::is_integral_v<T>) {
    if (op == UnaryOp::neg) return run([](T v) { return wrapping_neg(v); });
    if (op == UnaryOp::abs) return run([](T v) { return v < 0 ? wrapping_neg(v) : v; });
    fail(unary_name(op), ": unsupported dtype ", x.dtype(), " (expected float32 or float64)");
  } else {
    const T a = static_cast<T>(alpha);
    switch (op) {
      case UnaryOp::neg:
        return run([](T v) { return -v; });
      case UnaryOp::exp:
        return run([](T v) { return M::exp(v); });
      case UnaryOp::log:
        return run([](T v) { return std::log(v); });
      case UnaryOp::sqrt:
        return run([](T v) { return std::sqrt(v); });
      case UnaryOp::rsqrt:
        return run([](T v) { return T(1) / std::sqrt(v); });
      case UnaryOp::abs:
        return run([](T v) { return std::abs(v); });
      case UnaryOp::tanh:
        return run([](T v) { return M::tanh(v); });
      case UnaryOp::sigmoid:
        return run([](T v) { return T(1) / (T(1) + M::exp(-v)); });
      case UnaryOp::relu:
        return run([](T v) { return v < T(0) ? T(0) : v; });  // NaN passes through
      case UnaryOp::gelu:  // x Phi(x), Phi the standard normal CDF
        return run([](T v) { return v * M::normal_cdf(v); });
      case UnaryOp::gelu_tanh:
        return run([](T v) {
          return T(0.5) * v * (T(1) + M::tanh(C::sqrt_2_over_pi * (v + C::gelu_c * v * v * v)));
        });
      case UnaryOp::pow_scalar:
        // The common exponents skip pow(), which is many times slower than a multiply.
        if (alpha == 2) return run([](T v) { return v * v; });
        if (alpha == 1) return run([](T v) { return v; });
        if (alpha == 0.5) return run([](T v) { return std::sqrt(v); });
        if (alpha == -1) return run([](T v) { return T(1) / v; });
        return run([a](T v) { return std::pow(v, a); });
    }
    fail("unary: unknown op ", static_cast<int>(op));
  }
}

// out = grad * d op / dx, reading x or y = op(x) (whichever core/ops.def says is defined).
template <typename T>
void unary_backward_kernel(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                           const Tensor& out, double alpha) {
  using C = Constants<T>;
  using M = Math<T>;
  const auto with_x = [&](auto f) { map<T, T, T>(out, {grad, x}, f); };
  const auto with_y = [&](auto f) { map<T, T, T>(out, {grad, y}, f); };
  const T a = static_cast<T>(alpha);
  switch (op) {
    case UnaryOp::neg:
      return map<T, T>(out, {grad}, [](T g) { return -g; });
    case UnaryOp::exp:  // d e^x = e^x = y
      return with_y([](T g, T v) { return g * v; });
    case UnaryOp::log:
      return with_x([](T g, T v) { return g / v; });
    case UnaryOp::sqrt:  // 1 / (2 sqrt(x)) = 1 / (2 y)
      return with_y([](T g, T v) { return g / (T(2) * v); });
    case UnaryOp::rsqrt:  // -x^(-3/2) / 2 = -y^3 / 2
      return with_y([](T g, T v) { return T(-0.5) * g * v * v * v; });
    case UnaryOp::abs:  // sign(x), 0 at 0
      return with_x([](T g, T v) { return v > T(0) ? g : (v < T(0) ? -g : T(0)); });
    case UnaryOp::tanh:
      return with_y([](T g, T v) { return g * (T(1) - v * v); });
    case UnaryOp::sigmoid:
      return with_y([](T g, T v) { return g * v * (T(1) - v); });
    case UnaryOp::relu:
      return with_y([](T g, T v) { return v > T(0) ? g : T(0); });
    case UnaryOp::gelu:  // Phi(x) + x phi(x)
      return with_x([](T g, T v) {
        const T pdf = C::inv_sqrt_2pi * M::exp(T(-0.5) * v * v);
        return g * (M::normal_cdf(v) + v * pdf);
      });
    case UnaryOp::gelu_tanh:  // u = k (x + c x^3): d/dx = (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2)
                              // / 2
      return with_x([](T g, T v) {
        const T t = M::tanh(C::sqrt_2_over_pi * (v + C::gelu_c * v * v * v));
        const T du = C::sqrt_2_over_pi * (T(1) + T(3) * C::gelu_c * v * v);
        return g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
      });
    case UnaryOp::pow_scalar:  // alpha x^(alpha - 1)
      if (alpha == 0) return with_x([](T, T) { return T(0); });
      if (alpha == 1) return with_x([](T g, T) { return g; });
      if (alpha == 2) return with_x([](T g, T v) { return T(2) * g * v; });
      return with_x([a](T g, T v) { return g * a * std::pow(v, a - T(1)); });
  }
  fail("unary_backward: unknown op ", static_cast<int>(op));
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
