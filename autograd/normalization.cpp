// Fused softmax, log-softmax and layer norm with hand-written backward kernels. The backend
// works on contiguous [R, C] rows: the normalised axis is moved last (with a copy only when it
// is not last already) and the rest is flattened into R.
#include "autograd/normalization.h"

#include "autograd/autocast.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

namespace {

// The permutation that moves dim `d` of an n-dim tensor last, and its inverse.
Shape move_last(std::int64_t n, std::int64_t d) {
  Shape p;
  for (std::int64_t i = 0; i < n; ++i) {
    if (i != d) p.push_back(i);
  }
  p.push_back(d);
  return p;
}
Shape inverse_of(const Shape& p) {
  Shape inv(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<std::int64_t>(i);
  return inv;
}

// t with its dims reordered by p, as a view (no graph).
Tensor permuted(const Tensor& t, const Shape& p) {
  Shape sizes, strides;
  for (std::int64_t i : p) {
    sizes.push_back(t.size(i));
    strides.push_back(t.stride(i));
  }
  return raw::as_strided(t, sizes, strides, t.offset());
}

// t with dim `d` moved last, as a contiguous [R, C] tensor (a copy only when it must be).
Tensor rows_of(const Tensor& t, std::int64_t d) {
  Tensor moved = d == t.dim() - 1 ? t : permuted(t, move_last(t.dim(), d));
  Tensor c = raw::contiguous(moved);
  const std::int64_t cols = t.size(d);
  const std::int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  return raw::as_strided(c, {rows, cols}, {cols, 1}, c.offset());
}

// The inverse of rows_of: [R, C] back to `shape` with the last dim returned to `d` (a view).
Tensor unrows(const Tensor& rows, const Shape& shape, std::int64_t d) {
  const auto n = static_cast<std::int64_t>(shape.size());
  Shape moved_shape;
  for (std::int64_t p : move_last(n, d)) moved_shape.push_back(shape[p]);
  Tensor moved = raw::as_strided(rows, moved_shape, contiguous_strides(moved_shape), rows.offset());
  return d == n - 1 ? moved : permuted(moved, inverse_of(move_last(n, d)));
}

// y = softmax(x) (or log_softmax) along dim.
//   softmax:     dx = y * (g - sum(g * y))
//   log_softmax: dx = g - exp(y) * sum(g)
// both computed by the backend's softmax_backward from the saved output alone.
Tensor softmax_impl(const Tensor& x, std::int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  TF_CHECK(x.defined(), name, ": expected a defined tensor, got an undefined Tensor");
  TF_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype());
  const std::int64_t d = normalize_dim(dim, x.dim(), name);
  // A 0-dim tensor is one row of one element.
  const Tensor xs = x.dim() == 0 ? raw::as_strided(x, {1}, {1}, x.offset()) : x;
  const Tensor x2 = rows_of(xs, d);  // [R, C]
  Tensor y2 = empty(x2.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (y2.numel() > 0) backend(x.device()).softmax(x2, log, y2);
  const Shape shape = x.shape();
  Tensor y = x.dim() == 0 ? raw::as_strided(y2, {}, {}, 0) : unrows(y2, shape, d);
  Tensor saved_y = save(y2);
  return record(name, y, {x}, [saved_y, shape, d, log](const Tensor& g) {
    const Tensor gs = shape.empty() ? raw::as_strided(g, {1}, {1}, g.offset()) : g;
    Tensor g2 = rows_of(gs, d);
    Tensor gx2 = empty(g2.shape(), {.dtype = g.dtype(), .device = g.device()});
    if (gx2.numel() > 0) backend(g.device()).softmax_backward(saved_y, g2, log, gx2);
    return std::vector<Tensor>{shape.empty() ? raw::as_strided(gx2, {}, {}, 0)
                                             : unrows(gx2, shape, d)};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) {
  return softmax_impl(autocast_to_float(x), dim, false);  // float32 under autocast
}
Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  return softmax_impl(autocast_to_float(x), dim, true);  // float32 under autocast
}

namespace {

// The checks layer_norm and add_layer_norm (named `op`) make of x and the parameters.
void check_layer_norm_call(const char* op, const Tensor& x, const Shape& normalized_shape,
                           const Tensor& weight, const Tensor& bias, double eps) {
  TF_CHECK(x.defined(), op, ": expected a defined tensor, got an undefined Tensor");
  TF_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", x.dtype());
  const auto k = static_cast<std::int64_t>(normalized_shape.size());
  TF_CHECK(k > 0, op, ": expected a non-empty normalized_shape");
  const Shape trailing(x.shape().end() - std::min(k, x.dim()), x.shape().end());
  TF_CHECK(x.dim() >= k && trailing == normalized_shape, op, ": expected an input whose ",
           "trailing dims are ", shape_str(normalized_shape), ", got ", shape_str(x.shape()));
  TF_CHECK(eps >= 0, op, ": expected eps >= 0, got ", eps);
  for (const auto& [param, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!param->defined()) continue;
    TF_CHECK(param->shape() == normalized_shape, op, ": expected a ", what, " of shape ",
             shape_str(normalized_shape), ", got ", shape_str(param->shape()));
    TF_CHECK(param->dtype() == x.dtype(), op, ": the ", what, " is ", param->dtype(),
             ", the input ", x.dtype());
    TF_CHECK(param->device() == x.device(), op, ": the ", what, " is on ", param->device(),
             ", the input on ", x.device());
  }
}

// t as a contiguous [rows, cols] (a view when it is contiguous already); undefined stays so.
Tensor as_rows(const Tensor& t, std::int64_t rows, std::int64_t cols) {
  if (!t.defined()) return Tensor();
  const Tensor c = raw::contiguous(t);
  return raw::as_strided(c, {rows, cols}, {cols, 1}, c.offset());
}

// t as a contiguous [cols] (weight, bias and their gradients); undefined stays so.
Tensor as_vector(const Tensor& t, std::int64_t cols) {
  if (!t.defined()) return Tensor();
  const Tensor c = raw::contiguous(t);
  return raw::as_strided(c, {cols}, {1}, c.offset());
}

// The gradients of y = layer_norm(x2) (x2: the saved [R, C] input) from g: {grad_x, grad_weight,
// grad_bias}, each undefined when not wanted.
std::vector<Tensor> layer_norm_grads(const Tensor& g, const Tensor& x2, const Tensor& w,
                                     const Tensor& mean, const Tensor& rstd, const Shape& x_shape,
                                     const Shape& normalized_shape, bool need_w, bool need_b) {
  const std::int64_t rows = x2.size(0), cols = x2.size(1);
  const TensorOptions opts{.dtype = x2.dtype(), .device = x2.device()};
  const Tensor g2 = as_rows(g, rows, cols);
  Tensor gx = empty(x_shape, opts);
  Tensor gw = need_w ? empty(normalized_shape, opts) : Tensor();
  Tensor gb = need_b ? empty(normalized_shape, opts) : Tensor();
  if (gx.numel() > 0) {
    backend(g.device())
        .layer_norm_backward(g2, x2, w, mean, rstd, as_rows(gx, rows, cols), as_vector(gw, cols),
                             as_vector(gb, cols));
  } else {
    // No rows: the parameters collected nothing.
    if (gw.defined()) raw::fill(gw, 0.0);
    if (gb.defined()) raw::fill(gb, 0.0);
  }
  return {gx, gw, gb};
}

}  // namespace

// y = (x - mean) * rstd * weight + bias over the trailing normalized_shape, where
// rstd = 1 / sqrt(var + eps) (biased variance). mean and rstd per row are kept for backward.
Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const Tensor x = autocast_to_float(x_in);  // float32 under autocast (autograd/autocast.h)
  check_layer_norm_call("layer_norm", x, normalized_shape, weight, bias, eps);
  const std::int64_t cols = shape_numel(normalized_shape);
  const std::int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  // x2: [R, C]; w, b: [C] or undefined.
  const Tensor x2 = as_rows(x, rows, cols);
  const Tensor w1 = as_vector(weight, cols), b1 = as_vector(bias, cols);
  Tensor y = empty(x.shape(), opts);
  Tensor mean = empty({rows}, opts), rstd = empty({rows}, opts);
  if (y.numel() > 0) {
    backend(x.device()).layer_norm(x2, w1, b1, eps, as_rows(y, rows, cols), mean, rstd);
  }
  const Shape x_shape = x.shape();
  const bool need_w = weight.requires_grad(), need_b = bias.requires_grad();
  Tensor sx = save(x2), sw = save(w1);
  return record("layer_norm", y, {x, weight, bias}, [=](const Tensor& g) {
    return layer_norm_grads(g, sx, sw, mean, rstd, x_shape, normalized_shape, need_w, need_b);
  });
}

// h = x + residual, y = layer_norm(h) in one backend op (add_layer_norm): the sum h is saved in
// place of layer_norm's input, and its gradient is the gradient of x and of residual alike.
Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                      const Tensor& weight, const Tensor& bias, double eps) {
  check_layer_norm_call("add_layer_norm", x, normalized_shape, weight, bias, eps);
  TF_CHECK(residual.defined() && residual.shape() == x.shape() && residual.dtype() == x.dtype() &&
               residual.device() == x.device(),
           "add_layer_norm: expected a residual of the input's shape, dtype and device ",
           shape_str(x.shape()), " ", x.dtype(), " on ", x.device(), ", got ",
           residual.defined() ? shape_str(residual.shape()) : std::string("an undefined Tensor"));
  const std::int64_t cols = shape_numel(normalized_shape);
  const std::int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  const Tensor x2 = as_rows(x, rows, cols), r2 = as_rows(residual, rows, cols);
  const Tensor w1 = as_vector(weight, cols), b1 = as_vector(bias, cols);
  Tensor y = empty(x.shape(), opts), h = empty({rows, cols}, opts);
  Tensor mean = empty({rows}, opts), rstd = empty({rows}, opts);
  if (y.numel() > 0) {
    backend(x.device()).add_layer_norm(x2, r2, w1, b1, eps, as_rows(y, rows, cols), h, mean, rstd);
  }
  const Shape x_shape = x.shape();
  const bool need_w = weight.requires_grad(), need_b = bias.requires_grad();
  Tensor sh = save(h), sw = save(w1);
  return record("add_layer_norm", y, {x, residual, weight, bias}, [=](const Tensor& g) {
    std::vector<Tensor> grads =
        layer_norm_grads(g, sh, sw, mean, rstd, x_shape, normalized_shape, need_w, need_b);
    return std::vector<Tensor>{grads[0], grads[0], grads[1], grads[2]};
  });
}

}  // namespace tinyformer
