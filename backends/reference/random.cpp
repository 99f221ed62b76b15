// Random numbers, counter-based, the same numbers as every backend draws.
//   random: out[i] (row-major) = sample number g % K of Philox(seed, counter g / K), where
//           g = offset + i and K samples come from one counter's four 32-bit words:
//   normal(mean a, std b):  K = 2, Box-Muller: r = b sqrt(-2 ln(1 - u0)), theta = 2 pi u1,
//                           the pair a + r cos(theta), a + r sin(theta) (u from 53-bit words pairs)
//   uniform [a, b):         a + (b - a) u; float64: K = 2 (53-bit u), else K = 4 (24-bit u);
//                           a value that rounds to b becomes the largest value below b
//   bernoulli(p = a):       K = 4, 1 where word < p 2^32, else 0
#include <cmath>
#include <cstdint>
#include <numbers>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/random.h"

namespace tinyformer::reference {

namespace {

// The value v as out's dtype holds it (written and read back).
double rounded(double v, DType dtype) {
  if (dtype == DType::float32) return static_cast<float>(v);
  if (dtype == DType::bfloat16) return static_cast<float>(bfloat16(static_cast<float>(v)));
  return v;
}

// The largest value of `dtype` below rounded(b), unless that is not above rounded(a).
double below(double a, double b, DType dtype) {
  const double top = rounded(b, dtype);
  if (top <= rounded(a, dtype)) return top;
  if (dtype == DType::float64) return std::nextafter(b, a);
  if (dtype == DType::float32) return std::nextafter(static_cast<float>(b), static_cast<float>(a));
  bfloat16 v(static_cast<float>(b));  // one step of the 16-bit pattern toward zero
  if (top > 0) {
    --v.bits;
  } else if (top < 0) {
    ++v.bits;
  } else {
    v.bits = 0x8001;  // the negative bfloat16 closest to zero
  }
  return static_cast<float>(v);
}

// A uniform in [0, 1) from the top 24 bits of a word (as many as a float32 holds).
double unit24(std::uint32_t w) {
  return static_cast<double>(w >> 8) * (1.0 / 16777216.0);
}

double sample(RandomKind kind, DType dtype, std::uint64_t seed, std::uint64_t g, double a,
              double b) {
  std::uint32_t w[4];
  switch (kind) {
    case RandomKind::normal: {
      Philox::generate(seed, g / 2, w);
      const double r = b * std::sqrt(-2.0 * std::log1p(-Philox::to_unit(w[0], w[1])));
      const double theta = 2.0 * std::numbers::pi * Philox::to_unit(w[2], w[3]);
      return std::fma(r, g % 2 == 0 ? std::cos(theta) : std::sin(theta), a);
    }
    case RandomKind::uniform: {
      double u = 0.0;
      if (dtype == DType::float64) {
        Philox::generate(seed, g / 2, w);
        u = g % 2 == 0 ? Philox::to_unit(w[0], w[1]) : Philox::to_unit(w[2], w[3]);
      } else {
        Philox::generate(seed, g / 4, w);
        u = unit24(w[g % 4]);
      }
      const double v = rounded(std::fma(b - a, u, a), dtype);
      return v < rounded(b, dtype) ? v : below(a, b, dtype);
    }
    case RandomKind::bernoulli: {
      Philox::generate(seed, g / 4, w);
      return w[g % 4] < static_cast<std::uint64_t>(a * 4294967296.0) ? 1.0 : 0.0;
    }
  }
  fail("random: unknown kind ", static_cast<int>(kind));
}

}  // namespace

void ReferenceBackend::random(const Tensor& out, RandomKind kind, std::uint64_t seed,
                              std::uint64_t offset, double a, double b) {
  TF_CHECK(out.defined(), "random: expected a defined output tensor, got an undefined Tensor");
  TF_CHECK(kind != RandomKind::normal || b >= 0,
           "random: normal expects a non-negative standard deviation, got ", b);
  TF_CHECK(kind != RandomKind::uniform || a < b,
           "random: uniform [a, b) expects a < b, got a = ", a, ", b = ", b);
  TF_CHECK(kind != RandomKind::bernoulli || (a >= 0 && a <= 1),
           "random: bernoulli expects a probability in [0, 1], got ", a);
  TF_CHECK(kind == RandomKind::bernoulli || is_floating(out.dtype()), "random: unsupported dtype ",
           out.dtype());
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    set(out, i, sample(kind, out.dtype(), seed, offset + static_cast<std::uint64_t>(i), a, b));
  }
}

}  // namespace tinyformer::reference
