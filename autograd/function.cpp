// Custom functions: the user's forward runs without a graph, its backward becomes a node.
#include "autograd/function.h"

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace tinyformer::autograd {

Tensor apply(std::shared_ptr<Function> fn, const std::vector<Tensor>& inputs) {
  TF_CHECK(fn != nullptr, "autograd::apply: expected a Function, got a null pointer");
  std::vector<Tensor> detached;
  detached.reserve(inputs.size());
  for (const Tensor& t : inputs) detached.push_back(t.defined() ? t.detach() : t);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn->forward(detached);
  }
  TF_CHECK(out.defined(), fn->name(), ": forward returned an undefined Tensor");
  // The output must be a tensor of its own, so that attaching a node changes nothing else.
  out = out.detach();
  // The inputs the function kept (as members) are its saved tensors: the node checks that they
  // did not change in place before its backward reads them. Noted after the forward, whose own
  // ops record nodes of their own.
  for (const Tensor& t : detached) note_saved(t);
  struct InputMeta {
    Shape shape;
    DType dtype;
    Device device;
  };
  std::vector<InputMeta> metas;
  for (const Tensor& t : inputs) {
    metas.push_back(t.defined() ? InputMeta{t.shape(), t.dtype(), t.device()}
                                : InputMeta{Shape{}, DType::float32, Device::cpu()});
  }
  const std::string name = fn->name();
  return record(name.c_str(), out, inputs, [fn, metas, name](const Tensor& g) {
    std::vector<Tensor> grads = fn->backward(g);
    TF_CHECK(grads.size() == metas.size(), name, ": backward returned ", grads.size(),
             " gradients for ", metas.size(), " inputs");
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      const InputMeta& m = metas[i];
      TF_CHECK(grads[i].shape() == m.shape, name, ": backward returned a gradient of shape ",
               shape_str(grads[i].shape()), " for input ", i, " of shape ", shape_str(m.shape));
      TF_CHECK(grads[i].dtype() == m.dtype, name, ": backward returned a ", grads[i].dtype(),
               " gradient for input ", i, ", a ", m.dtype, " tensor (a gradient has its input's ",
               "dtype)");
      TF_CHECK(grads[i].device() == m.device, name, ": backward returned a gradient on ",
               grads[i].device(), " for input ", i, ", which is on ", m.device);
    }
    return grads;
  });
}

}  // namespace tinyformer::autograd
