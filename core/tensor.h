// Tensor: a view (shape, strides, offset, dtype) onto a shared Storage, plus its autograd state.
//
// The class lives in core/ with everything about memory and layout. The differentiable methods
// declared at the bottom (view, sum, matmul, backward, ...) are sugar for the free functions of
// autograd/ and are defined there (autograd/tensor_methods.cpp), the way PyTorch's Tensor
// declares methods that its op library defines.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace tinyformer {

namespace autograd {
class Node;
}

struct TensorImpl;

// Options for factory functions: zeros({2, 3}, {.dtype = kFloat64, .requires_grad = true}).
struct TensorOptions {
  DType dtype = DType::float32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- Layout (core) ---
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t d) const;
  std::int64_t stride(std::int64_t d) const;
  std::int64_t offset() const;  // in elements
  std::int64_t numel() const;
  DType dtype() const;
  Device device() const;
  // This tensor's dtype and device (requires_grad false), for a factory that should follow it:
  // zeros({n}, x.options()), as PyTorch's x.options().
  TensorOptions options() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const;
  // Pointer to the first element (storage data + offset); device memory for CUDA tensors.
  void* data_ptr() const;
  template <typename T>
  T* data() const;  // checks the dtype; any device

  // Copies to the CPU (synchronising a device first) and reads the values.
  template <typename T>
  T item() const;
  template <typename T>
  std::vector<T> to_vector() const;

  // Same storage, no autograd history (the result never requires grad).
  Tensor detach() const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // The version counter of the storage (PyTorch's `_version`): how many in-place changes it has
  // had. In-place methods, raw::copy and raw::fill into the tensor, and optimizer steps bump it;
  // code that writes through data_ptr() calls bump_version() itself. A backward refuses to read
  // a saved tensor whose version moved on since the forward.
  std::uint64_t version() const;
  void bump_version() const;
  // True when this handle is the only one to its tensor and no other tensor shares its storage:
  // nothing else can read or write its elements.
  bool is_sole_owner() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // --- Autograd state ---
  bool requires_grad() const;
  // Marks a leaf as needing a gradient; throws for a non-floating dtype or a non-leaf.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward reaches this tensor
  void set_grad(const Tensor& grad) const;
  void zero_grad() const;  // drops the gradient
  const std::shared_ptr<autograd::Node>& grad_fn() const;

  // --- Differentiable methods (defined in autograd/) ---
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  Tensor permute(const Shape& dims) const;
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor pow(double exponent) const;
  Tensor sqrt() const;
  Tensor abs() const;

  // --- In-place methods (defined in autograd/inplace.cpp), PyTorch's trailing underscore ---
  // Each changes this tensor's elements and bumps its version. The operand broadcasts to this
  // tensor's shape and has its dtype and device (copy_ converts both). Under grad mode, when this
  // tensor or the operand requires grad:
  //  - a leaf that requires grad is refused: change it under NoGradGuard, as an optimizer does;
  //  - a view (the result of view, transpose, slice, select, expand, ...) is refused: autograd
  //    would have to rewrite its base's history (PyTorch does; use the out-of-place op);
  //  - anything else is recorded: the tensor's history continues through the in-place op, and
  //    a backward that saved its old value refuses to run (the version counter).
  const Tensor& copy_(const Tensor& src) const;
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& add_(double value) const;
  const Tensor& sub_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(double value) const;
  const Tensor& div_(double value) const;
  const Tensor& zero_() const;
  const Tensor& fill_(double value) const;
  // Whether this tensor is a view made by a view op (it shares its base's storage and layout
  // rules: in-place changes are seen by the base).
  bool is_view() const;

 private:
  void check_defined(const char* op) const;
  std::shared_ptr<TensorImpl> impl_;
};

// The state behind a Tensor handle. Views share `storage`; each has its own autograd state.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  std::int64_t offset = 0;
  DType dtype = DType::float32;

  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;         // the op that made this tensor
  std::weak_ptr<autograd::Node> grad_accumulator;  // for leaves: where gradients land
  bool is_view = false;  // made by a view op of autograd/ from another tensor (Tensor::is_view)
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// --- Factories ---
Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
// The *_like factories take t's shape, dtype and device (never its requires_grad).
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// [start, end) in steps of `step`; an int64 tensor unless options say otherwise.
Tensor arange(double start, double end, double step = 1.0,
              const TensorOptions& options = {.dtype = DType::int64});
Tensor arange(std::int64_t end, const TensorOptions& options = {.dtype = DType::int64});
// Standard normal and uniform [0, 1) numbers from the default generator (see core/random.h).
Tensor randn(const Shape& shape, const TensorOptions& options = {});
Tensor rand(const Shape& shape, const TensorOptions& options = {});
// A scalar (0-dim) tensor.
Tensor scalar_tensor(double value, const TensorOptions& options = {});

// A tensor holding a copy of `values` with the given shape; the dtype follows T.
template <typename T>
Tensor from(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
template <typename T>
Tensor from(std::initializer_list<T> values, const Shape& shape, Device device = Device::cpu()) {
  return from(std::vector<T>(values), shape, device);
}

// --- Raw (non-differentiable) layout operations used by autograd/ and the backends ---
namespace raw {
// A tensor that shares `base`'s storage with the given layout (bounds are checked, and errors
// name `op`).
Tensor as_strided(const Tensor& base, const Shape& shape, const Shape& strides, std::int64_t offset,
                  const char* op = "as_strided");
// `t` broadcast to `shape` (NumPy rules) as a stride-0 view; throws naming `op` on a mismatch.
Tensor expand(const Tensor& t, const Shape& shape, const char* op);
// Copies `src` into `dst` (same shape; dtypes and devices may differ).
void copy(const Tensor& src, const Tensor& dst);
Tensor contiguous(const Tensor& t);
Tensor to_dtype(const Tensor& t, DType dtype);
Tensor to_device(const Tensor& t, Device device);
void fill(const Tensor& t, double value);
// Points `dst` at `src`'s storage and layout (its dtype too), keeping dst's autograd identity:
// every handle of dst sees the new data. Used to move parameters between devices in place.
void set_data(const Tensor& dst, const Tensor& src);
}  // namespace raw

}  // namespace tinyformer
