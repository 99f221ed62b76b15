// The scalar math every device shares: exp, tanh, the normal CDF, sigmoid and the GELU
// constants as host-and-device functions, called by the elementwise ops (core/unary_math.h),
// softmax and layer norm on the CPU and the GPU alike.
//
// float32 exp, tanh and the normal CDF are polynomials built from multiplies, adds and selects
// (no calls, no branches), so that a CPU loop over them vectorizes, where the library's float
// functions are scalar calls. They are within a few ulp of the exact result. The GPU runs the same
// polynomials for float32 (and for bfloat16, which it computes in float32) rather than its own
// expf/tanhf/erfcf: the elementwise kernels are memory-bound, so a dozen fused multiply-adds cost
// nothing there, and one formula means the CPU tests prove the GPU's values too. float64 (the dtype
// of gradient checks, where accuracy is the point) uses the library functions on both devices.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#include "core/host_device.h"

namespace tinyformer::math {

template <typename T>
struct Constants {
  static constexpr T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
  static constexpr T inv_sqrt_2pi = static_cast<T>(0.39894228040143267794);  // 1 / sqrt(2 pi)
  static constexpr T sqrt_2_over_pi = static_cast<T>(0.79788456080286535588);
  static constexpr T gelu_c = static_cast<T>(0.044715);  // the cubic term of tanh-GELU
  static constexpr T two_pi = static_cast<T>(6.28318530717958647693);
};

// --- the library functions, in the precision of T on either device (float stays float) ---

#if defined(__CUDA_ARCH__)
#define TF_LIBRARY_1(name)                  \
  template <typename T>                     \
  TF_HOST_DEVICE inline T name(T v) {       \
    if constexpr (std::is_same_v<T, float>) \
      return ::name##f(v);                  \
    else                                    \
      return ::name(v);                     \
  }
#else
#define TF_LIBRARY_1(name)            \
  template <typename T>               \
  TF_HOST_DEVICE inline T name(T v) { \
    return std::name(v);              \
  }
#endif
TF_LIBRARY_1(sqrt)
TF_LIBRARY_1(log)
TF_LIBRARY_1(log1p)
TF_LIBRARY_1(sin)
TF_LIBRARY_1(cos)
TF_LIBRARY_1(erfc)
#undef TF_LIBRARY_1

template <typename T>
TF_HOST_DEVICE inline T pow(T v, T a) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return ::powf(v, a);
  else
    return ::pow(v, a);
#else
  return std::pow(v, a);
#endif
}

template <typename T>
TF_HOST_DEVICE inline T fma(T a, T b, T c) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return ::fmaf(a, b, c);
  else
    return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// |v| for floating T: fabs on the host (one bitwise and, which vectorizes), a select on the GPU.
template <typename T>
TF_HOST_DEVICE inline T abs(T v) {
#if defined(__CUDA_ARCH__)
  return v < T(0) ? -v : v;
#else
  return std::fabs(v);
#endif
}

// v != v for floating T (a NaN); false for integers.
template <typename T>
TF_HOST_DEVICE inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

// Integer negation wraps around at INT64_MIN (two's complement) instead of overflowing, which
// C++ leaves undefined.
TF_HOST_DEVICE inline std::int64_t wrapping_neg(std::int64_t v) {
  return static_cast<std::int64_t>(0ull - static_cast<std::uint64_t>(v));
}

// --- float32 polynomials: selects, no calls, no branches ---

TF_HOST_DEVICE inline float float_from_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

TF_HOST_DEVICE inline std::uint32_t bits_from_float(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  return std::bit_cast<std::uint32_t>(v);
#endif
}

