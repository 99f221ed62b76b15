// Random numbers, counter-based: element i of `out` (row-major) is element g = offset + i of the
// one stream every backend draws (core/sampling.h states the stream and its samplers:
// Box-Muller normals, uniforms in [a, b), Bernoulli 0/1). The samplers are shared, since a
// random draw has no independent "expected value": what the reference adds is the plainest
// walk over the elements, one counter per element, no blocking and no threads.
#include <cstdint>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"
#include "core/sampling.h"

namespace tinyformer::reference {

namespace {

template <typename T>
using Rounding = HostRounding<T>;

// out[i] = sample number g % K of counter g / K, for g = offset + i.
template <typename T, typename Sampler>
void draw(const Tensor& out, std::uint64_t seed, std::uint64_t offset, const Sampler& sampler) {
  constexpr std::uint64_t K = Sampler::K;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const std::uint64_t g = offset + static_cast<std::uint64_t>(i);
    T v[K];
    sample_counter(sampler, seed, g / K, v);
    set(out, i, Rounding<T>::widen(v[g % K]));
  }
}

// Calls f(T{}) with the element type that holds out's floating dtype.
template <typename F>
void with_floating_type(DType dtype, F&& f) {
  if (dtype == DType::float64) return f(double{});
  if (dtype == DType::float32) return f(float{});
  if (dtype == DType::bfloat16) return f(bfloat16{});
  fail("random: unsupported dtype ", dtype, " (expected a floating dtype)");
}

}  // namespace

void ReferenceBackend::random(const Tensor& out, RandomKind kind, std::uint64_t seed,
                              std::uint64_t offset, double a, double b) {
  TF_CHECK(out.defined(), "random: expected a defined output tensor, got an undefined Tensor");
  switch (kind) {
    case RandomKind::normal:  // mean a, standard deviation b
      TF_CHECK(b >= 0, "random: normal expects a non-negative standard deviation, got ", b);
      return with_floating_type(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        draw<T>(out, seed, offset, NormalSampler<T, Rounding<T>>{a, b});
      });
    case RandomKind::uniform:  // [a, b)
      TF_CHECK(a < b, "random: uniform [a, b) expects a < b, got a = ", a, ", b = ", b);
      return with_floating_type(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T below_b = Rounding<T>::round(uniform_below(out.dtype(), a, b));
        draw<T>(out, seed, offset, UniformSampler<T, Rounding<T>>{a, b, below_b});
      });
    case RandomKind::bernoulli:  // 1 with probability a, any dtype
      TF_CHECK(a >= 0 && a <= 1, "random: bernoulli expects a probability in [0, 1], got ", a);
      return draw<double>(out, seed, offset,
                          BernoulliSampler<double, Rounding<double>>{
                              BernoulliSampler<double, Rounding<double>>::threshold_for(a)});
    case RandomKind::scaled_bernoulli:  // b with probability a, else 0, floating dtypes
      check_scaled_bernoulli_args(a, b);
      return with_floating_type(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using Sampler = BernoulliSampler<T, Rounding<T>>;
        draw<T>(out, seed, offset, Sampler{Sampler::threshold_for(a), Rounding<T>::round(b)});
      });
  }
  fail("random: unknown kind ", static_cast<int>(kind));
}

}  // namespace tinyformer::reference
