// Views and data movement between shapes. A view shares its input's storage (raw::as_strided)
// and its backward routes the gradient back to the input's layout; cat, stack and the
// conversions copy.
#include "autograd/shape_ops.h"

#include <algorithm>
#include <optional>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/checked.h"

namespace tinyformer {

using autograd::record;

namespace {

void check_defined(const Tensor& x, const char* op) {
  TF_CHECK(x.defined(), op, ": expected a defined tensor, got an undefined Tensor");
}

// Like normalize_dim, but for ops that index a real dim (a 0-dim tensor has none).
std::int64_t wrap_dim(const Tensor& x, std::int64_t dim, const char* op) {
  TF_CHECK(x.dim() > 0, op, ": expected a tensor with at least one dim, got a 0-dim tensor");
  return normalize_dim(dim, x.dim(), op);
}

// A new handle onto x's storage with the given layout (never x itself, so that recording a
// node on it leaves x's own history alone).
Tensor alias(const Tensor& x, const Shape& shape, const Shape& strides, std::int64_t offset,
             const char* op) {
  Tensor view = raw::as_strided(x, shape, strides, offset, op);
  view.impl()->is_view = true;
  return view;
}

// Replaces one -1 in `shape` by the size that makes the element count `numel`.
Shape infer_shape(const Shape& shape, std::int64_t numel, const char* op) {
  Shape out = shape;
  std::int64_t known = 1;
  std::optional<std::size_t> inferred;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TF_CHECK(!inferred, op, ": only one dim can be -1, got ", shape_str(shape));
      inferred = i;
    } else {
      TF_CHECK(shape[i] >= 0, op, ": expected sizes >= 0 (or one -1), got ", shape_str(shape));
    }
  }
  // The product with zeros counted as 1 must fit (core/shape.h), whatever the element count;
  // then the product of the known sizes does too.
  std::int64_t extent = 1;
  for (std::int64_t d : shape) {
    if (d == -1) continue;
    extent = checked_mul(extent, std::max<std::int64_t>(d, 1), op, shape);
    known *= d;
  }
  if (inferred) {
    TF_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
             " is invalid for a tensor of ", numel, " elements");
    out[*inferred] = numel / known;
  } else {
    TF_CHECK(known == numel, op, ": shape ", shape_str(shape), " is invalid for a tensor of ",
             numel, " elements");
  }
  return out;
}

