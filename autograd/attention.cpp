// Fused attention: forward and backward side by side, on two kernels.
//
// Memory-efficient (the default; ops flash_attention and flash_attention_backward): the backend
// computes O and one log-sum-exp per query row, lse, over blocks of keys, and the backward
// recomputes P = exp(S - lse) block by block from the saved query, key, value, O and lse. Nothing
// of size [..., n, m] is kept or allocated. Dropout reserves one counter per score, as the
// materialized path's mask would, and the kernels draw each element's keep from its coordinates.
//
// Materialized:
//   S = (query * scale) key^T    [..., n, m]    scale = 1 / sqrt(d); query (key * scale)^T
//                                where m < n (Linformer's k rows against n queries)
//   S = -inf where excluded      (excluded_mask, and j > i when causal)
//   P = softmax(S)               saved for backward
//   O = dropout(P) value         [..., n, dv]
//
//   d_value = dropout(P)^T dO
//   dP      = dropout'(dO value^T)
//   dS      = P * (dP - rowsum(dP * P))   (softmax backward; excluded entries have P = 0, so
//             dS = 0)
//   d_query = dS (key * scale),  d_key = dS^T (query * scale), or (dS^T query) * scale where
//             m < n   (the scaled operands recomputed)
//
// The scale multiplies whichever operand (or result) has fewer rows: a pass over [m, d] instead
// of [n, d] when the keys are fewer than the queries. With a power-of-two scale (d = 4^j) the
// two orders give the same numbers.
//
// Under a bfloat16 autocast (mixed precision) without dropout, softmax rounds P to bfloat16 in
// its own pass and no float32 P is kept: O = P V and d_value = P^T dO read that copy (the
// products' bfloat16 operand, which they would otherwise round from a float32 P twice), and
// softmax's backward reads it and writes dS in bfloat16 for the two products that read dS.
//
// O and each gradient are laid out like the query (key, value) they go with (matmul_like): heads
// that are [B, H, n, d] views of a [B, n, H, d] buffer get O and their gradients in that layout,
// so merging the heads and the gradient's way back through the split are views, not copies.
#include "autograd/attention.h"

#include <cmath>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/embedding.h"
#include "autograd/grad_mode.h"
#include "autograd/layout.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

Tensor future_mask(std::int64_t n, std::int64_t m, Device device) {
  TF_CHECK(n >= 0 && m >= 0, "future_mask: expected non-negative sizes, got ", n, " x ", m);
  Tensor rows = arange(n, {.dtype = DType::int64, .device = device}).unsqueeze(1);
  Tensor cols = arange(m, {.dtype = DType::int64, .device = device}).unsqueeze(0);
  return lt(rows, cols);
}

void check_attention_inputs(const char* op, const Tensor& query, const Tensor& key,
                            const Tensor& value, const Tensor& excluded_mask) {
  TF_CHECK(query.defined() && key.defined() && value.defined(), op,
           ": expected defined query, key and value");
  TF_CHECK(query.dim() >= 2 && query.dim() == key.dim() && query.dim() == value.dim(), op,
           ": expected query, key, value with the same number of dims (>= 2), got ",
           shape_str(query.shape()), ", ", shape_str(key.shape()), ", ", shape_str(value.shape()));
  TF_CHECK(query.size(-1) == key.size(-1), op,
           ": query and key differ in their last dim: ", shape_str(query.shape()), " and ",
           shape_str(key.shape()));
  TF_CHECK(key.size(-2) == value.size(-2), op,
           ": key and value hold different numbers of positions: ", shape_str(key.shape()), " and ",
           shape_str(value.shape()));
  for (std::int64_t d = 0; d + 2 < query.dim(); ++d) {
    TF_CHECK(query.size(d) == key.size(d) && query.size(d) == value.size(d), op,
             ": query, key, value differ in leading dim ", d, ": ", shape_str(query.shape()), ", ",
             shape_str(key.shape()), ", ", shape_str(value.shape()));
  }
  TF_CHECK(
      query.dtype() == key.dtype() && query.dtype() == value.dtype() && is_floating(query.dtype()),
      op, ": expected query, key, value of one floating dtype, got ", query.dtype(), ", ",
      key.dtype(), ", ", value.dtype());
  if (!excluded_mask.defined()) return;
  // The scores the mask applies to: [..., n, m]. The mask must broadcast to exactly this shape
  // (a mask with more dims, or a size that would grow the scores, is an error).
  Shape scores = query.shape();
  scores.back() = key.size(-2);
  bool fits = excluded_mask.dim() <= static_cast<std::int64_t>(scores.size());
  for (std::int64_t i = 1; fits && i <= excluded_mask.dim(); ++i) {
    const std::int64_t have = excluded_mask.size(-i);
    const std::int64_t want = scores[scores.size() - static_cast<std::size_t>(i)];
    fits = have == 1 || have == want;
  }
  TF_CHECK(excluded_mask.dtype() == DType::boolean && fits, op,
           ": expected excluded_mask of dtype bool broadcastable to the scores ", shape_str(scores),
           " (true = key excluded), got ", excluded_mask.dtype(), " ",
           shape_str(excluded_mask.shape()));
}