// e^x: x = n ln2 + r with |r| <= ln2 / 2, e^r from Cephes' degree-6 polynomial (about 1 ulp),
// times 2^n by adding n to the exponent bits of e^r (one integer add; exact wherever the result
// is a normal float, and n = 128 with e^r < 1 still lands on a finite result). From ln(FLT_MAX)
// (kExpMax, rounded up to a float whose e^x overflows) on the result is +inf, below ln(FLT_MIN) it
// is 0 (so exp(-inf), a masked logit, is exactly 0); a NaN stays NaN. Rounding to an integer
// adds and subtracts 1.5 * 2^23: std::nearbyint and std::floor compile to library calls, which
// stop vectorization.
inline constexpr float kExpMin = -87.3365447f, kExpMax = 88.7228391f;

// e^x for x in [kExpMin, kExpMax] (or NaN): the polynomial and the exponent add of exp_poly.
TF_HOST_DEVICE inline float exp_poly_in_range(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = x - n * kLn2Hi - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // A NaN x leaves n NaN, and converting a NaN to an integer is undefined behaviour: this
  // select (a compare and a mask) makes that n 0, so that p, NaN too, gets nothing added to its
  // exponent bits and stays NaN. Unsigned arithmetic keeps the shifted sum from overflowing a
  // signed type.
  const float n_finite = n == n ? n : 0.0f;
  const auto ni = static_cast<std::uint32_t>(static_cast<std::int32_t>(n_finite));
  return float_from_bits(bits_from_float(p) + (ni << 23));
}

TF_HOST_DEVICE inline float exp_poly(float x) {
  float xc = x < kExpMin ? kExpMin : x;
  xc = xc > kExpMax ? kExpMax : xc;
  const float y = x < kExpMin ? 0.0f : exp_poly_in_range(xc);
  return x >= kExpMax ? std::numeric_limits<float>::infinity() : y;
}

// exp_poly(x) for x <= 0 or NaN, the same bits, without the overflow test: softmax's
// exp(x - max(x)) is never positive, and the exponential is much of a softmax row's work
// (fused attention's rows run it: benchmark_attention --quick --profile, row "attention").
TF_HOST_DEVICE inline float exp_poly_nonpositive(float x) {
  const float xc = x < kExpMin ? kExpMin : x;
  const float y = exp_poly_in_range(xc);
  return x < kExpMin ? 0.0f : y;
}

// tanh: Cephes' odd polynomial below |x| = 0.625 (where 1 - 2 / (e^2x + 1) would cancel), the
// exponential form above. About 2 ulp.
TF_HOST_DEVICE inline float tanh_poly(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float ax = abs(x);
  const float large = 1.0f - 2.0f / (exp_poly(2.0f * ax) + 1.0f);
  return ax < 0.625f ? small : (x < 0.0f ? -large : large);
}

// The standard normal CDF Phi(x) and density phi(x) = e^(-x^2/2) / sqrt(2 pi) from one
// exponential. For either sign, Phi(-|x|) = R(|x|) e^(-x^2/2), where R(a) = erfcx(a / sqrt 2) / 2
// is smooth and slowly varying; R(a) = t Q(t) with t = 1 / (1 + a / (2 sqrt 2)) and Q a degree-8
// polynomial fitted for the least largest relative error over a in [0, 14] (3.3e-8; the fit is
// docs/fits/normal_cdf.py). Phi(x) is 1 - Phi(-x) for x >= 0, so the left tail keeps its
// relative accuracy where 1 + erf(x) would cancel. x^2 / 2 is carried as a float plus the error
// of its rounding (from a fused multiply-add), by which the exponential is corrected: the
// rounding alone would cost 1e-5 relatively at |x| = 10. Against double over [-13, 10]: Phi and
// phi within 4e-7 relatively (tests/core/test_math.cpp). |x| above 16, where Phi(-|x|) is below
// the smallest float, is taken as 16, which keeps the terms finite at +-inf; a NaN stays NaN.
template <typename T>
struct NormalPair {
  T cdf;
  T pdf;
};

