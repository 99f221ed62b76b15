// Fused attention: forward and backward side by side.
//
//   S = (q * scale) k^T          [..., n, m]    scale = 1 / sqrt(d)
//   S = -inf where masked
//   P = softmax(S)               saved for backward
//   O = dropout(P) v             [..., n, dv]
//
//   dv = dropout(P)^T dO
//   dP = dropout'(dO v^T)
//   dS = P * (dP - rowsum(dP * P))   (softmax backward; masked entries have P = 0, so dS = 0)
//   dq = scale * dS k,  dk = dS^T (q * scale)
#include "autograd/attention.h"

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

Tensor causal_mask(std::int64_t n, std::int64_t m, Device device) {
  TF_CHECK(n >= 0 && m >= 0, "causal_mask: expected non-negative sizes, got ", n, " x ", m);
  Tensor rows = arange(n, {.dtype = DType::int64, .device = device}).unsqueeze(1);
  Tensor cols = arange(m, {.dtype = DType::int64, .device = device}).unsqueeze(0);
  return ge(rows, cols);
}

namespace {
Tensor softmax_backward_rows(const Tensor& p, const Tensor& dp) {
  // p, dp: [..., m] contiguous; the backend works on [rows, m].
  const std::int64_t m = p.size(-1);
  Tensor ds = empty(p.shape(), {.dtype = p.dtype(), .device = p.device()});
  if (p.numel() > 0) {
    backend(p.device())
        .softmax_backward(p.view({-1, m}), contiguous(dp).view({-1, m}), false, ds.view({-1, m}));
  }
  return ds;
}
}  // namespace

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const AttentionOptions& options) {
  const char* op = "fused_attention";
  TF_CHECK(q.defined() && k.defined() && v.defined(), op, ": expected defined q, k and v");
  TF_CHECK(q.dim() >= 2 && q.dim() == k.dim() && q.dim() == v.dim(), op,
           ": expected q, k, v with the same number of dims (>= 2), got ", shape_str(q.shape()),
           ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  TF_CHECK(q.size(-1) == k.size(-1), op,
           ": q and k differ in their last dim: ", shape_str(q.shape()), " and ",
           shape_str(k.shape()));
  TF_CHECK(k.size(-2) == v.size(-2), op,
           ": k and v hold different numbers of keys: ", shape_str(k.shape()), " and ",
           shape_str(v.shape()));
  for (std::int64_t d = 0; d + 2 < q.dim(); ++d) {
    TF_CHECK(q.size(d) == k.size(d) && q.size(d) == v.size(d), op,
             ": q, k, v differ in leading dim ", d, ": ", shape_str(q.shape()), ", ",
             shape_str(k.shape()), ", ", shape_str(v.shape()));
  }
  TF_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && is_floating(q.dtype()), op,
           ": expected q, k, v of one floating dtype, got ", q.dtype(), ", ", k.dtype(), ", ",
           v.dtype());
  TF_CHECK(options.dropout >= 0 && options.dropout < 1, op, ": expected dropout in [0, 1), got ",
           options.dropout);
  const std::int64_t n = q.size(-2), m = k.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const bool use_dropout = options.training && options.dropout > 0;

  Tensor qs, p, pd, keep;
  Tensor out;
  {
    NoGradGuard no_grad;
    qs = mul(q, scalar_tensor(scale, {.dtype = q.dtype(), .device = q.device()}));
    Tensor s = matmul(qs, k.transpose(-2, -1));
    const Tensor minus_inf = scalar_tensor(-std::numeric_limits<double>::infinity(),
                                           {.dtype = q.dtype(), .device = q.device()});
    if (mask.defined()) {
      TF_CHECK(mask.dtype() == DType::boolean, op, ": expected a bool mask, got ", mask.dtype());
      broadcast_shapes(mask.shape(), s.shape(), op);
      s = where(mask, s, minus_inf);
    }
    if (options.causal) s = where(causal_mask(n, m, q.device()), s, minus_inf);
    p = softmax(s, -1);
    pd = p;
    if (use_dropout) {
      Generator& gen = options.generator ? *options.generator : default_generator();
      keep = empty(p.shape(), {.dtype = p.dtype(), .device = p.device()});
      const auto [seed, offset] = gen.reserve(static_cast<std::uint64_t>(keep.numel()));
      backend(p.device())
          .random(keep, RandomKind::bernoulli, seed, offset, 1.0 - options.dropout, 0.0);
      keep = mul(keep, scalar_tensor(1.0 / (1.0 - options.dropout),
                                     {.dtype = p.dtype(), .device = p.device()}));
      pd = mul(p, keep);
    }
    out = matmul(pd, v);
  }
  if (options.probs) *options.probs = p;

  Tensor sk = save(k), sv = save(v);
  return record(
      "fused_attention", out, {q, k, v}, [qs, sk, sv, p, pd, keep, scale](const Tensor& g) {
        Tensor dv = matmul(pd.transpose(-2, -1), g);
        Tensor dp = matmul(g, sv.transpose(-2, -1));
        if (keep.defined()) dp = mul(dp, keep);
        Tensor ds = softmax_backward_rows(p, dp);
        Tensor dq =
            mul(matmul(ds, sk), scalar_tensor(scale, {.dtype = g.dtype(), .device = g.device()}));
        Tensor dk = matmul(ds.transpose(-2, -1), qs);
        return std::vector<Tensor>{dq, dk, dv};
      });
}

}  // namespace tinyformer
