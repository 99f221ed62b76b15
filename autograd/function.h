// The custom-function API: a user adds a differentiable op by writing its forward and backward.
//
//   struct Cube : autograd::Function {
//     Tensor x;
//     Tensor forward(const std::vector<Tensor>& in) override { x = in[0]; return in[0] * in[0] *
//     in[0]; } std::vector<Tensor> backward(const Tensor& g) override { return {g * 3.0 * x * x}; }
//   };
//   Tensor y = autograd::apply(std::make_shared<Cube>(), {x});
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tinyformer::autograd {

class Function {
 public:
  virtual ~Function() = default;
  // Runs without recording a graph; inputs arrive detached. Keep what backward needs as members.
  virtual Tensor forward(const std::vector<Tensor>& inputs) = 0;
  // One gradient per input (undefined where an input needs none), each of that input's shape.
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  virtual std::string name() const { return "CustomFunction"; }
};

// Runs fn->forward and records fn->backward in the graph; fn is released after backward.
Tensor apply(std::shared_ptr<Function> fn, const std::vector<Tensor>& inputs);

}  // namespace tinyformer::autograd
