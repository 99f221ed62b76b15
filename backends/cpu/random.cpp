// Random numbers on the CPU, counter-based. Element i of a draw (row-major) is element
// g = offset + i of one endless stream: Philox(seed, counter = g / K) gives four 32-bit words,
// which make K consecutive elements of the stream, and element g is number g % K of them. So a
// draw depends only on (seed, offset + i): never on the thread count, and drawing [0, n) at once
// equals drawing [0, k) and then [k, n) with the offset advanced by k. K is what one Philox call
// yields: four 32-bit uniforms (bernoulli, float32 uniform), two 53-bit uniforms (float64
// uniform), or two normals (Box-Muller turns two uniforms into a pair). A device backend
// reproduces the same numbers with the same formulas.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/random.h"

namespace tinyformer::cpu {

namespace {

// Writes out[i] = stream element offset + i for i in [0, n); values(words, v) turns the four
// words of one counter into its K values v[0..K).
template <int K, typename T, typename Values>
void generate(T* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset, Values values) {
  parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
    const std::uint64_t first = offset + static_cast<std::uint64_t>(begin);
    const std::uint64_t last = offset + static_cast<std::uint64_t>(end);
    for (std::uint64_t counter = first / K; counter * K < last; ++counter) {
      std::uint32_t words[4];
      Philox::generate(seed, counter, words);
      T v[K];
      values(words, v);
      for (std::uint64_t j = 0; j < K; ++j) {
        const std::uint64_t g = counter * K + j;
        if (g >= first && g < last) out[g - offset] = v[j];
      }
    }
  });
}

// A uniform in [0, 1) from the top 24 bits of a word (as many as a float32 holds).
inline double unit24(std::uint32_t w) {
  return static_cast<double>(w >> 8) * (1.0 / 16777216.0);
}

// A double rounded to T (bfloat16 through float32, like every bfloat16 conversion).
template <typename T>
T round_to(double v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// The largest T below round_to<T>(b), or round_to<T>(b) itself when that equals round_to<T>(a)
// (a and b closer than one step of T): std::nextafter(T(b), T(a)), for bfloat16 too.
template <typename T>
T below(double a, double b) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    bfloat16 v = round_to<bfloat16>(b);
    const float f = static_cast<float>(v);
    if (f <= static_cast<float>(round_to<bfloat16>(a))) return v;
    if (f > 0) {
      --v.bits;
    } else if (f < 0) {
      ++v.bits;
    } else {
      v.bits = 0x8001;  // the negative bfloat16 closest to zero
    }
    return v;
  } else {
    return std::nextafter(static_cast<T>(b), static_cast<T>(a));
  }
}

// Box-Muller: two uniforms u0, u1 give two independent standard normals
// sqrt(-2 ln(1 - u0)) (cos, sin)(2 pi u1); 1 - u0 lies in (0, 1], so the logarithm is finite.
template <typename T>
void normal_pair(const std::uint32_t (&w)[4], double mean, double stddev, T (&v)[2]) {
  const double r = stddev * std::sqrt(-2.0 * std::log1p(-Philox::to_unit(w[0], w[1])));
  const double theta = 2.0 * std::numbers::pi * Philox::to_unit(w[2], w[3]);
  v[0] = round_to<T>(std::fma(r, std::cos(theta), mean));
  v[1] = round_to<T>(std::fma(r, std::sin(theta), mean));
}

}  // namespace

// out: any shape; normal(mean a, std b), uniform [a, b) or bernoulli(p = a) as 0/1.
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
  const std::int64_t n = out.numel();
  switch (kind) {
    case RandomKind::normal:
      TF_CHECK(b >= 0, "random: normal expects a non-negative standard deviation, got ", b);
      dispatch<float, double, bfloat16>(out.dtype(), "random (normal)", [&](auto tag) {
        using T = decltype(tag);
        generate<2>(out.data<T>(), n, seed, offset,
                    [=](const std::uint32_t(&w)[4], T(&v)[2]) { normal_pair(w, a, b, v); });
      });
      return;
    case RandomKind::uniform:
      TF_CHECK(a < b, "random: uniform [a, b) expects a < b, got a = ", a, ", b = ", b);
      dispatch<float, double, bfloat16>(out.dtype(), "random (uniform)", [&](auto tag) {
        using T = decltype(tag);
        // Rounding a + (b - a) u to T can land on b itself; the largest T below b is used
        // instead, so the range stays half-open.
        const T below_b = below<T>(a, b);
        const float b_rounded = static_cast<float>(round_to<T>(b));
        const auto scale = [=](double u) {
          const T v = round_to<T>(std::fma(b - a, u, a));
          if constexpr (std::is_same_v<T, double>) {
            return v < b ? v : below_b;
          } else {
            return static_cast<float>(v) < b_rounded ? v : below_b;
          }
        };
        if constexpr (!std::is_same_v<T, double>) {
          generate<4>(out.data<T>(), n, seed, offset, [=](const std::uint32_t(&w)[4], T(&v)[4]) {
            for (int j = 0; j < 4; ++j) v[j] = scale(unit24(w[j]));
          });
        } else {
          generate<2>(out.data<T>(), n, seed, offset, [=](const std::uint32_t(&w)[4], T(&v)[2]) {
            v[0] = scale(Philox::to_unit(w[0], w[1]));
            v[1] = scale(Philox::to_unit(w[2], w[3]));
          });
        }
      });
      return;
    case RandomKind::bernoulli: {
      TF_CHECK(a >= 0 && a <= 1, "random: bernoulli expects a probability in [0, 1], got ", a);
      // 1 where the word, read as a uniform in [0, 2^32), falls below p 2^32.
      const auto threshold = static_cast<std::uint64_t>(a * 4294967296.0);
      dispatch<float, double, std::int64_t, bool, bfloat16>(
          out.dtype(), "random (bernoulli)", [&](auto tag) {
            using T = decltype(tag);
            generate<4>(out.data<T>(), n, seed, offset, [=](const std::uint32_t(&w)[4], T(&v)[4]) {
              for (int j = 0; j < 4; ++j) v[j] = round_to<T>(w[j] < threshold ? 1 : 0);
            });
          });
      return;
    }
  }
  fail("random: unknown kind ", static_cast<int>(kind));
}

}  // namespace tinyformer::cpu
