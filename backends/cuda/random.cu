// Random numbers on the GPU: the same counter-based stream as backends/cpu/random.cpp, so a draw
// gives the CPU's numbers whatever the launch configuration. Element i of a draw (row-major) is
// element g = offset + i of the stream; Philox(seed, counter = g / K) makes K consecutive
// elements (K = 4 for bernoulli and float32/bfloat16 uniform, 2 for float64 uniform and for
// normal pairs), and element g is number g % K of them. One thread computes one counter.
//
// The formulas are the CPU's, in double precision, with the same explicit fused multiply-adds,
// so uniform and bernoulli draws match the CPU bit for bit in every dtype. Normal draws use
// log1p, sqrt and sincos, whose double-precision results on the GPU may differ from glibc's in
// the last bit or two: float64 normals agree to about 1e-15 relative, and float32 and bfloat16
// normals (rounded from that double) are identical except when the double lies within an ulp or
// two of a rounding boundary, about one element in 10^8.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "backends/cuda/strided.cuh"
#include "core/bfloat16.h"
#include "core/random.h"

namespace tinyformer::cuda {

namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;  // the CPU's constant, exactly

// A double rounded to T (bfloat16 through float32, like every bfloat16 conversion).
template <typename T>
__host__ __device__ inline T round_to(double v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else {
    return static_cast<T>(v);
  }
}

// A uniform in [0, 1) from the top 24 bits of a word (as many as a float32 holds).
__device__ inline double unit24(std::uint32_t w) {
  return static_cast<double>(w >> 8) * (1.0 / 16777216.0);
}

// --- the values of one counter: four words in, K values out ---

// Box-Muller: sqrt(-2 ln(1 - u0)) (cos, sin)(2 pi u1), 1 - u0 in (0, 1].
template <typename T>
struct NormalValues {
  static constexpr int K = 2;
  double mean, stddev;
  __device__ void operator()(const std::uint32_t (&w)[4], T (&v)[K]) const {
    const double r = stddev * sqrt(-2.0 * log1p(-Philox::to_unit(w[0], w[1])));
    const double theta = kTwoPi * Philox::to_unit(w[2], w[3]);
    double s, c;
    sincos(theta, &s, &c);
    v[0] = round_to<T>(fma(r, c, mean));
    v[1] = round_to<T>(fma(r, s, mean));
  }
};

// a + (b - a) u, replaced by below_b where rounding to T lands on b (the range stays [a, b)).
// float32 and bfloat16 take 24-bit uniforms, four per counter; float64 53-bit ones, two.
template <typename T>
struct UniformValues {
  static constexpr int K = std::is_same_v<T, double> ? 2 : 4;
  double a, b;
  T below_b;
  __device__ T scale(double u) const {
    const T v = round_to<T>(fma(b - a, u, a));
    if constexpr (std::is_same_v<T, double>) {
      return v < b ? v : below_b;
    } else {
      return to_acc(v) < to_acc(round_to<T>(b)) ? v : below_b;
    }
  }
  __device__ void operator()(const std::uint32_t (&w)[4], T (&v)[K]) const {
    if constexpr (K == 2) {
      v[0] = scale(Philox::to_unit(w[0], w[1]));
      v[1] = scale(Philox::to_unit(w[2], w[3]));
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = scale(unit24(w[j]));
    }
  }
};

// 1 where the word, read as a uniform in [0, 2^32), falls below p 2^32.
template <typename T>
struct BernoulliValues {
  static constexpr int K = 4;
  std::uint64_t threshold;
  __device__ void operator()(const std::uint32_t (&w)[4], T (&v)[K]) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = round_to<T>(w[j] < threshold ? 1.0 : 0.0);
  }
};

