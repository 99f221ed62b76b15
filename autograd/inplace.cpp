// The in-place tensor methods (copy_, add_, mul_, zero_, fill_, ...; declared in core/tensor.h):
// the new values are computed outside the graph and copied into the tensor's elements, and,
// where autograd must see the change, the tensor's history continues through a node whose first
// input is its history before the change.
#include <functional>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace tinyformer {

namespace {

using autograd::BackwardFn;

// Changes self's elements to `values` (self's shape, dtype and device; no graph) and, when grad
// mode is on and self or the operand requires grad, records node `op` with inputs {self before
// the change, operand}, whose backward maps the gradient of the new self to theirs.
const Tensor& change_in_place(const Tensor& self, const char* op, const Tensor& operand,
                              const Tensor& values, BackwardFn backward) {
  const bool tracked = GradMode::is_enabled() &&
                       (self.requires_grad() || (operand.defined() && operand.requires_grad()));
  if (tracked) {
    TF_CHECK(!(self.is_leaf() && self.requires_grad()), op,
             ": a leaf tensor that requires grad cannot change in place while grad mode is on; "
             "change it under NoGradGuard (as an optimizer does), or change a clone()");
    TF_CHECK(!self.is_view(), op,
             ": a view cannot change in place while autograd records it (its base's history "
             "would have to change too); use the out-of-place op, or change a clone() of it");
  }
  raw::copy(values, self);  // checks overlaps and bumps the version
  if (!tracked) return self;
  // A second handle onto self's state before the change keeps the history it had.
  const Tensor before(std::make_shared<TensorImpl>(*self.impl()));
  autograd::record(op, self, {before, operand}, std::move(backward));
  return self;
}

// `other` broadcast to self's shape, checked to have self's dtype and device.
Tensor operand_for(const Tensor& self, const Tensor& other, const char* op) {
  TF_CHECK(self.defined() && other.defined(), op, ": expected defined tensors");
  TF_CHECK(other.dtype() == self.dtype(), op, ": expected a ", self.dtype(),
           " operand (the tensor's dtype), got ", other.dtype(), "; convert it with .to() first");
  TF_CHECK(other.device() == self.device(), op, ": expected an operand on ", self.device(),
           ", got one on ", other.device());
  const Shape shape = broadcast_shapes(self.shape(), other.shape(), op);
  TF_CHECK(shape == self.shape(), op, ": an operand of shape ", shape_str(other.shape()),
           " does not broadcast to the tensor's shape ", shape_str(self.shape()));
  return other;
}

// The values of a differentiable expression, outside the graph.
template <typename F>
Tensor values_of(F&& f) {
  const NoGradGuard no_grad;
  return f();
}

}  // namespace

const Tensor& Tensor::copy_(const Tensor& src) const {
  check_defined("copy_");
  TF_CHECK(src.defined(), "copy_: expected a defined source");
  const Shape shape = broadcast_shapes(this->shape(), src.shape(), "copy_");
  TF_CHECK(shape == this->shape(), "copy_: a source of shape ", shape_str(src.shape()),
           " does not broadcast to the tensor's shape ", shape_str(this->shape()));
  const Tensor values = raw::expand(src.detach(), this->shape(), "copy_");
  const DType src_dtype = src.dtype();
  const Device src_device = src.device();
  // d(new self)/d(src) = 1 in src's dtype and device; the old self's elements are gone.
  return change_in_place(*this, "copy_", src, values, [src_dtype, src_device](const Tensor& g) {
    return std::vector<Tensor>{Tensor(), tinyformer::to(tinyformer::to(g, src_device), src_dtype)};
  });
}

const Tensor& Tensor::add_(const Tensor& other, double alpha) const {
  check_defined("add_");
  const Tensor b = operand_for(*this, other, "add_");
  const Tensor values = values_of([&] { return alpha == 1.0 ? *this + b : *this + b * alpha; });
  return change_in_place(*this, "add_", b, values, [alpha](const Tensor& g) {
    return std::vector<Tensor>{g, alpha == 1.0 ? g : g * alpha};
  });
}

const Tensor& Tensor::sub_(const Tensor& other, double alpha) const {
  return add_(other, -alpha);
}

const Tensor& Tensor::add_(double value) const {
  check_defined("add_");
  const Tensor values = values_of([&] { return *this + value; });
  return change_in_place(*this, "add_", Tensor(), values, [](const Tensor& g) {
    return std::vector<Tensor>{g, Tensor()};
  });
}

const Tensor& Tensor::mul_(const Tensor& other) const {
  check_defined("mul_");
  const Tensor b = operand_for(*this, other, "mul_");
  const Tensor values = values_of([&] { return *this * b; });
  const bool tracked = GradMode::is_enabled() && (requires_grad() || b.requires_grad());
  // The operand's gradient needs self's values before the change: a copy, taken only then.
  const Tensor before = tracked && b.requires_grad() ? detach().clone() : Tensor();
  // Saved last, so that the node recorded next (this one) checks its version.
  const Tensor saved_b = tracked && requires_grad() ? autograd::save(b) : Tensor();
  return change_in_place(*this, "mul_", b, values, [before, saved_b](const Tensor& g) {
    return std::vector<Tensor>{saved_b.defined() ? g * saved_b : Tensor(),
                               before.defined() ? g * before : Tensor()};
  });
}

const Tensor& Tensor::mul_(double value) const {
  check_defined("mul_");
  const Tensor values = values_of([&] { return *this * value; });
  return change_in_place(*this, "mul_", Tensor(), values, [value](const Tensor& g) {
    return std::vector<Tensor>{g * value, Tensor()};
  });
}

const Tensor& Tensor::div_(double value) const {
  check_defined("div_");
  const Tensor values = values_of([&] { return *this / value; });
  return change_in_place(*this, "div_", Tensor(), values, [value](const Tensor& g) {
    return std::vector<Tensor>{g / value, Tensor()};
  });
}

const Tensor& Tensor::fill_(double value) const {
  check_defined("fill_");
  const Tensor values = raw::expand(full({}, value, options()), shape(), "fill_");
  return change_in_place(*this, "fill_", Tensor(), values, [](const Tensor&) {
    return std::vector<Tensor>{Tensor(), Tensor()};
  });
}

const Tensor& Tensor::zero_() const {
  check_defined("zero_");
  return fill_(0.0);
}

}  // namespace tinyformer
