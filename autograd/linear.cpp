// The fused linear op and its hand-written backward.
//
//   z = x W^T + b,  y = act(z)       x: [M, K] (the leading dims of x folded into M),
//                                     W: [N, K], b: [N], z and y: [M, N]
// Backward, with g = dL/dy: [M, N]:
//   gz = g * act'(z)                 [M, N]
//   gx = gz W                        [M, K]  (reshaped to x's shape)
//   gW = gz^T x                      [N, K]  contiguous: one product over all M rows
//   gb = sum over rows of gz         [N]
// What is saved: x (for gW), W (for gx), and what act' reads. relu's derivative reads y
// (y > 0), so relu stays fused and y is saved. gelu's and gelu_tanh's read z, which the fused
// call never materialises: when a gradient is needed, the call stops at the bias (z, saved by
// the activation's own unary node) and the activation runs as the differentiable unary op; the
// bias pass is still saved. Without a gradient (NoGradGuard, inference) gelu is fused too.
// The backward's first step, gz and gb, is one pass over g (the backend's
// linear_backward_epilogue), which in mixed precision also rounds gz to bfloat16 once for both
// products; the products then run on the backend directly (backward runs outside the graph).
#include "autograd/linear.h"

#include <algorithm>
#include <optional>

#include "autograd/autocast.h"
#include "autograd/layout.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

namespace {

// x: [..., K] as the [M, K] rows the backend reads (unit column stride, row stride >= K): a view
// when the leading dims fold into one stride, else a packed copy.
Tensor as_rows(const Tensor& x, std::int64_t m, std::int64_t k) {
  const std::int64_t lead = x.dim() - 1;
  const std::optional<std::int64_t> rows = collapsed_stride(x, lead);
  const bool unit_columns = k <= 1 || x.stride(-1) == 1;
  if (rows && unit_columns && (m <= 1 || k == 0 || *rows >= k)) {
    const std::int64_t row_stride = m <= 1 || k == 0 ? std::max<std::int64_t>(k, 1) : *rows;
    return raw::as_strided(x, {m, k}, {row_stride, 1}, x.offset());
  }
  const Tensor packed = raw::contiguous(x);
  return raw::as_strided(packed, {m, k}, {std::max<std::int64_t>(k, 1), 1}, packed.offset());
}

// t itself when contiguous, else a contiguous copy.
Tensor dense(const Tensor& t) {
  return !t.defined() || t.is_contiguous() ? t : raw::contiguous(t);
}

// a @ b for matrices a: [M, K] and b: [K, N] of any strides, into a new contiguous [M, N] of
// `dtype` (the operands' dtype, or float32 for bfloat16 operands), outside the graph.
Tensor product(Backend& be, const Tensor& a, const Tensor& b, DType dtype) {
  const auto batch_of_one = [](const Tensor& t) {
    return raw::as_strided(t, {1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.offset());
  };
  Tensor out = empty({a.size(0), b.size(1)}, {.dtype = dtype, .device = a.device()});
  be.matmul(batch_of_one(a), batch_of_one(b), batch_of_one(out));
  return out;
}

void check_inputs(const Tensor& x, const Tensor& weight, const Tensor& bias, Epilogue epilogue) {
  TF_CHECK(x.defined() && weight.defined(),
           "linear: expected defined x and weight, got an undefined Tensor");
  TF_CHECK(weight.dim() == 2, "linear: expected weight of shape [N, K], got ",
           shape_str(weight.shape()));
  TF_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: expected x of shape [..., ",
           weight.size(1), "] for weight ", shape_str(weight.shape()), ", got ",
           shape_str(x.shape()));
  TF_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)),
           "linear: expected bias of shape [", weight.size(0), "] for weight ",
           shape_str(weight.shape()), ", got ", shape_str(bias.shape()));
  TF_CHECK(x.dtype() == weight.dtype(), "linear: expected x and weight of one dtype, got x ",
           x.dtype(), " and weight ", weight.dtype());
  TF_CHECK(!bias.defined() || bias.dtype() == x.dtype(), "linear: expected bias of dtype ",
           x.dtype(), " (x's and weight's), got ", bias.dtype());
  TF_CHECK(is_floating(x.dtype()), "linear: expected floating tensors, got ", x.dtype());
  TF_CHECK(x.device() == weight.device(), "linear: expected x and weight on one device, got x on ",
           x.device(), " and weight on ", weight.device());
  TF_CHECK(!bias.defined() || bias.device() == x.device(), "linear: expected bias on ", x.device(),
           " (x's and weight's), got ", bias.device());
  TF_CHECK(is_epilogue(epilogue), "linear: unknown epilogue ", static_cast<int>(epilogue));
}