const char* attention_kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::memory_efficient ? "memory_efficient" : "materialized";
}

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "memory_efficient") return AttentionKernel::memory_efficient;
  if (name == "materialized") return AttentionKernel::materialized;
  fail("attention kernel: expected memory_efficient or materialized, got '", name, "'");
}

namespace {
// t * scale, laid out like t when t is a permuted view of a dense buffer (attention's heads):
// the product runs over the buffer in memory order as one stream, where a contiguous result
// would walk t in rows of d elements. Views and mul only, so it stays differentiable.
Tensor scaled_like(const Tensor& t, double scale) {
  const Tensor s = scalar_tensor(scale, {.dtype = t.dtype(), .device = t.device()});
  const std::optional<std::vector<std::int64_t>> order = memory_order(t);
  if (!order) return mul(t, s);
  Shape forward(order->begin(), order->end()), inverse(order->size());
  for (std::size_t i = 0; i < order->size(); ++i) {
    inverse[static_cast<std::size_t>((*order)[i])] = static_cast<std::int64_t>(i);
  }
  return mul(t.permute(forward), s).permute(inverse);
}

// dS from P and dP (p, dp: [..., m], p contiguous; the backend works on [rows, m]), in dS's
// dtype `ds_dtype`: P's, or bfloat16 for a bfloat16 P with a float32 dP.
Tensor softmax_backward_rows(const Tensor& p, const Tensor& dp, DType ds_dtype) {
  const std::int64_t m = p.size(-1);
  Tensor ds = empty(p.shape(), {.dtype = ds_dtype, .device = p.device()});
  if (p.numel() > 0) {
    backend(p.device())
        .softmax_backward(p.view({-1, m}), contiguous(dp).view({-1, m}), false, ds.view({-1, m}));
  }
  return ds;
}
// t as the attention ops read a matrix operand: t itself when its rows have a unit stride and
// do not overlap (attention's heads, views of wider rows, are fine), else a contiguous copy.
Tensor gemm_rows(const Tensor& t) {
  const bool unit = t.size(-1) <= 1 || t.stride(-1) == 1;
  const bool rows_apart = t.size(-2) <= 1 || t.stride(-2) >= t.size(-1);
  return unit && rows_apart ? t : contiguous(t);
}

// An uninitialised [..., rows, cols] tensor laid out like `like` ([..., *, *] of the same rank)
// when like is a dense permuted view with its last dim innermost, else contiguous.
Tensor empty_like_rows(const Tensor& like, std::int64_t rows, std::int64_t cols) {
  Shape shape = like.shape();
  shape[shape.size() - 2] = rows;
  shape.back() = cols;
  const TensorOptions options{.dtype = like.dtype(), .device = like.device()};
  const auto order = dense_order(like);
  return order ? empty_in_order(shape, *order, options) : empty(shape, options);
}

// The gradients of query, key and value, uninitialised, each laid out like its tensor.
std::vector<Tensor> empty_gradients(const Tensor& query, const Tensor& key, const Tensor& value) {
  return {empty_like_rows(query, query.size(-2), query.size(-1)),
          empty_like_rows(key, key.size(-2), key.size(-1)),
          empty_like_rows(value, value.size(-2), value.size(-1))};
}

// The attention and attention_backward ops (core/ops.def) as one graph node: no dropout, no
// mixed precision. The out and the gradients are laid out like the query, key and value.
Tensor attention_op(const Tensor& query, const Tensor& key, const Tensor& value,
                    const Tensor& excluded_mask, bool causal, double scale, Tensor* probs_out) {
  const Tensor q = gemm_rows(query), k = gemm_rows(key), v = gemm_rows(value);
  Shape scores = q.shape();
  scores.back() = k.size(-2);
  const Tensor probs = empty(scores, {.dtype = q.dtype(), .device = q.device()});
  const Tensor out = empty_like_rows(q, q.size(-2), v.size(-1));
  const Tensor mask =
      excluded_mask.defined() ? raw::expand(excluded_mask, scores, "fused_attention") : Tensor{};
  backend(q.device()).attention(q, k, v, mask, causal, scale, probs, out);
  if (probs_out) *probs_out = probs;
  Tensor saved_query = save(q), saved_key = save(k), saved_value = save(v);
  return record("fused_attention", out, {query, key, value},
                [saved_query, saved_key, saved_value, probs, causal, scale](const Tensor& g) {
                  const Tensor grad = gemm_rows(g);
                  std::vector<Tensor> d = empty_gradients(saved_query, saved_key, saved_value);
                  backend(grad.device())
                      .attention_backward(grad, saved_query, saved_key, saved_value, probs, causal,
                                          scale, d[0], d[1], d[2]);
                  return d;
                });
}
// The flash_attention and flash_attention_backward ops (core/ops.def) as one graph node.
Tensor flash_attention_op(const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& excluded_mask, bool causal, double scale,
                          const AttentionDropout& dropout) {
  const Tensor q = gemm_rows(query), k = gemm_rows(key), v = gemm_rows(value);
  Shape scores = q.shape();
  scores.back() = k.size(-2);
  Shape rows(q.shape().begin(), q.shape().end() - 1);
  const Tensor out = empty_like_rows(q, q.size(-2), v.size(-1));
  const Tensor lse = empty(rows, {.dtype = q.dtype(), .device = q.device()});
  const Tensor mask =
      excluded_mask.defined() ? raw::expand(excluded_mask, scores, "fused_attention") : Tensor{};
  backend(q.device()).flash_attention(q, k, v, mask, causal, scale, dropout, out, lse);
  Tensor saved_query = save(q), saved_key = save(k), saved_value = save(v), saved_out = save(out);
  return record("fused_attention", out, {query, key, value},
                [saved_query, saved_key, saved_value, saved_out, lse, mask, causal, scale,
                 dropout](const Tensor& g) {
                  const Tensor grad = gemm_rows(g);
                  std::vector<Tensor> d = empty_gradients(saved_query, saved_key, saved_value);
                  backend(grad.device())
                      .flash_attention_backward(grad, saved_query, saved_key, saved_value,
                                                saved_out, lse, mask, causal, scale, dropout, d[0],
                                                d[1], d[2]);
                  return d;
                });
}
}  // namespace

