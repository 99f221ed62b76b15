// Reductions: sum, mean, var, max and argmax over dims. The backend always writes the keepdim
// form (reduced dims of size 1); without keepdim the result is a view of it with those dims
// dropped. Backward broadcasts the gradient back over the reduced dims as a stride-0 view.
#include "autograd/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;

namespace {

void check_input(const Tensor& x, const char* op) {
  TF_CHECK(x.defined(), op, ": expected a defined tensor, got an undefined Tensor");
  TF_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", x.dtype());
}

// The dims to reduce, normalised and sorted; an empty list means every dim.
Shape reduce_dims(const Tensor& x, const Shape& dims, const char* op) {
  std::vector<bool> seen(static_cast<std::size_t>(std::max<std::int64_t>(x.dim(), 1)), false);
  for (std::int64_t dim : dims) {
    const std::int64_t d = normalize_dim(dim, x.dim(), op);
    TF_CHECK(!seen[d], op, ": dim ", d, " appears more than once in ", shape_str(dims));
    seen[d] = true;
  }
  Shape out;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    if (dims.empty() || seen[d]) out.push_back(d);
  }
  return out;
}

// x's shape with the reduced dims set to 1 (keepdim) or removed.
Shape reduced_shape(const Shape& shape, const Shape& dims, bool keepdim) {
  Shape out;
  std::size_t next = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const bool reduced = next < dims.size() && dims[next] == static_cast<std::int64_t>(d);
    if (reduced) ++next;
    if (!reduced) {
      out.push_back(shape[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

// A contiguous tensor seen with another shape of the same element count (no graph).
Tensor raw_view(const Tensor& t, const Shape& shape) {
  return raw::as_strided(t, shape, contiguous_strides(shape), t.offset());
}

// out (keepdim form) = op over dims of x; no graph.
Tensor reduce_raw(ReduceOp op, const Tensor& x, const Shape& dims) {
  Tensor out =
      empty(reduced_shape(x.shape(), dims, true), {.dtype = x.dtype(), .device = x.device()});
  if (x.numel() == 0) {
    // The sum of nothing is 0; the mean of nothing is 0 / 0, NaN, as in PyTorch.
    raw::fill(out, op == ReduceOp::mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
  } else if (dims.empty()) {
    backend(x.device()).copy(x, out);  // a 0-dim input: nothing to reduce
  } else {
    backend(x.device()).reduce(op, x, dims, out);
  }
  return out;
}

// g (of the reduced shape) broadcast back to `shape` as a stride-0 view.
Tensor broadcast_back(const Tensor& g, const Shape& shape, const Shape& dims) {
  return raw::expand(reshape(g, reduced_shape(shape, dims, true)), shape, "backward");
}

Tensor sum_or_mean(ReduceOp op, const Tensor& x, const Shape& dims_in, bool keepdim,
                   const char* name) {
  TF_CHECK(x.defined(), name, ": expected a defined tensor, got an undefined Tensor");
  // As in PyTorch: the sum of int64 or bool elements is an int64 count (no gradient), and the
  // mean of integers is refused rather than silently rounded or promoted.
  if (op == ReduceOp::sum && x.dtype() == DType::boolean)
    return sum_or_mean(op, x.to(DType::int64), dims_in, keepdim, name);
  TF_CHECK(is_floating(x.dtype()) || (op == ReduceOp::sum && x.dtype() == DType::int64), name,
           ": expected a floating tensor, got ", x.dtype(),
           op == ReduceOp::mean && !is_floating(x.dtype())
               ? " (the mean of integers or bools is not defined, as in PyTorch: take the mean "
                 "of x.to(kFloat32))"
               : "");
  const Shape dims = reduce_dims(x, dims_in, name);
  const Shape in_shape = x.shape();
  Tensor out = reduce_raw(op, x, dims);
  if (!keepdim) out = raw_view(out, reduced_shape(in_shape, dims, false));
  std::int64_t count = 1;
  for (std::int64_t d : dims) count *= in_shape[d];
  const double scale = op == ReduceOp::mean ? 1.0 / static_cast<double>(count) : 1.0;
  return record(name, out, {x}, [in_shape, dims, scale](const Tensor& g) {
    const Tensor gs = scale == 1.0 ? g : g * scale;
    return std::vector<Tensor>{broadcast_back(gs, in_shape, dims)};
  });
}

}  // namespace

// d sum(x) / dx = 1 everywhere: g broadcast over the reduced dims.
Tensor sum(const Tensor& x) {
  return sum_or_mean(ReduceOp::sum, x, {}, false, "sum");
}
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_or_mean(ReduceOp::sum, x, dims, keepdim, "sum");
}

// d mean(x) / dx = 1 / count: g / count broadcast over the reduced dims.
Tensor mean(const Tensor& x) {
  return sum_or_mean(ReduceOp::mean, x, {}, false, "mean");
}
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_or_mean(ReduceOp::mean, x, dims, keepdim, "mean");
}

// var = sum((x - mean)^2) / (count - unbiased), composed so that its backward comes free.
Tensor var(const Tensor& x, const Shape& dims_in, bool unbiased, bool keepdim) {
  check_input(x, "var");
  const Shape dims = reduce_dims(x, dims_in, "var");
  std::int64_t count = 1;
  for (std::int64_t d : dims) count *= x.size(d);
  Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  // The divisor is max(0, count - correction), as PyTorch's: a single element (unbiased) and an
  // empty reduction give 0 / 0 = NaN.
  const std::int64_t divisor = std::max<std::int64_t>(0, count - (unbiased ? 1 : 0));
  return sum(centered * centered, dims, keepdim) / static_cast<double>(divisor);
}

// The largest element; its (first) position receives the gradient.
Tensor max(const Tensor& x) {
  check_input(x, "max");
  TF_CHECK(x.numel() > 0, "max: expected a non-empty tensor, got shape ", shape_str(x.shape()));
  return max(reshape(x, {-1}), 0, false).first;
}

namespace {
// values, indices: x's shape without dim (or with it set to 1 when keepdim).
std::pair<Tensor, Tensor> max_along(const Tensor& x, std::int64_t dim, bool keepdim,
                                    const char* name) {
  check_input(x, name);
  const std::int64_t d = normalize_dim(dim, x.dim(), name);
  TF_CHECK(x.dim() == 0 || x.size(d) > 0, name, ": expected a non-empty dim ", d, ", got shape ",
           shape_str(x.shape()));
  if (x.dim() == 0) {
    // A scalar is its own maximum, at index 0.
    return {reshape(x, {}), zeros({}, {.dtype = DType::int64, .device = x.device()})};
  }
  const Shape in_shape = x.shape();
  const Shape kept = reduced_shape(in_shape, {d}, true);
  Tensor values = empty(kept, {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty(kept, {.dtype = DType::int64, .device = x.device()});
  if (values.numel() > 0) backend(x.device()).max_dim(x, d, values, indices);
  if (!keepdim) {
    const Shape dropped = reduced_shape(in_shape, {d}, false);
    values = raw_view(values, dropped);
    indices = raw_view(indices, dropped);
  }
  // d max / dx = g at the position the index names along dim, 0 elsewhere: the positions are
  // found by comparing an arange along dim with the indices (both broadcast to x's shape).
  Tensor saved_indices = autograd::needs_grad({x}) ? indices : Tensor();
  values = record("max", values, {x}, [in_shape, kept, d, saved_indices](const Tensor& g) {
    Shape along(in_shape.size(), 1);
    along[d] = in_shape[d];
    Tensor positions =
        reshape(arange(in_shape[d], {.dtype = DType::int64, .device = g.device()}), along);
    Tensor hit = eq(positions, reshape(saved_indices, kept));
    Tensor gx = where(hit, reshape(g, kept), zeros({}, {.dtype = g.dtype(), .device = g.device()}));
    return std::vector<Tensor>{gx};
  });
  return {values, indices};
}
}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& x, std::int64_t dim, bool keepdim) {
  return max_along(x, dim, keepdim, "max");
}

Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  // Detached: the indices need no graph.
  return max_along(x.defined() ? x.detach() : x, dim, keepdim, "argmax").second;
}

}  // namespace tinyformer