// act(x W^T + b) for an epilogue whose derivative needs no pre-activation (none, relu), or
// any epilogue when no gradient is recorded.
// The result has the bias's dtype: x's, or float32 for bfloat16 x and weight under autocast.
Tensor fused(const Tensor& x, const Tensor& weight, const Tensor& bias, Epilogue epilogue,
             DType result_dtype) {
  const std::int64_t k = weight.size(1), n = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor out = empty(out_shape, {.dtype = result_dtype, .device = x.device()});
  std::int64_t m = 1;  // the rows: x's leading dims folded
  for (std::int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  const Tensor x2 = as_rows(x, m, k), w = dense(weight), b = dense(bias);
  backend(x.device()).linear(x2, w, b, epilogue, raw::as_strided(out, {m, n}, {n, 1}, 0));

  if (!autograd::needs_grad({x, weight, bias})) return out;
  const Tensor saved_x = weight.requires_grad() ? save(x2) : Tensor();
  const Tensor saved_w = x.requires_grad() ? save(w) : Tensor();
  const Tensor saved_y = epilogue == Epilogue::relu ? save(out) : Tensor();
  const bool b_grad = bias.defined() && bias.requires_grad();
  const Shape x_shape = x.shape();
  // Mixed precision: bfloat16 operands, float32 result, bias and gradients.
  const bool mixed = x2.dtype() == DType::bfloat16 && result_dtype == DType::float32;
  return record("linear", out, {x, weight, bias}, [=](const Tensor& g) {
    Backend& be = backend(g.device());
    Tensor gz = dense(reshape(g, {m, n}));  // [M, N]
    Tensor gb;
    // The products read g itself unless the activation masks it or it must be rounded.
    const bool new_gz =
        (epilogue == Epilogue::relu || mixed) && (saved_w.defined() || saved_x.defined());
    if (new_gz || b_grad) {
      const Tensor masked =
          new_gz
              ? empty({m, n}, {.dtype = mixed ? DType::bfloat16 : g.dtype(), .device = g.device()})
              : Tensor();
      if (b_grad) gb = empty({n}, {.dtype = g.dtype(), .device = g.device()});
      be.linear_backward_epilogue(
          gz, epilogue == Epilogue::relu ? dense(reshape(saved_y, {m, n})) : Tensor(), epilogue,
          masked, gb);
      if (new_gz) gz = masked;
    }
    Tensor gx, gw;
    if (saved_w.defined()) gx = reshape(product(be, gz, saved_w, g.dtype()), x_shape);  // [..., K]
    if (saved_x.defined()) gw = product(be, transpose(gz, 0, 1), saved_x, g.dtype());   // [N, K]
    return std::vector<Tensor>{gx, gw, gb};
  });
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Epilogue epilogue) {
  check_inputs(x, weight, bias, epilogue);
  Tensor x_in = x, w_in = weight;
  DType result_dtype = x.dtype();
  // Mixed precision (autograd/autocast.h): bfloat16 x and W (the cached copy of a parameter),
  // the float32 bias, a float32 result. The node's backward replays under autocast, so its
  // products round the incoming gradient to bfloat16 and return float32 gradients.
  if (!bias.defined() || bias.dtype() == DType::float32) {
    if (const auto low = autocast_operands({x, weight})) {
      x_in = (*low)[0];
      w_in = (*low)[1];
      result_dtype = DType::float32;
    }
  }
  const bool reads_z = epilogue == Epilogue::gelu || epilogue == Epilogue::gelu_tanh;
  if (reads_z && autograd::needs_grad({x, weight, bias})) {
    return unary(epilogue_op(epilogue), fused(x_in, w_in, bias, Epilogue::none, result_dtype));
  }
  return fused(x_in, w_in, bias, epilogue, result_dtype);
}

}  // namespace tinyformer
