// The shared math of core/ (core/math.h, core/unary_math.h, core/binary_math.h,
// core/sampling.h, core/strided_layout.h), checked on the host: the GPU compiles the same
// functions, so these checks hold for it too.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/binary_math.h"
#include "core/math.h"
#include "core/sampling.h"
#include "core/strided_layout.h"
#include "core/unary_math.h"

namespace tf = tinyformer;
namespace math = tinyformer::math;

namespace {
// Relative error of a float result against the double reference, floored at 1e-30.
double rel_err(float got, double want) {
  return std::abs(static_cast<double>(got) - want) / std::max(std::abs(want), 1e-30);
}
}  // namespace

TEST_CASE("float32 exp: accurate, one cut-off, exact at the ends") {
  double worst = 0;
  for (double x = -87.0; x <= 88.5; x += 0.01) {
    worst = std::max(worst, rel_err(math::exp(static_cast<float>(x)),
                                    std::exp(static_cast<double>(static_cast<float>(x)))));
  }
  CHECK(worst < 4e-7);  // a few ulp
  constexpr float inf = std::numeric_limits<float>::infinity();
  CHECK(math::exp(-inf) == 0.0f);    // a masked logit
  CHECK(math::exp(-88.0f) == 0.0f);  // below ln(FLT_MIN): flushed
  CHECK(math::exp(-87.0f) > 0.0f);
  CHECK(math::exp(89.0f) == inf);
  CHECK(math::exp(inf) == inf);
  CHECK(std::isnan(math::exp(std::numeric_limits<float>::quiet_NaN())));
  CHECK(math::exp(0.0f) == 1.0f);
  // Every float next to the overflow threshold ln(FLT_MAX) = 88.7228391...: finite and accurate
  // below it, +inf (never NaN) from it on, wherever 2^n meets the largest exponent.
  for (float x = 88.70f; x < 88.75f; x = std::nextafter(x, 100.0f)) {
    const double want = std::exp(static_cast<double>(x));
    const float got = math::exp(x);
    if (want > static_cast<double>(std::numeric_limits<float>::max())) {
      REQUIRE(got == inf);
    } else {
      REQUIRE(rel_err(got, want) < 4e-7);
    }
  }
  // And next to the underflow threshold ln(FLT_MIN): a normal float or 0, never garbage.
  for (float x = -87.40f; x < -87.30f; x = std::nextafter(x, 0.0f)) {
    const float got = math::exp(x);
    REQUIRE((got == 0.0f || got >= std::numeric_limits<float>::min() * 0.99999f));
    if (got != 0.0f) REQUIRE(rel_err(got, std::exp(static_cast<double>(x))) < 4e-7);
  }
  // float64 is the library's.
  CHECK(math::exp(1.25) == std::exp(1.25));
}

TEST_CASE("float32 exp_nonpositive: exp's bits for every float <= 0 and NaN") {
  // Every 61st float with the sign bit set (-0 to -inf and the negative NaNs; 35 million), the
  // ends of that range, and +0 and the positive NaNs: softmax's exp(x - max) takes only these.
  std::uint64_t differ = 0;
  for (std::uint64_t bits = 0x80000000u; bits <= 0xffffffffu; bits += 61) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    const float a = math::exp(x), b = math::exp_nonpositive(x);
    differ += std::bit_cast<std::uint32_t>(a) != std::bit_cast<std::uint32_t>(b);
  }
  for (std::uint32_t bits : {0x00000000u, 0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x80000000u,
                             0x80000001u, 0xc2aeac4fu, 0xc2aeac50u, 0xff800000u, 0xffffffffu}) {
    const float x = std::bit_cast<float>(bits);
    differ += std::bit_cast<std::uint32_t>(math::exp(x)) !=
              std::bit_cast<std::uint32_t>(math::exp_nonpositive(x));
  }
  CHECK(differ == 0);
  CHECK(math::exp_nonpositive(-0.5) == std::exp(-0.5));  // float64: the library's
}