// The strides that let `new_shape` view memory laid out as (old_shape, old_strides), or none
// when the new dims would have to split or merge dims that are not adjacent in memory.
// Walks both shapes from the back in chunks of old dims that are contiguous with each other
// (the algorithm of PyTorch's computeStride).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides,
                                  const Shape& new_shape) {
  const std::int64_t numel = shape_numel(old_shape);
  if (numel <= 1 || old_shape.empty()) {
    if (old_shape == new_shape) return old_strides;
    return contiguous_strides(new_shape);
  }
  Shape new_strides(new_shape.size());
  auto view_d = static_cast<std::int64_t>(new_shape.size()) - 1;
  std::int64_t chunk_base_stride = old_strides.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  // The element counts are products of sizes of valid shapes and fit; a stride times a count
  // can overflow when a size-1 dim carries a huge stride, and such a layout is not viewed.
  std::int64_t span = 0;
  for (auto tensor_d = static_cast<std::int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    // A chunk ends where the next old dim is not laid out right after this one.
    if (mul_overflows(tensor_numel, chunk_base_stride, span)) return std::nullopt;
    const bool chunk_ends =
        tensor_d == 0 || (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != span);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      if (mul_overflows(view_numel, chunk_base_stride, new_strides[view_d])) return std::nullopt;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

// x's elements start, start + step, ... (count of them) along dim; drop_dim removes that dim
// (count must then be 1). The shared layout behind slice, narrow, select and split.
struct Window {
  std::int64_t dim, start, count, step;
  bool drop_dim;
};

Tensor window_view(const Tensor& x, const Window& w, const char* op) {
  Shape shape = x.shape(), strides = x.strides();
  const std::int64_t offset =
      checked_add(x.offset(), checked_mul(w.start, strides[w.dim], op, shape), op, shape);
  if (w.drop_dim) {
    shape.erase(shape.begin() + w.dim);
    strides.erase(strides.begin() + w.dim);
  } else {
    // The step matters only between two elements: a window of at most one keeps the stride
    // (a huge step must not overflow it).
    if (w.count > 1) strides[w.dim] = checked_mul(strides[w.dim], w.step, op, shape);
    shape[w.dim] = w.count;
  }
  return alias(x, shape, strides, offset, op);
}

// The window's gradient is g in the window's place and zero elsewhere.
Tensor windowed(const char* name, const Tensor& x, const Window& w) {
  const Shape in_shape = x.shape();
  return record(name, window_view(x, w, name), {x}, [in_shape, w, name](const Tensor& g) {
    Tensor gx = zeros(in_shape, {.dtype = g.dtype(), .device = g.device()});
    raw::copy(g, window_view(gx, w, name));
    return std::vector<Tensor>{gx};
  });
}

// A view with x's elements in a new shape; the gradient goes back through reshape.
Tensor reshaped_view(const char* name, const Tensor& x, const Shape& shape, const Shape& strides) {
  const Shape in_shape = x.shape();
  return record(name, alias(x, shape, strides, x.offset(), name), {x},
                [in_shape](const Tensor& g) { return std::vector<Tensor>{reshape(g, in_shape)}; });
}

// A copy of x in a fresh contiguous tensor; gradients pass through unchanged.
Tensor copied(const char* name, const Tensor& x) {
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) backend(x.device()).copy(x, out);
  return record(name, out, {x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

}  // namespace

// --- Views ---

Tensor view(const Tensor& x, const Shape& shape) {
  check_defined(x, "view");
  const Shape target = infer_shape(shape, x.numel(), "view");
  const auto strides = view_strides(x.shape(), x.strides(), target);
  TF_CHECK(strides.has_value(), "view: shape ", shape_str(target),
           " is not compatible with the tensor's layout (size ", shape_str(x.shape()), ", strides ",
           shape_str(x.strides()),
           "): it would merge dims that are not adjacent in memory; use reshape instead");
  return reshaped_view("view", x, target, *strides);
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined(x, "reshape");
  const Shape target = infer_shape(shape, x.numel(), "reshape");
  if (auto strides = view_strides(x.shape(), x.strides(), target)) {
    return reshaped_view("view", x, target, *strides);
  }
  Tensor packed = contiguous(x);
  return reshaped_view("view", packed, target, contiguous_strides(target));
}

// d transpose(x) = transpose(g)
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  check_defined(x, "transpose");
  const std::int64_t d0 = normalize_dim(dim0, x.dim(), "transpose");
  const std::int64_t d1 = normalize_dim(dim1, x.dim(), "transpose");
  Shape shape = x.shape(), strides = x.strides();
  if (x.dim() > 0) {
    std::swap(shape[d0], shape[d1]);
    std::swap(strides[d0], strides[d1]);
  }
  return record("transpose", alias(x, shape, strides, x.offset(), "transpose"), {x},
                [d0, d1](const Tensor& g) { return std::vector<Tensor>{transpose(g, d0, d1)}; });
}

// d permute(x, p) = permute(g, p^-1)
Tensor permute(const Tensor& x, const Shape& dims) {
  check_defined(x, "permute");
  TF_CHECK(static_cast<std::int64_t>(dims.size()) == x.dim(), "permute: expected ", x.dim(),
           " dims for a tensor of shape ", shape_str(x.shape()), ", got ", shape_str(dims));
  Shape shape(dims.size()), strides(dims.size()), inverse(dims.size(), -1);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = normalize_dim(dims[i], x.dim(), "permute");
    TF_CHECK(inverse[d] == -1, "permute: dim ", d, " appears more than once in ", shape_str(dims));
    inverse[d] = static_cast<std::int64_t>(i);
    shape[i] = x.size(d);
    strides[i] = x.stride(d);
  }
  return record("permute", alias(x, shape, strides, x.offset(), "permute"), {x},
                [inverse](const Tensor& g) { return std::vector<Tensor>{permute(g, inverse)}; });
}

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end,
             std::int64_t step) {
  check_defined(x, "slice");
  const std::int64_t d = wrap_dim(x, dim, "slice");
  TF_CHECK(step > 0, "slice: expected a positive step, got ", step);
  const std::int64_t n = x.size(d);
  // Python's rules: negative bounds count from the end, then both clamp into [0, n].
  auto clamp = [n](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + n : i, 0, n); };
  const std::int64_t lo = clamp(start), hi = std::max(lo, clamp(end));
  // ceil((hi - lo) / step) without forming hi - lo + step - 1, which a huge step overflows.
  const std::int64_t count = hi == lo ? 0 : (hi - lo - 1) / step + 1;
  return windowed("slice", x, {d, lo, count, step, false});
}