TF_HOST_DEVICE inline NormalPair<float> normal_cdf_pdf_poly(float x) {
  const float ax = abs(x);
  const float a = ax > 16.0f ? 16.0f : ax;
  const float t = 1.0f / (1.0f + 0.35355339f * a);
  float q = -2.98375152e-02f;  // Q(t), from docs/fits/normal_cdf.py
  q = q * t + 1.43667430e-01f;
  q = q * t - 2.46237323e-01f;
  q = q * t + 1.41785547e-01f;
  q = q * t - 1.50204264e-02f;
  q = q * t + 1.01986006e-01f;
  q = q * t + 1.21409185e-01f;
  q = q * t + 1.41204715e-01f;
  q = q * t + 1.41042367e-01f;
  const float a2 = a * a;
  const float half_sq = 0.5f * a2;                  // x^2 / 2, rounded
  const float half_sq_err = 0.5f * fma(a, a, -a2);  // what that rounding dropped
  const float e0 = exp_poly_nonpositive(-half_sq);
  const float e = fma(-e0, half_sq_err, e0);  // e^(-x^2/2) to about an ulp
  const float tail = t * q * e;               // Phi(-|x|)
  return {x >= 0.0f ? 1.0f - tail : tail, 0.39894228040143267794f * e};
}

// --- what the kernels call: the polynomial for float, the library for double ---

template <typename T>
TF_HOST_DEVICE inline T exp(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_poly(v);
  } else {
#if defined(__CUDA_ARCH__)
    return ::exp(v);
#else
    return std::exp(v);
#endif
  }
}

// exp(v) for v <= 0 or NaN (as exp(v) for float64).
template <typename T>
TF_HOST_DEVICE inline T exp_nonpositive(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_poly_nonpositive(v);
  } else {
    return exp(v);
  }
}

template <typename T>
TF_HOST_DEVICE inline T tanh(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return tanh_poly(v);
  } else {
#if defined(__CUDA_ARCH__)
    return ::tanh(v);
#else
    return std::tanh(v);
#endif
  }
}

// Phi(x) and phi(x), the standard normal CDF and density, together: GELU's derivative reads
// both, and for float32 they share one exponential.
template <typename T>
TF_HOST_DEVICE inline NormalPair<T> normal_cdf_pdf(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return normal_cdf_pdf_poly(v);
  } else {
    return {T(0.5) * erfc(-v * Constants<T>::inv_sqrt2),
            Constants<T>::inv_sqrt_2pi * exp(T(-0.5) * v * v)};
  }
}

// Phi(x), the standard normal CDF.
template <typename T>
TF_HOST_DEVICE inline T normal_cdf(T v) {
  return normal_cdf_pdf(v).cdf;
}

// phi(x), the standard normal density.
template <typename T>
TF_HOST_DEVICE inline T normal_pdf(T v) {
  return normal_cdf_pdf(v).pdf;
}

template <typename T>
TF_HOST_DEVICE inline T sigmoid(T v) {
  return T(1) / (T(1) + exp(-v));
}

// The argument of tanh in the tanh form of GELU: sqrt(2 / pi) (x + 0.044715 x^3).
template <typename T>
TF_HOST_DEVICE inline T gelu_tanh_inner(T v) {
  return Constants<T>::sqrt_2_over_pi * (v + Constants<T>::gelu_c * v * v * v);
}

// --- row statistics of layer norm ---

// 1 / sqrt(var + eps) from the row's sum of squared deviations sum((x - mean)^2) over `cols`
// elements. The deviations are summed around the mean (a second pass) by every caller: the
// one-pass sum(x^2) - C mean^2 cancels when |mean| >> std.
template <typename T>
TF_HOST_DEVICE inline T layer_norm_rstd(T squared_deviations, T cols, T eps) {
  return T(1) / sqrt(squared_deviations / cols + eps);
}

// Layer norm's input gradient of one element: with xhat = (x - mean) rstd and gy = g w,
//   dx = rstd (gy - mean(gy) - xhat mean(gy xhat)).
template <typename T>
TF_HOST_DEVICE inline T layer_norm_dx(T gy, T xhat, T mean_gy, T mean_gy_xhat, T rstd) {
  return rstd * (gy - mean_gy - xhat * mean_gy_xhat);
}

}  // namespace tinyformer::math