TEST_CASE("float32 tanh, normal CDF and sigmoid against double") {
  double tanh_err = 0, cdf_err = 0, sig_err = 0;
  for (double x = -10.0; x <= 10.0; x += 0.003) {
    const auto f = static_cast<float>(x);
    const double xd = f;
    tanh_err = std::max(tanh_err, std::abs(math::tanh(f) - std::tanh(xd)));
    cdf_err =
        std::max(cdf_err, rel_err(math::normal_cdf(f), 0.5 * std::erfc(-xd / std::sqrt(2.0))));
    sig_err = std::max(sig_err, rel_err(math::sigmoid(f), 1 / (1 + std::exp(-xd))));
  }
  CHECK(tanh_err < 3e-7);
  CHECK(cdf_err < 1e-6);  // relative, down to Phi(-10) ~ 7.6e-24
  CHECK(sig_err < 1e-6);
  CHECK(math::tanh(-0.3f) == -math::tanh(0.3f));
  CHECK(math::tanh(20.0f) == 1.0f);
}

TEST_CASE("float32 normal CDF and density from one exponential, and GELU from them") {
  // Against double at every 7e-4 over [-13, 10] (Phi(-13) ~ 6e-39, still a normal float).
  double cdf_err = 0, pdf_err = 0, gelu_err = 0, grad_err = 0;
  const tf::UnaryMath<tf::UnaryOp::gelu, float> gelu;
  for (double x = -13.0; x <= 10.0; x += 7e-4) {
    const auto f = static_cast<float>(x);
    const double xd = f;
    const double cdf = 0.5 * std::erfc(-xd / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * xd * xd) / std::sqrt(2.0 * std::acos(-1.0));
    const math::NormalPair<float> got = math::normal_cdf_pdf(f);
    cdf_err = std::max(cdf_err, rel_err(got.cdf, cdf));
    pdf_err = std::max(pdf_err, rel_err(got.pdf, pdf));
    CHECK(got.cdf == math::normal_cdf(f));
    CHECK(got.pdf == math::normal_pdf(f));
    if (xd != 0) gelu_err = std::max(gelu_err, rel_err(gelu.forward(f), xd * cdf));
    // The derivative crosses 0 near x = -0.75, where Phi + x phi cancels: absolute there.
    const double grad = cdf + xd * pdf;
    grad_err = std::max(grad_err,
                        std::abs(gelu.derivative(1.0f, f) - grad) / std::max(std::abs(grad), 1.0));
  }
  CHECK(cdf_err < 1e-6);
  CHECK(pdf_err < 1e-6);
  CHECK(gelu_err < 1e-6);
  CHECK(grad_err < 3e-7);

  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(math::normal_cdf(inf) == 1.0f);
  CHECK(math::normal_cdf(-inf) == 0.0f);
  CHECK(math::normal_pdf(inf) == 0.0f);
  CHECK(math::normal_pdf(-inf) == 0.0f);
  CHECK(math::normal_cdf(-30.0f) == 0.0f);
  CHECK(math::normal_cdf(30.0f) == 1.0f);
  CHECK(std::isnan(math::normal_cdf(nan)));
  CHECK(std::isnan(math::normal_pdf(nan)));
  CHECK(gelu.forward(inf) == inf);
  CHECK(std::isnan(gelu.forward(-inf)));  // -inf * 0, as PyTorch's
  CHECK(gelu.forward(0.0f) == 0.0f);
  CHECK(std::isnan(gelu.forward(nan)));
  CHECK(std::isnan(gelu.derivative(1.0f, nan)));
  CHECK(gelu.derivative(1.0f, 30.0f) == 1.0f);
  CHECK(gelu.derivative(1.0f, -30.0f) == 0.0f);
}

TEST_CASE("unary rows: pow_scalar's special exponents agree with pow") {
  for (const double a : {0.0, 1.0, 2.0, 0.5, -1.0, 2.5}) {
    CAPTURE(a);
    tf::UnaryMath<tf::UnaryOp::pow_scalar, double>::visit(a, [&](auto m) {
      for (const double x : {0.3, 1.7, 4.0}) {
        CHECK(m.forward(x) == doctest::Approx(std::pow(x, a)).epsilon(1e-15));
        CHECK(m.derivative(2.0, x) ==
              doctest::Approx(a == 0 ? 0.0 : 2.0 * a * std::pow(x, a - 1)).epsilon(1e-14));
      }
    });
  }
  CHECK(tf::takes_alpha(tf::UnaryOp::pow_scalar));
  CHECK_FALSE(tf::takes_alpha(tf::UnaryOp::exp));
}