Tensor narrow(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  check_defined(x, "narrow");
  const std::int64_t d = wrap_dim(x, dim, "narrow");
  const std::int64_t n = x.size(d);
  TF_CHECK(start >= -n && start <= n, "narrow: start ", start, " is out of range for dim ", d,
           " of size ", n);
  const std::int64_t s = start < 0 ? start + n : start;
  TF_CHECK(length >= 0 && length <= n - s, "narrow: expected 0 <= length <= ", n - s, " (dim ", d,
           " of size ", n, " from ", s, "), got length ", length);
  return windowed("narrow", x, {d, s, length, 1, false});
}

Tensor select(const Tensor& x, std::int64_t dim, std::int64_t index) {
  check_defined(x, "select");
  const std::int64_t d = wrap_dim(x, dim, "select");
  const std::int64_t n = x.size(d);
  TF_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d,
           " of size ", n);
  return windowed("select", x, {d, index < 0 ? index + n : index, 1, 1, true});
}

Tensor unsqueeze(const Tensor& x, std::int64_t dim) {
  check_defined(x, "unsqueeze");
  const std::int64_t d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  // Any stride works for a size-1 dim; this one keeps a contiguous input contiguous (1 where
  // the product would overflow, for an empty view with a huge stride).
  std::int64_t stride = 1;
  if (d < x.dim() && mul_overflows(x.stride(d), x.size(d), stride)) stride = 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return reshaped_view("unsqueeze", x, shape, strides);
}

Tensor squeeze(const Tensor& x) {
  check_defined(x, "squeeze");
  Shape shape, strides;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) continue;
    shape.push_back(x.size(d));
    strides.push_back(x.stride(d));
  }
  return reshaped_view("squeeze", x, shape, strides);
}

Tensor squeeze(const Tensor& x, std::int64_t dim) {
  check_defined(x, "squeeze");
  const std::int64_t d = normalize_dim(dim, x.dim(), "squeeze");
  Shape shape = x.shape(), strides = x.strides();
  if (x.dim() > 0 && x.size(d) == 1) {
    shape.erase(shape.begin() + d);
    strides.erase(strides.begin() + d);
  }
  return reshaped_view("squeeze", x, shape, strides);
}

// The output is x broadcast with stride 0, so the gradient has the output's shape; the engine
// sums it back to x's shape (autograd::sum_to), as it does for every broadcasting op.
Tensor expand(const Tensor& x, const Shape& shape) {
  check_defined(x, "expand");
  TF_CHECK(static_cast<std::int64_t>(shape.size()) >= x.dim(), "expand: cannot expand shape ",
           shape_str(x.shape()), " to ", shape_str(shape), " (fewer dims)");
  const std::size_t lead = shape.size() - x.shape().size();
  Shape target = shape;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != -1) continue;
    TF_CHECK(i >= lead, "expand: -1 is not allowed for the new leading dim ", i, " in ",
             shape_str(shape));
    target[i] = x.shape()[i - lead];
  }
  Tensor out = raw::expand(x, target, "expand");
  if (out.is_same(x)) out = alias(x, x.shape(), x.strides(), x.offset(), "expand");
  return record("expand", out, {x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor flatten(const Tensor& x, std::int64_t start_dim, std::int64_t end_dim) {
  check_defined(x, "flatten");
  if (x.dim() == 0) return reshape(x, {1});
  const std::int64_t s = normalize_dim(start_dim, x.dim(), "flatten");
  const std::int64_t e = normalize_dim(end_dim, x.dim(), "flatten");
  TF_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim,
           " for a tensor of ", x.dim(), " dims");
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  std::int64_t merged = 1;
  for (std::int64_t d = s; d <= e; ++d) merged *= x.size(d);
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, shape);
}

