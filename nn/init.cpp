// Initialisers, written through raw::copy so that parameters keep their identity.
#include "nn/init.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer::nn::init {

namespace {
void draw(const Tensor& t, RandomKind kind, double a, double b, Generator* generator) {
  TF_CHECK(t.defined() && is_floating(t.dtype()), "init: expected a floating tensor");
  if (t.numel() == 0) return;
  Generator& gen = generator ? *generator : default_generator();
  const auto [seed, offset] = gen.reserve(static_cast<std::uint64_t>(t.numel()));
  Tensor values = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  backend(t.device()).random(values, kind, seed, offset, a, b);
  raw::copy(values, t);
}
}  // namespace

void constant_(const Tensor& t, double value) {
  raw::fill(t, value);
}
void zeros_(const Tensor& t) {
  constant_(t, 0.0);
}
void ones_(const Tensor& t) {
  constant_(t, 1.0);
}

void uniform_(const Tensor& t, double low, double high, Generator* generator) {
  TF_CHECK(low <= high, "init::uniform_: expected low <= high, got ", low, " > ", high);
  draw(t, RandomKind::uniform, low, high, generator);
}

void normal_(const Tensor& t, double mean, double std, Generator* generator) {
  TF_CHECK(std >= 0, "init::normal_: expected a non-negative std, got ", std);
  draw(t, RandomKind::normal, mean, std, generator);
}

namespace {
// The product of the dims after the first two (a convolution's kernel size). Multiplied out
// rather than divided from numel(), which is 0 for an empty tensor; a product of some of a
// tensor's sizes always fits (core/shape.h).
std::int64_t receptive_field(const Tensor& t) {
  std::int64_t r = 1;
  for (std::int64_t d = 2; d < t.dim(); ++d) r *= t.size(d);
  return r;
}

// fan_in + fan_out, in double: each fits in an int64, their sum need not.
double fan_sum(const Tensor& t) {
  return static_cast<double>(fan_in(t)) + static_cast<double>(fan_out(t));
}
}  // namespace

std::int64_t fan_in(const Tensor& t) {
  TF_CHECK(t.dim() >= 2, "init: fan_in needs at least 2 dims, got shape ", shape_str(t.shape()));
  return t.size(1) * receptive_field(t);
}

std::int64_t fan_out(const Tensor& t) {
  TF_CHECK(t.dim() >= 2, "init: fan_out needs at least 2 dims, got shape ", shape_str(t.shape()));
  return t.size(0) * receptive_field(t);
}

void xavier_uniform_(const Tensor& t, double gain, Generator* generator) {
  const double bound = gain * std::sqrt(6.0 / fan_sum(t));
  uniform_(t, -bound, bound, generator);
}

void xavier_normal_(const Tensor& t, double gain, Generator* generator) {
  normal_(t, 0.0, gain * std::sqrt(2.0 / fan_sum(t)), generator);
}

void kaiming_uniform_(const Tensor& t, double a, Generator* generator) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in(t)));
  uniform_(t, -bound, bound, generator);
}

}  // namespace tinyformer::nn::init