TEST_CASE("binary rows: int64 wrap-around, NaN-propagating extremes") {
  constexpr std::int64_t lo = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t hi = std::numeric_limits<std::int64_t>::max();
  CHECK(tf::BinaryMath<tf::BinaryOp::add, std::int64_t>{}(hi, 1) == lo);
  CHECK(tf::BinaryMath<tf::BinaryOp::sub, std::int64_t>{}(lo, 1) == hi);
  CHECK(tf::BinaryMath<tf::BinaryOp::div, std::int64_t>{}(lo, -1) == lo);
  CHECK(tf::BinaryMath<tf::BinaryOp::div, std::int64_t>{}(-7, 2) == -3);
  CHECK(tf::BinaryMath<tf::BinaryOp::div, std::int64_t>::divides_by_zero(0));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(tf::BinaryMath<tf::BinaryOp::maximum, double>{}(nan, 1.0)));
  CHECK(std::isnan(tf::BinaryMath<tf::BinaryOp::maximum, double>{}(1.0, nan)));
  CHECK(std::isnan(tf::BinaryMath<tf::BinaryOp::minimum, double>{}(1.0, nan)));
  CHECK(tf::math::wrapping_neg(lo) == lo);
}

namespace {
struct Plain {
  static double round(double v) { return v; }
  static double widen(double v) { return v; }
};
struct ToFloat {
  static float round(double v) { return static_cast<float>(v); }
  static double widen(float v) { return v; }
};
}  // namespace

TEST_CASE("samplers: uniform stays below b, normals have the right moments") {
  // Rounding a + (b - a) u to float lands on b for u close to 1; the sampler keeps [a, b).
  const double a = 0.0, b = 1.0;
  const auto below = static_cast<float>(tf::uniform_below(tf::DType::float32, a, b));
  CHECK(below < 1.0f);
  CHECK(below == std::nextafter(1.0f, 0.0f));
  const tf::UniformSampler<float, ToFloat> uniform{a, b, below};
  CHECK(uniform.scale(1.0 - 1e-12) == below);
  CHECK(uniform.scale(0.25) == 0.25f);
  CHECK(tf::uniform_below(tf::DType::bfloat16, 0.0, 1.0) == 1.0 - 1.0 / 256);

  const tf::NormalSampler<double, Plain> normal{2.0, 3.0};
  double sum = 0, sq = 0;
  const int pairs = 20000;
  for (int c = 0; c < pairs; ++c) {
    double v[2];
    tf::sample_counter(normal, 7, static_cast<std::uint64_t>(c), v);
    for (const double x : v) {
      sum += x;
      sq += x * x;
    }
  }
  const double mean = sum / (2 * pairs), var = sq / (2 * pairs) - mean * mean;
  CHECK(mean == doctest::Approx(2.0).epsilon(0.03));
  CHECK(var == doctest::Approx(9.0).epsilon(0.05));

  using Bernoulli = tf::BernoulliSampler<double, Plain>;
  const Bernoulli never{Bernoulli::threshold_for(0.0)}, always{Bernoulli::threshold_for(1.0)};
  double v[4];
  tf::sample_counter(never, 1, 0, v);
  CHECK(v[0] + v[1] + v[2] + v[3] == 0.0);
  tf::sample_counter(always, 1, 0, v);
  CHECK(v[0] + v[1] + v[2] + v[3] == 4.0);
}

TEST_CASE("coalesce: size-1 dims dropped, contiguous neighbours merged") {
  // A contiguous [2, 1, 3, 4] tensor is one run of 24.
  const tf::Shape shape = {2, 1, 3, 4}, contiguous = {12, 12, 4, 1};
  tf::StridedLayout l = tf::coalesce(shape, {&contiguous});
  CHECK(l.sizes == tf::Shape{24});
  CHECK(l.contiguous());
  // Its transpose of the last two dims keeps two dims for the pair, merged with nothing.
  const tf::Shape t_shape = {2, 4, 3}, t_strides = {12, 1, 4};
  l = tf::coalesce(t_shape, {&t_strides});
  CHECK(l.sizes == tf::Shape{2, 4, 3});
  CHECK(l.transposing());
  CHECK(tf::element_offset(l, 5, 0) == 1 + 2 * 4);  // position (0, 1, 2)
  // Two operands merge only where both are contiguous across the pair.
  const tf::Shape out = {12, 4, 1}, bias = {0, 0, 1};
  l = tf::coalesce({2, 3, 4}, {&out, &bias});
  CHECK(l.sizes == tf::Shape{6, 4});
  CHECK(l.strides[1] == tf::Shape{0, 1});
  // A 0-dim tensor is one element.
  l = tf::coalesce({}, {});
  CHECK(l.sizes == tf::Shape{1});
}
