// Gradient checks of whole modules: the module is moved to float64 and its parameters are
// checked as inputs next to the input tensor.
#pragma once

#include <tinyformer/tinyformer.h>

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

}  // namespace test
