// Random numbers on the CPU, counter-based: the samplers of core/sampling.h (shared with the
// GPU) over the stream's counters, one contiguous range of elements per thread. Element i of a
// draw depends only on (seed, offset + i): never on the thread count, and drawing [0, n) at once
// equals drawing [0, k) and then [k, n) with the offset advanced by k.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/op_checks.h"
#include "core/sampling.h"

namespace tinyformer::cpu {

namespace {

template <typename T>
using Rounding = HostRounding<T>;

// Philox::generate for the kBlock consecutive counters from `first`, word j of counter first + i
// in words[j][i]: the same words, with the rounds of the counters side by side in vector lanes
// (kBlock = 16: one 512-bit vector of each word, two 256-bit ones).
constexpr int kBlock = 16;
void philox_block(std::uint64_t seed, std::uint64_t first, std::uint32_t (&words)[4][kBlock]) {
  for (int i = 0; i < kBlock; ++i) {
    const std::uint64_t counter = first + static_cast<std::uint64_t>(i);
    words[0][i] = static_cast<std::uint32_t>(counter);
    words[1][i] = static_cast<std::uint32_t>(counter >> 32);
    words[2][i] = 0u;
    words[3][i] = 0u;
  }
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
#pragma omp simd
    for (int i = 0; i < kBlock; ++i) {
      Philox::round(words[0][i], words[1][i], words[2][i], words[3][i], k0, k1);
    }
    k0 += Philox::kKeyStep0;
    k1 += Philox::kKeyStep1;
  }
}

// Writes out[i] = stream element offset + i for i in [0, n), out contiguous: each thread walks
// the counters of its range, kBlock at a time (their Philox rounds side by side in vector
// lanes), and keeps the values that fall inside it.
template <typename T, typename Sampler>
void draw(const Tensor& out, std::uint64_t seed, std::uint64_t offset, const Sampler& sampler) {
  constexpr std::uint64_t K = Sampler::K;
  T* o = out.data<T>();
  // A counter-based generator's rounds (and a normal's logarithm) per element: the cost of
  // several streaming elements (parallel.h).
  constexpr std::int64_t kCost = 8;
  parallel_for(
      out.numel(),
      [&](std::int64_t begin, std::int64_t end) {
        // A copy of its own: the sampler's fields in registers, so the loop over the block
        // stays in vector lanes (through the caller's reference, GCC left it scalar).
        const Sampler local = sampler;
        const std::uint64_t first = offset + static_cast<std::uint64_t>(begin);
        const std::uint64_t last = offset + static_cast<std::uint64_t>(end);
        for (std::uint64_t block = first / K; block * K < last; block += kBlock) {
          std::uint32_t words[4][kBlock];
          philox_block(seed, block, words);
          T v[kBlock][K];
#pragma omp simd
          for (int i = 0; i < kBlock; ++i) {
            const std::uint32_t w[4] = {words[0][i], words[1][i], words[2][i], words[3][i]};
            local(w, v[i]);
          }
          const std::uint64_t g0 = block * K, g1 = g0 + kBlock * K;
          if (g0 >= first && g1 <= last) {  // the whole block is in range: one contiguous run
            std::memcpy(o + (g0 - offset), v, sizeof v);
            continue;
          }
          for (std::uint64_t g = std::max(g0, first); g < std::min(g1, last); ++g) {
            o[g - offset] = v[(g - g0) / K][(g - g0) % K];
          }
        }
      },
      1, kCost);
}

}  // namespace

// out: any shape; normal(mean a, std b), uniform [a, b), bernoulli(p = a) as 0/1, or
// scaled_bernoulli: b with probability a, else 0.
void CpuBackend::random(const Tensor& out, RandomKind kind, std::uint64_t seed,
                        std::uint64_t offset, double a, double b) {
  TF_CHECK(out.defined(), "random: expected a defined output tensor, got an undefined Tensor");
  if (!out.is_contiguous()) {
    // Element i is defined in row-major order: draw into a contiguous tensor and scatter.
    Tensor packed = empty(out.shape(), {.dtype = out.dtype(), .device = out.device()});
    random(packed, kind, seed, offset, a, b);
    copy(packed, out);
    return;
  }
  switch (kind) {
    case RandomKind::normal:
      TF_CHECK(b >= 0, "random: normal expects a non-negative standard deviation, got ", b);
      dispatch<float, double, bfloat16>(out.dtype(), "random (normal)", [&](auto tag) {
        using T = decltype(tag);
        draw<T>(out, seed, offset, NormalSampler<T, Rounding<T>>{a, b});
      });
      return;
    case RandomKind::uniform:
      TF_CHECK(a < b, "random: uniform [a, b) expects a < b, got a = ", a, ", b = ", b);
      dispatch<float, double, bfloat16>(out.dtype(), "random (uniform)", [&](auto tag) {
        using T = decltype(tag);
        const T below_b = Rounding<T>::round(uniform_below(out.dtype(), a, b));
        draw<T>(out, seed, offset, UniformSampler<T, Rounding<T>>{a, b, below_b});
      });
      return;
    case RandomKind::bernoulli: {
      TF_CHECK(a >= 0 && a <= 1, "random: bernoulli expects a probability in [0, 1], got ", a);
      dispatch<float, double, std::int64_t, bool, bfloat16>(
          out.dtype(), "random (bernoulli)", [&](auto tag) {
            using T = decltype(tag);
            using Sampler = BernoulliSampler<T, Rounding<T>>;
            draw<T>(out, seed, offset, Sampler{Sampler::threshold_for(a)});
          });
      return;
    }
    case RandomKind::scaled_bernoulli: {
      check_scaled_bernoulli_args(a, b);
      dispatch<float, double, bfloat16>(out.dtype(), "random (scaled_bernoulli)", [&](auto tag) {
        using T = decltype(tag);
        using Sampler = BernoulliSampler<T, Rounding<T>>;
        draw<T>(out, seed, offset, Sampler{Sampler::threshold_for(a), Rounding<T>::round(b)});
      });
      return;
    }
  }
  fail("random: unknown kind ", static_cast<int>(kind));
}

}  // namespace tinyformer::cpu