// Writes element i of the draw, for i in [0, n), at out[i] (contiguous) or out[index.offset(i)].
// Counters run from offset / K to (offset + n - 1) / K; each thread takes one at a time.
template <typename T, typename Values, bool kStrided>
__global__ void random_kernel(T* out, StridedIndex index, std::int64_t n, std::uint64_t seed,
                              std::uint64_t offset, Values values) {
  constexpr int K = Values::K;
  const std::uint64_t first = offset, last = offset + static_cast<std::uint64_t>(n);
  const std::uint64_t first_counter = first / K;
  const std::uint64_t counters = (last - 1) / K - first_counter + 1;
  const std::uint64_t step = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t t = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < counters; t += step) {
    const std::uint64_t counter = first_counter + t;
    std::uint32_t words[4];
    Philox::generate(seed, counter, words);
    T v[K];
    values(words, v);
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const std::uint64_t g = counter * K + j;
      if (g >= first && g < last) {
        const auto i = static_cast<std::int64_t>(g - first);
        out[kStrided ? index.offset(i) : i] = v[j];
      }
    }
  }
}

template <typename T, typename Values>
void launch(const Tensor& out, std::uint64_t seed, std::uint64_t offset, const Values& values) {
  const std::int64_t n = out.numel();
  const std::int64_t counters = static_cast<std::int64_t>(
      (offset + static_cast<std::uint64_t>(n) - 1) / Values::K - offset / Values::K + 1);
  T* o = device_data<T>(out);
  if (out.is_contiguous()) {
    random_kernel<T, Values, false>
        <<<grid_for(counters), kBlock, 0, stream()>>>(o, StridedIndex{}, n, seed, offset, values);
  } else {
    random_kernel<T, Values, true><<<grid_for(counters), kBlock, 0, stream()>>>(
        o, strided_index(out, "random"), n, seed, offset, values);
  }
  TF_CUDA_CHECK_LAUNCH("random");
}

// The largest T below round_to<T>(b), or round_to<T>(b) itself when that equals round_to<T>(a):
// std::nextafter(T(b), T(a)), as the CPU computes it (for bfloat16 on the host type's bits).
template <typename T>
T below(double a, double b) {
  if constexpr (std::is_same_v<T, bf16>) {
    bfloat16 v(static_cast<float>(b));
    const float f = static_cast<float>(v);
    if (!(f <= static_cast<float>(bfloat16(static_cast<float>(a))))) {
      if (f > 0) {
        --v.bits;
      } else if (f < 0) {
        ++v.bits;
      } else {
        v.bits = 0x8001;  // the negative bfloat16 closest to zero
      }
    }
    __nv_bfloat16_raw raw;
    raw.x = v.bits;
    return bf16(raw);
  } else {
    return std::nextafter(static_cast<T>(b), static_cast<T>(a));
  }
}

}  // namespace

// out: any shape and strides; normal(mean a, std b), uniform [a, b) or bernoulli(p = a) as 0/1.
void CudaBackend::random(const Tensor& out, RandomKind kind, std::uint64_t seed,
                         std::uint64_t offset, double a, double b) {
  TF_CHECK(out.defined(), "random: expected a defined output tensor, got an undefined Tensor");
  TF_CHECK(out.device().is_cuda(), "random: the CUDA backend got a tensor on ", out.device());
  switch (kind) {
    case RandomKind::normal:
      TF_CHECK(b >= 0, "random: normal expects a non-negative standard deviation, got ", b);
      if (out.numel() == 0) return;
      dispatch_floating(out.dtype(), "random (normal)", [&](auto tag) {
        using T = decltype(tag);
        launch<T>(out, seed, offset, NormalValues<T>{a, b});
      });
      return;
    case RandomKind::uniform:
      TF_CHECK(a < b, "random: uniform [a, b) expects a < b, got a = ", a, ", b = ", b);
      if (out.numel() == 0) return;
      dispatch_floating(out.dtype(), "random (uniform)", [&](auto tag) {
        using T = decltype(tag);
        launch<T>(out, seed, offset, UniformValues<T>{a, b, below<T>(a, b)});
      });
      return;
    case RandomKind::bernoulli: {
      TF_CHECK(a >= 0 && a <= 1, "random: bernoulli expects a probability in [0, 1], got ", a);
      if (out.numel() == 0) return;
      const auto threshold = static_cast<std::uint64_t>(a * 4294967296.0);
      dispatch<float, double, std::int64_t, bool, bf16>(
          out.dtype(), "random (bernoulli)", [&](auto tag) {
            using T = decltype(tag);
            launch<T>(out, seed, offset, BernoulliValues<T>{threshold});
          });
      return;
    }
  }
  fail("random: unknown kind ", static_cast<int>(kind));
}

}  // namespace tinyformer::cuda
