// Custom functions: the user's forward runs without a graph, its backward becomes a node.
#include "autograd/function.h"

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace tinyformer::autograd {

Tensor apply(std::shared_ptr<Function> fn, const std::vector<Tensor>& inputs) {
  TF_CHECK(fn != nullptr, "autograd::apply: expected a Function, got a null pointer");
  std::vector<Tensor> detached;
  detached.reserve(inputs.size());
  for (const Tensor& t : inputs) detached.push_back(save(t));
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn->forward(detached);
  }
  TF_CHECK(out.defined(), fn->name(), ": forward returned an undefined Tensor");
  // The output must be a tensor of its own, so that attaching a node changes nothing else.
  out = out.detach();
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.defined() ? t.shape() : Shape{});
  const std::string name = fn->name();
  return record(name.c_str(), out, inputs, [fn, shapes, name](const Tensor& g) {
    std::vector<Tensor> grads = fn->backward(g);
    TF_CHECK(grads.size() == shapes.size(), name, ": backward returned ", grads.size(),
             " gradients for ", shapes.size(), " inputs");
    for (std::size_t i = 0; i < grads.size(); ++i) {
      TF_CHECK(!grads[i].defined() || grads[i].shape() == shapes[i], name,
               ": backward returned a gradient of shape ", shape_str(grads[i].shape()),
               " for input ", i, " of shape ", shape_str(shapes[i]));
    }
    return grads;
  });
}

}  // namespace tinyformer::autograd
