// gradcheck: compares the gradients of backward() with central finite differences.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace tinyformer {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
};

// f maps the inputs to one tensor. Every input that requires grad must be a contiguous
// float64 CPU leaf. The check projects f's output on a fixed random tensor r and compares
// d<r, f>/dx from backward with (<r, f(x + eps e_j)> - <r, f(x - eps e_j)>) / (2 eps) for every
// element j of every such input. Returns true when all agree; otherwise throws Error naming the
// input, the element and both values.
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
               const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace tinyformer
