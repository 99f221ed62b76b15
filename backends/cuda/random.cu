// Random numbers on the GPU: the same counter-based stream as backends/cpu/random.cpp, so a draw
// gives the CPU's numbers whatever the launch configuration. Element i of a draw (row-major) is
// element g = offset + i of the stream; Philox(seed, counter = g / K) makes K consecutive
// elements (K = 4 for bernoulli and float32/bfloat16 uniform, 2 for float64 uniform and for
// normal pairs), and element g is number g % K of them. One thread computes one counter.
//
// The samplers are core/sampling.h's, which the CPU runs too, so uniform and bernoulli draws
// match the CPU bit for bit in every dtype. Normal draws use log1p, sqrt, cos and sin, whose
// double-precision results on the GPU may differ from glibc's in the last bit or two: float64
// normals agree to about 1e-15 relative, and float32 and bfloat16 normals (rounded from that
// double) are identical except when the double lies within an ulp or two of a rounding boundary,
// about one element in 10^8.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/strided.cuh"
#include "core/op_checks.h"
#include "core/sampling.h"

namespace tinyformer::cuda {

namespace {

// A double rounded to T (bfloat16 through float32, like every bfloat16 conversion), and back.
template <typename T>
struct Rounding {
  __host__ __device__ static T round(double v) {
    if constexpr (std::is_same_v<T, bf16>) {
      return __float2bfloat16_rn(static_cast<float>(v));
    } else if constexpr (std::is_same_v<T, bool>) {
      return v != 0.0;
    } else {
      return static_cast<T>(v);
    }
  }
  __host__ __device__ static double widen(T v) { return static_cast<double>(to_acc(v)); }
};

// Writes element i of the draw, for i in [0, n), at out[i] (contiguous) or out[index.offset(i)].
// Counters run from offset / K to (offset + n - 1) / K; each thread takes one at a time.
template <typename T, typename Sampler, bool kStrided>
__global__ void random_kernel(T* out, StridedIndex index, std::int64_t n, std::uint64_t seed,
                              std::uint64_t offset, Sampler sampler) {
  constexpr int K = Sampler::K;
  const std::uint64_t first = offset, last = offset + static_cast<std::uint64_t>(n);
  const std::uint64_t first_counter = first / K;
  const std::uint64_t counters = (last - 1) / K - first_counter + 1;
  const std::uint64_t step = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t t = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < counters; t += step) {
    const std::uint64_t counter = first_counter + t;
    T v[K];
    sample_counter(sampler, seed, counter, v);
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

template <typename T, typename Sampler>
void launch(const Tensor& out, std::uint64_t seed, std::uint64_t offset, const Sampler& sampler) {
  const std::int64_t n = out.numel();
  const std::int64_t counters = static_cast<std::int64_t>(
      (offset + static_cast<std::uint64_t>(n) - 1) / Sampler::K - offset / Sampler::K + 1);
  T* o = device_data<T>(out);
  if (out.is_contiguous()) {
    random_kernel<T, Sampler, false>
        <<<grid_for(counters), kBlock, 0, stream()>>>(o, StridedIndex{}, n, seed, offset, sampler);
  } else {
    random_kernel<T, Sampler, true><<<grid_for(counters), kBlock, 0, stream()>>>(
        o, strided_index(out, "random"), n, seed, offset, sampler);
  }
  TF_CUDA_CHECK_LAUNCH("random");
}

}  // namespace

// out: any shape and strides; normal(mean a, std b), uniform [a, b), bernoulli(p = a) as 0/1, or
// scaled_bernoulli: b with probability a, else 0.
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
        launch<T>(out, seed, offset, NormalSampler<T, Rounding<T>>{a, b});
      });
      return;
    case RandomKind::uniform:
      TF_CHECK(a < b, "random: uniform [a, b) expects a < b, got a = ", a, ", b = ", b);
      if (out.numel() == 0) return;
      dispatch_floating(out.dtype(), "random (uniform)", [&](auto tag) {
        using T = decltype(tag);
        const T below_b = Rounding<T>::round(uniform_below(out.dtype(), a, b));
        launch<T>(out, seed, offset, UniformSampler<T, Rounding<T>>{a, b, below_b});
      });
      return;
    case RandomKind::bernoulli: {
      TF_CHECK(a >= 0 && a <= 1, "random: bernoulli expects a probability in [0, 1], got ", a);
      if (out.numel() == 0) return;
      dispatch<float, double, std::int64_t, bool, bf16>(
          out.dtype(), "random (bernoulli)", [&](auto tag) {
            using T = decltype(tag);
            using Sampler = BernoulliSampler<T, Rounding<T>>;
            launch<T>(out, seed, offset, Sampler{Sampler::threshold_for(a)});
          });
      return;
    }
    case RandomKind::scaled_bernoulli: {
      check_scaled_bernoulli_args(a, b);
      if (out.numel() == 0) return;
      dispatch_floating(out.dtype(), "random (scaled_bernoulli)", [&](auto tag) {
        using T = decltype(tag);
        using Sampler = BernoulliSampler<T, Rounding<T>>;
        launch<T>(out, seed, offset, Sampler{Sampler::threshold_for(a), Rounding<T>::round(b)});
      });
      return;
    }
  }
  fail("random: unknown kind ", static_cast<int>(kind));
}

}  // namespace tinyformer::cuda