Tensor fused_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                       const Tensor& excluded_mask, const AttentionOptions& options) {
  const char* op = "fused_attention";
  check_attention_inputs(op, query, key, value, excluded_mask);
  TF_CHECK(options.dropout >= 0 && options.dropout <= 1, op, ": expected dropout in [0, 1], got ",
           options.dropout);
  const std::int64_t n = query.size(-2), m = key.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const bool use_dropout = options.training && options.dropout > 0;
  if (options.kernel == AttentionKernel::memory_efficient && options.probs == nullptr &&
      backend(query.device()).supports(Op::flash_attention, query.dtype())) {
    AttentionDropout dropout;
    if (use_dropout) {
      Generator& gen = options.generator ? *options.generator : default_generator();
      Shape scores = query.shape();
      scores.back() = m;
      const auto [seed, offset] = gen.reserve(static_cast<std::uint64_t>(shape_numel(scores)));
      dropout = attention_dropout(options.dropout, seed, offset);
    }
    return flash_attention_op(query, key, value, excluded_mask, options.causal, scale, dropout);
  }
  const bool bfloat16_p =
      autocast_dtype() == DType::bfloat16 && query.dtype() == DType::float32 && !use_dropout;
  // The fused ops' float32 products are exact: under a faster matmul precision (tf32, bf16) the
  // composition's products follow it instead.
  const bool exact =
      query.dtype() != DType::float32 || matmul_precision() == MatmulPrecision::exact;
  if (!use_dropout && !bfloat16_p && exact &&
      backend(query.device()).supports(Op::attention, query.dtype())) {
    return attention_op(query, key, value, excluded_mask, options.causal, scale, options.probs);
  }

  Tensor p, pd, keep;
  Tensor out;
  {
    NoGradGuard no_grad;
    const bool scale_keys = m < n;
    const Tensor q = scale_keys ? query : scaled_like(query, scale);
    const Tensor k = scale_keys ? scaled_like(key, scale) : key;
    Tensor s = matmul(q, k.transpose(-2, -1));  // [..., n, m]
    const double minus_inf = -std::numeric_limits<double>::infinity();
    if (excluded_mask.defined()) s = masked_fill(s, excluded_mask, minus_inf);
    if (options.causal) s = masked_fill(s, future_mask(n, m, query.device()), minus_inf);
    if (bfloat16_p) {
      p = empty(s.shape(), {.dtype = DType::bfloat16, .device = s.device()});
      if (p.numel() > 0) {
        backend(s.device()).softmax(contiguous(s).view({-1, m}), false, p.view({-1, m}));
      }
    } else {
      p = softmax(s, -1);
    }
    pd = p;
    if (use_dropout) {
      Generator& gen = options.generator ? *options.generator : default_generator();
      keep = empty(p.shape(), {.dtype = p.dtype(), .device = p.device()});
      const auto [seed, offset] = gen.reserve(static_cast<std::uint64_t>(keep.numel()));
      backend(p.device())
          .random(keep, RandomKind::scaled_bernoulli, seed, offset, 1.0 - options.dropout,
                  dropout_scale(options.dropout));
      pd = mul(p, keep);
    }
    out = matmul_like(pd, value, query);  // [..., n, dv], laid out like the query
  }
  if (options.probs) *options.probs = bfloat16_p ? to(p, DType::float32) : p;

  // The query itself is saved rather than query * scale: it is a view of a buffer that lives on
  // anyway, and its layout is the one d_query takes.
  Tensor saved_query = save(query), saved_key = save(key), saved_value = save(value);
  return record(
      "fused_attention", out, {query, key, value},
      [saved_query, saved_key, saved_value, p, pd, keep, scale, n, m](const Tensor& g) {
        Tensor d_value = matmul_like(pd.transpose(-2, -1), g, saved_value);
        Tensor dp = matmul(g, saved_value.transpose(-2, -1));
        if (keep.defined()) dp = mul(dp, keep);
        Tensor ds = softmax_backward_rows(p, dp, p.dtype());
        // The scale goes on the operands, so that the products land in the query's and key's
        // layouts directly; d_key where m < n scales its [m, d] result instead of the [n, d]
        // query (scaled_like keeps the layout).
        Tensor d_query = matmul_like(ds, scaled_like(saved_key, scale), saved_query);
        Tensor d_key =
            m < n ? scaled_like(matmul_like(ds.transpose(-2, -1), saved_query, saved_key), scale)
                  : matmul_like(ds.transpose(-2, -1), scaled_like(saved_query, scale), saved_key);
        return std::vector<Tensor>{d_query, d_key, d_value};
      });
}

}  // namespace tinyformer
