// The random samplers every device shares: the values of one Philox counter (core/random.h) as
// normal (Box-Muller), uniform or Bernoulli draws, called by the CPU's loop and the CUDA kernel
// alike, so that a draw gives the same numbers on both.
//
// Element i of a draw (row-major) is element g = offset + i of one endless stream:
// Philox(seed, counter = g / K) gives four 32-bit words, which make K consecutive elements, and
// element g is number g % K of them. K is what one counter yields: four 32-bit uniforms
// (bernoulli, float32 and bfloat16 uniform), two 53-bit uniforms (float64 uniform), or two
// normals (Box-Muller turns two uniforms into a pair). The formulas work in double precision,
// with explicit fused multiply-adds, and round once to the element type.
//
// Each sampler is templated on the element type T and on R, the backend's rounding of a double
// to T: R::round(double) -> T and R::widen(T) -> double (bfloat16 has a different C++ type on
// each device).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/bfloat16.h"
#include "core/dtype.h"
#include "core/host_device.h"
#include "core/math.h"
#include "core/random.h"

namespace tinyformer {

// A uniform in [0, 1) from the top 24 bits of a word (as many as a float32 holds).
TF_HOST_DEVICE inline double unit24(std::uint32_t w) {
  return static_cast<double>(w >> 8) * (1.0 / 16777216.0);
}

// Box-Muller: two uniforms u0, u1 give two independent normals
// mean + stddev sqrt(-2 ln(1 - u0)) (cos, sin)(2 pi u1); 1 - u0 lies in (0, 1], so the
// logarithm is finite.
template <typename T, typename R>
struct NormalSampler {
  static constexpr int K = 2;
  double mean, stddev;
  TF_HOST_DEVICE void operator()(const std::uint32_t (&w)[4], T (&v)[K]) const {
    const double r = stddev * math::sqrt(-2.0 * math::log1p(-Philox::to_unit(w[0], w[1])));
    const double theta = math::Constants<double>::two_pi * Philox::to_unit(w[2], w[3]);
    v[0] = R::round(math::fma(r, math::cos(theta), mean));
    v[1] = R::round(math::fma(r, math::sin(theta), mean));
  }
};

// a + (b - a) u, replaced by below_b where rounding to T lands on b itself, so the range stays
// [a, b). float64 takes 53-bit uniforms, two per counter; the other types 24-bit ones, four.
template <typename T, typename R>
struct UniformSampler {
  static constexpr int K = std::is_same_v<T, double> ? 2 : 4;
  double a, b;
  T below_b;  // the largest T below b: uniform_below(dtype, a, b) rounded
  TF_HOST_DEVICE T scale(double u) const {
    const T v = R::round(math::fma(b - a, u, a));
    return R::widen(v) < R::widen(R::round(b)) ? v : below_b;
  }
  TF_HOST_DEVICE void operator()(const std::uint32_t (&w)[4], T (&v)[K]) const {
    if constexpr (K == 2) {
      v[0] = scale(Philox::to_unit(w[0], w[1]));
      v[1] = scale(Philox::to_unit(w[2], w[3]));
    } else {
      for (int j = 0; j < 4; ++j) v[j] = scale(unit24(w[j]));
    }
  }
};

// `success` (1 for bernoulli, b rounded to T for scaled_bernoulli, once by the caller) where the
// word, read as a uniform in [0, 2^32), falls below p 2^32; else 0. The same words decide both
// kinds, so a scaled draw is the 0/1 draw of the same seed and offset times b rounded.
template <typename T, typename R>
struct BernoulliSampler {
  static constexpr int K = 4;
  std::uint64_t threshold;
  T success = R::round(1.0);
  static std::uint64_t threshold_for(double p) {
    return static_cast<std::uint64_t>(p * 4294967296.0);
  }
  TF_HOST_DEVICE void operator()(const std::uint32_t (&w)[4], T (&v)[K]) const {
    const T zero = R::round(0.0);
    for (int j = 0; j < 4; ++j) v[j] = w[j] < threshold ? success : zero;
  }
};

// The rounding of a double to a host element type T (bfloat16 through float32, like every
// bfloat16 conversion) and back: the R of the samplers for every backend that draws in host
// memory. A device backend supplies its own for its bfloat16 type.
template <typename T>
struct HostRounding {
  static T round(double v) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      return bfloat16(static_cast<float>(v));
    } else {
      return static_cast<T>(v);
    }
  }
  static double widen(T v) {
    if constexpr (std::is_same_v<T, double>) {
      return v;
    } else {
      return static_cast<double>(static_cast<float>(v));
    }
  }
};

// The K values of stream counter `counter`.
template <typename Sampler, typename T>
TF_HOST_DEVICE inline void sample_counter(const Sampler& sampler, std::uint64_t seed,
                                          std::uint64_t counter, T (&v)[Sampler::K]) {
  std::uint32_t words[4];
  Philox::generate(seed, counter, words);
  sampler(words, v);
}

// The largest value of `dtype` below b rounded to it (std::nextafter(T(b), T(a)), for bfloat16
// too), or b rounded itself when a and b round to the same value; as a double, exact in dtype.
// The host works it out once per draw.
inline double uniform_below(DType dtype, double a, double b) {
  switch (dtype) {
    case DType::float64:
      return std::nextafter(b, a);
    case DType::float32:
      return std::nextafter(static_cast<float>(b), static_cast<float>(a));
    case DType::bfloat16: {
      bfloat16 v(static_cast<float>(b));
      const float f = static_cast<float>(v);
      if (f <= static_cast<float>(bfloat16(static_cast<float>(a)))) return f;
      if (f > 0) {
        --v.bits;
      } else if (f < 0) {
        ++v.bits;
      } else {
        v.bits = 0x8001;  // the negative bfloat16 closest to zero
      }
      return static_cast<float>(v);
    }
    default:
      return b;
  }
}

}  // namespace tinyformer