// --- Copies ---

Tensor contiguous(const Tensor& x) {
  check_defined(x, "contiguous");
  if (x.is_contiguous()) return x;
  return copied("contiguous", x);
}

Tensor clone(const Tensor& x) {
  check_defined(x, "clone");
  return copied("clone", x);
}

// d to(x, dtype) = to(g, x's dtype). A conversion to int64 or bool ends the graph.
Tensor to(const Tensor& x, DType dtype) {
  check_defined(x, "to");
  if (x.dtype() == dtype) return x;
  Tensor out = raw::to_dtype(x, dtype);
  if (!is_floating(dtype)) return out;
  const DType from = x.dtype();
  return record("to_dtype", out, {x},
                [from](const Tensor& g) { return std::vector<Tensor>{raw::to_dtype(g, from)}; });
}

// d to(x, device) = to(g, x's device)
Tensor to(const Tensor& x, Device device) {
  check_defined(x, "to");
  if (x.device() == device) return x;
  const Device from = x.device();
  return record("to_device", raw::to_device(x, device), {x},
                [from](const Tensor& g) { return std::vector<Tensor>{raw::to_device(g, from)}; });
}

// --- Joining and splitting ---

// out: the inputs' shape with dim sizes added up. Each input's gradient is its window of g.
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  TF_CHECK(!tensors.empty(), "cat: expected at least one tensor, got an empty list");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    TF_CHECK(tensors[i].defined(), "cat: tensor ", i, " is undefined");
  }
  const Tensor& first = tensors[0];
  const std::int64_t d = wrap_dim(first, dim, "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TF_CHECK(t.dtype() == first.dtype(), "cat: tensor ", i, " is ", t.dtype(), ", tensor 0 is ",
             first.dtype());
    TF_CHECK(t.device() == first.device(), "cat: tensor ", i, " is on ", t.device(),
             ", tensor 0 on ", first.device());
    bool same_other_dims = t.dim() == first.dim();
    for (std::int64_t k = 0; same_other_dims && k < t.dim(); ++k) {
      same_other_dims = k == d || t.size(k) == first.size(k);
    }
    TF_CHECK(same_other_dims, "cat: expected shapes that match ", shape_str(first.shape()),
             " except in dim ", d, ", got ", shape_str(t.shape()), " for tensor ", i);
    shape[d] = checked_add(shape[d], t.size(d), "cat", t.shape());
  }
  Tensor out = empty(shape, {.dtype = first.dtype(), .device = first.device()});
  std::vector<Window> windows;
  std::int64_t start = 0;
  for (const Tensor& t : tensors) {
    const Window w{d, start, t.size(d), 1, false};
    if (t.numel() > 0) backend(out.device()).copy(t, window_view(out, w, "cat"));
    windows.push_back(w);
    start += t.size(d);
  }
  return record("cat", out, tensors, [windows](const Tensor& g) {
    std::vector<Tensor> grads;
    for (const Window& w : windows) grads.push_back(window_view(g, w, "cat"));
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  TF_CHECK(!tensors.empty(), "stack: expected at least one tensor, got an empty list");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    TF_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    TF_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: expected every tensor of shape ",
             shape_str(tensors[0].shape()), ", got ", shape_str(tensors[i].shape()), " for tensor ",
             i);
  }
  const std::int64_t d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (const Tensor& t : tensors) expanded.push_back(unsqueeze(t, d));
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim) {
  check_defined(x, "split");
  const std::int64_t d = wrap_dim(x, dim, "split");
  TF_CHECK(split_size > 0, "split: expected a positive split_size, got ", split_size);
  const std::int64_t n = x.size(d);
  std::vector<Tensor> pieces;
  for (std::int64_t start = 0; start < n || (n == 0 && pieces.empty()); start += split_size) {
    pieces.push_back(narrow(x, d, start, std::min(split_size, n - start)));
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim) {
  check_defined(x, "chunk");
  const std::int64_t d = wrap_dim(x, dim, "chunk");
  TF_CHECK(chunks > 0, "chunk: expected a positive number of chunks, got ", chunks);
  const std::int64_t n = x.size(d);
  return split(x, std::max<std::int64_t>((n + chunks - 1) / chunks, 1), d);
}

}  // namespace tinyformer
