// 1-D convolution and pooling over [B, C, L] (an unbatched [C, L] gets B = 1 as a view), each
// with its backward kernel. Lout = (L + 2 * padding - K) / stride + 1 (floor).
#include "autograd/conv_pool.h"

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/checked.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

namespace {

void check_sequence(const Tensor& x, const char* op) {
  TF_CHECK(x.defined(), op, ": expected a defined input, got an undefined Tensor");
  TF_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", x.dtype());
  TF_CHECK(x.dim() == 2 || x.dim() == 3, op,
           ": expected an input of shape [B, C, L] or [C, L], got ", shape_str(x.shape()));
}

// Runs `batched` on x as [B, C, L] and returns the result in x's batching.
template <typename F>
Tensor with_batch(const Tensor& x, F batched) {
  if (x.dim() == 3) return batched(x);
  return squeeze(batched(unsqueeze(x, 0)), 0);
}

// out: [B, C, Lout]; kind average or max over windows of `kernel` every `stride` steps.
Tensor pool(PoolKind kind, const Tensor& x, std::int64_t kernel, std::int64_t stride,
            const char* op) {
  check_sequence(x, op);
  TF_CHECK(kernel > 0, op, ": expected a positive kernel size, got ", kernel);
  TF_CHECK(stride >= 0, op, ": expected a positive stride (or 0 for stride = kernel), got ",
           stride);
  const std::int64_t s = stride == 0 ? kernel : stride;
  TF_CHECK(kernel <= x.size(-1), op, ": the kernel (", kernel, ") is longer than the input (",
           shape_str(x.shape()), ")");
  return with_batch(x, [&](const Tensor& x3) {
    const Tensor xc = raw::contiguous(x3);
    const std::int64_t lout = (x3.size(2) - kernel) / s + 1;
    Tensor out = empty({x3.size(0), x3.size(1), lout}, {.dtype = x.dtype(), .device = x.device()});
    if (out.numel() > 0) backend(x.device()).pool1d(kind, xc, kernel, s, out);
    // avg: each input gets g / kernel from every window it lies in; max: the window's maximum
    // takes the whole g. The kernel needs x for the max positions and for the shape.
    Tensor sx = save(xc);
    return record(
        kind == PoolKind::max ? "max_pool1d" : "avg_pool1d", out, {x3},
        [kind, sx, kernel, s](const Tensor& g) {
          Tensor gx = empty(sx.shape(), {.dtype = g.dtype(), .device = g.device()});
          if (g.numel() > 0) {
            backend(g.device()).pool1d_backward(kind, raw::contiguous(g), sx, kernel, s, gx);
          } else {
            raw::fill(gx, 0.0);
          }
          return std::vector<Tensor>{gx};
        });
  });
}

}  // namespace

// out[b, o, t] = bias[o] + sum_{c, k} weight[o, c, k] * xpad[b, c, t * stride + k]
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::int64_t stride,
              std::int64_t padding) {
  check_sequence(x, "conv1d");
  TF_CHECK(weight.defined() && weight.dim() == 3,
           "conv1d: expected a weight of shape [Cout, Cin, K], got ",
           weight.defined() ? shape_str(weight.shape()) : std::string("an undefined Tensor"));
  for (const auto& [t, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    TF_CHECK(t->dtype() == x.dtype(), "conv1d: the ", what, " is ", t->dtype(), ", the input ",
             x.dtype());
    TF_CHECK(t->device() == x.device(), "conv1d: the ", what, " is on ", t->device(),
             ", the input on ", x.device());
  }
  const std::int64_t cout = weight.size(0), cin = weight.size(1), k = weight.size(2);
  TF_CHECK(x.size(-2) == cin, "conv1d: the input has ", x.size(-2), " channels (shape ",
           shape_str(x.shape()), "), the weight expects ", cin, " (shape ",
           shape_str(weight.shape()), ")");
  TF_CHECK(!bias.defined() || bias.shape() == Shape{cout}, "conv1d: expected a bias of shape [",
           cout, "], got ", bias.defined() ? shape_str(bias.shape()) : std::string());
  TF_CHECK(k > 0 && cout > 0 && cin > 0, "conv1d: expected a non-empty weight, got shape ",
           shape_str(weight.shape()));
  TF_CHECK(stride > 0, "conv1d: expected a positive stride, got ", stride);
  TF_CHECK(padding >= 0, "conv1d: expected padding >= 0, got ", padding);
  const std::int64_t padded =
      checked_add(x.size(-1), checked_mul(2, padding, "conv1d", x.shape()), "conv1d", x.shape());
  TF_CHECK(padded >= k, "conv1d: the kernel (", k, ") is longer than the padded input (",
           x.size(-1), " + 2 * ", padding, ")");
  return with_batch(x, [&](const Tensor& x3) {
    const Tensor xc = raw::contiguous(x3), wc = raw::contiguous(weight);
    const Tensor bc = bias.defined() ? raw::contiguous(bias) : Tensor();
    const std::int64_t lout = (padded - k) / stride + 1;
    Tensor out = empty({x3.size(0), cout, lout}, {.dtype = x.dtype(), .device = x.device()});
    if (out.numel() > 0) backend(x.device()).conv1d(xc, wc, bc, stride, padding, out);
    // The backward kernel needs both x (for grad_weight) and weight (for grad_x).
    const bool need_x = x3.requires_grad(), need_w = weight.requires_grad(),
               need_b = bias.requires_grad();
    Tensor sx = save(xc), sw = save(wc);
    return record("conv1d", out, {x3, weight, bias}, [=](const Tensor& g) {
      auto grad_for = [&g](bool needed, const Tensor& like) {
        return needed ? zeros(like.shape(), {.dtype = g.dtype(), .device = g.device()}) : Tensor();
      };
      Tensor gx = grad_for(need_x, sx), gw = grad_for(need_w, sw);
      Tensor gb = need_b ? zeros({cout}, {.dtype = g.dtype(), .device = g.device()}) : Tensor();
      if (g.numel() > 0) {
        backend(g.device())
            .conv1d_backward(raw::contiguous(g), sx, sw, stride, padding, gx, gw, gb);
      }
      return std::vector<Tensor>{gx, gw, gb};
    });
  });
}

Tensor avg_pool1d(const Tensor& x, std::int64_t kernel, std::int64_t stride) {
  return pool(PoolKind::average, x, kernel, stride, "avg_pool1d");
}

Tensor max_pool1d(const Tensor& x, std::int64_t kernel, std::int64_t stride) {
  return pool(PoolKind::max, x, kernel, stride, "max_pool1d");
}

}  // namespace tinyformer
