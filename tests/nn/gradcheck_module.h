// Helpers of the nn tests: gradient checks of whole modules (the module is moved to float64 and
// its parameters are checked as inputs next to the input tensor), float64 random inputs, and the
// largest elementwise difference between two tensors.
#pragma once

#include <doctest/doctest.h>
#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace test {

using namespace tinyformer;

// forward(x) must use the module's own parameters; gradcheck perturbs them in place.
inline bool gradcheck_module(nn::Module& m, const Tensor& x,
                             const std::function<Tensor(const Tensor&)>& forward,
                             GradcheckOptions options = {}) {
  m.to(kFloat64);
  std::vector<Tensor> inputs = {x};
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  return gradcheck([&](const std::vector<Tensor>& in) { return forward(in[0]); }, inputs, options);
}

inline Tensor randn64(const Shape& shape, bool requires_grad = true) {
  return randn(shape, {.dtype = kFloat64, .requires_grad = requires_grad});
}

// max |a - b| over all elements, read as double; the sizes must agree.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

}  // namespace test
