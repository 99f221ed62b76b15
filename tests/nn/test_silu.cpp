// SiLU, x sigmoid(x): its values against an independently computed x / (1 + e^-x) in float64
// and float32, its gradient, and FeedForward with it as the activation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::gradcheck_module;
using test::randn64;

namespace {
double rel_err(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1e-300);
}
std::vector<double> sample_points() {
  std::vector<double> xs;
  for (double x = -30.0; x <= 30.0; x += 0.37) xs.push_back(x);
  for (double x : {0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 1.0, -1.0}) xs.push_back(x);
  return xs;
}
}  // namespace

TEST_CASE("silu: values against x / (1 + e^-x)") {
  const std::vector<double> xs = sample_points();
  const auto n = static_cast<std::int64_t>(xs.size());

  const std::vector<double> y64 = silu(from<double>(xs, {n})).to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(xs[i]);
    CHECK(rel_err(y64[i], xs[i] / (1 + std::exp(-xs[i]))) < 1e-14);
  }

  std::vector<float> xf(xs.begin(), xs.end());
  const std::vector<float> y32 = silu(from<float>(xf, {n})).to_vector<float>();
  for (std::size_t i = 0; i < xf.size(); ++i) {
    const double x = xf[i];  // the float input, exactly
    CAPTURE(x);
    CHECK(rel_err(y32[i], x / (1 + std::exp(-x))) < 1e-6);
  }

  // Far out: x for large x, an underflow to (almost) 0 for very negative x, never NaN.
  const std::vector<float> far =
      silu(from<float>({100.0f, -100.0f, -1e30f}, {3})).to_vector<float>();
  CHECK(far[0] == 100.0f);
  CHECK(std::abs(far[1]) < 1e-30f);
  CHECK(far[2] == 0.0f);
  CHECK_THROWS_AS(silu(from<std::int64_t>({1, 2}, {2})), Error);
}

TEST_CASE("silu: gradient") {
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return silu(in[0]); }, {randn64({3, 4})}));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return silu(in[0].transpose(0, 1)); },
                  {randn64({4, 3})}));
  // The derivative at a few points against s (1 + x (1 - s)), s = 1 / (1 + e^-x).
  Tensor x = from<double>({-3.0, -0.5, 0.0, 0.5, 3.0}, {5}).requires_grad_();
  silu(x).sum().backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  const std::vector<double> xs = {-3.0, -0.5, 0.0, 0.5, 3.0};
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double s = 1 / (1 + std::exp(-xs[i]));
    CHECK(g[i] == doctest::Approx(s * (1 + xs[i] * (1 - s))).epsilon(1e-14));
  }
}

TEST_CASE("FeedForward with SiLU: forward and backward") {
  nn::FeedForward ff(4, 6, nn::Activation::silu);
  CHECK(ff.extra_repr().find("activation=silu") != std::string::npos);
  CHECK(gradcheck_module(ff, randn64({2, 3, 4}), [&](const Tensor& x) { return ff.forward(x); }));

  // float32: the block is fc2(silu(fc1(x))), and every parameter gets a gradient.
  nn::FeedForward ff32(4, 6, nn::Activation::silu);
  Tensor x = randn({2, 3, 4});
  Tensor y = ff32.forward(x);
  Tensor h = ff32.fc1->forward(x);
  Tensor want = ff32.fc2->forward(h * sigmoid(h));
  CHECK(y.shape() == Shape{2, 3, 4});
  CHECK(max(abs(y - want)).item<float>() < 1e-5f);
  y.sum().backward();
  for (const Tensor& p : ff32.parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(max(abs(p.grad())).item<float>() > 0.0f);
  }
}
