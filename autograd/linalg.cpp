// matmul with PyTorch's semantics, lowered onto the backend's one batched product
// [B, M, K] x [B, K, N]. Broadcast and transposed operands reach the backend as strided views, and
// the product is written into a strided out where asked (matmul_like). Batch dims that cannot be
// walked with a single stride (attention's [B, H, n, d] view of a [B, n, H, d] buffer) reach the
// backend as two batch dims, each with its own stride (more are looped over, one backend call per
// entry of the outermost); an operand is copied only when no GEMM can read its matrices.
#include "autograd/linalg.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/layout.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

namespace {

// True when the last two dims form a row- or column-major matrix that BLAS can read directly.
bool blas_layout(const Tensor& t) {
  const std::int64_t rows = t.size(-2), cols = t.size(-1);
  const std::int64_t rs = t.stride(-2), cs = t.stride(-1);
  return (cs == 1 && rs >= std::max<std::int64_t>(cols, 1)) ||
         (rs == 1 && cs >= std::max<std::int64_t>(rows, 1));
}

// True when the last two dims are a column-major matrix of at least 2 x 2 (a transposed view).
bool column_major(const Tensor& t) {
  return t.size(-2) > 1 && t.size(-1) > 1 && t.stride(-2) == 1 && t.stride(-1) >= t.size(-2);
}

// A contiguous copy with canonical strides (a contiguous tensor may carry odd strides on
// size-1 dims, which BLAS would reject as leading dimensions).
Tensor packed(const Tensor& t) {
  Tensor c = raw::contiguous(t);
  return raw::as_strided(c, c.shape(), contiguous_strides(c.shape()), c.offset());
}

// t: [batch..., R, C] -> [B, R, C] as a view, packing t first only when it must.
Tensor as_batched(Tensor t) {
  const std::int64_t nb = t.dim() - 2;
  if (!blas_layout(t)) t = packed(t);
  auto bs = collapsed_stride(t, nb);
  if (!bs) {
    t = packed(t);
    bs = collapsed_stride(t, nb);
  }
  std::int64_t batch = 1;
  for (std::int64_t d = 0; d < nb; ++d) batch *= t.size(d);
  return raw::as_strided(t, {batch, t.size(-2), t.size(-1)}, {*bs, t.stride(-2), t.stride(-1)},
                         t.offset());
}

// True when as_batched would copy t only because its batch dims do not collapse to one stride
// (its matrices alone are GEMM-readable): then looping over the outermost batch dim avoids it.
bool batch_dims_split(const Tensor& t, std::int64_t nb) {
  return blas_layout(t) && !collapsed_stride(t, nb);
}

// Entry i of t along its first dim, as a view with one dim fewer.
Tensor entry(const Tensor& t, std::int64_t i) {
  return raw::as_strided(t, Shape(t.shape().begin() + 1, t.shape().end()),
                         Shape(t.strides().begin() + 1, t.strides().end()),
                         t.offset() + i * t.stride(0));
}

// t: [batch..., R, C] as [outer, R, inner*C], where `outer` counts t's first `nb_outer` batch
// dims and `inner` the rest: when the inner batch dims and the columns lie one after the other in
// memory, the columns innermost, the rows do not overlap them (an [H, n, d] view of an [n, H, d]
// buffer is the [n, H*d] buffer), and the outer dims walk with one stride (B sequences of such
// buffers); nullopt otherwise.
std::optional<Tensor> columns_folded(const Tensor& t, std::int64_t nb, std::int64_t nb_outer = 0) {
  std::vector<std::int64_t> sizes, strides;
  for (std::int64_t d = nb_outer; d <= nb; ++d) {
    const std::int64_t dim = d < nb ? d : t.dim() - 1;
    sizes.push_back(t.size(dim));
    strides.push_back(t.stride(dim));
  }
  const Tensor columns = raw::as_strided(t, sizes, strides, t.offset());
  if (collapsed_stride(columns, columns.dim()) != 1) return std::nullopt;
  const std::int64_t width = columns.numel();
  if (t.size(-2) > 1 && t.stride(-2) < width) return std::nullopt;
  const std::int64_t row_stride = std::max<std::int64_t>(t.stride(-2), width);
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < nb_outer; ++d) outer *= t.size(d);
  const auto outer_stride =
      nb_outer == 0 ? std::optional<std::int64_t>(0) : collapsed_stride(t, nb_outer);
  // The outer entries either repeat one (stride 0) or do not overlap.
  const std::int64_t extent = (t.size(-2) - 1) * row_stride + width;
  if (!outer_stride || (outer > 1 && *outer_stride != 0 && *outer_stride < extent)) {
    return std::nullopt;
  }
  return raw::as_strided(t, {outer, t.size(-2), width},
                         {outer > 1 ? *outer_stride : 0, row_stride, 1}, t.offset());
}

// Whether the entries of t's first dim lie apart in memory: its stride reaches past the last
// element of entry 0 (what a backend's batch loop over [B1, B2, M, N] outs relies on).
bool entries_disjoint(const Tensor& t) {
  std::int64_t extent = 1;  // elements from an entry's first to its last, inclusive
  for (std::int64_t d = 1; d < t.dim(); ++d) extent += (t.size(d) - 1) * t.stride(d);
  return t.size(0) <= 1 || t.stride(0) >= extent;
}

// t: [B1, B2, ...] as [B2, B1, ...], a view.
Tensor transpose_batch(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[0], shape[1]);
  std::swap(strides[0], strides[1]);
  return raw::as_strided(t, shape, strides, t.offset());
}

// out = a @ b with a: [batch..., M, K], b: [batch..., K, N] (the same batch dims) into out:
// [batch..., M, N] (row-major matrices, any batch strides); no graph.
void product_into(const Tensor& a, const Tensor& b, const Tensor& out) {
  const std::int64_t nb = a.dim() - 2;
  const std::int64_t k = a.size(-1), n = b.size(-1);
  if (out.numel() == 0) return;
  if (k == 0) {
    raw::fill(out, 0.0);  // a sum over nothing
    return;
  }
  // Rows no GEMM writes in place (the columns not adjacent, or rows overlapping): the product
  // goes to a contiguous buffer first.
  const std::int64_t m = out.size(-2);
  if ((n > 1 && out.stride(-1) != 1) || (m > 1 && out.stride(-2) < n)) {
    const Tensor dense = empty(out.shape(), out.options());
    product_into(a, b, dense);
    raw::copy(dense, out);
    return;
  }
  Backend& be = backend(a.device());
  // One matrix b shared by the whole batch (the Linear-layer case): the batch folds into M, so
  // the backend runs one GEMM [B*M, K] x [K, N] instead of B small ones.
  if (nb > 0 && collapsed_stride(b, nb) == 0) {
    const auto row_stride = collapsed_stride(a, nb + 1);
    const auto out_row_stride = collapsed_stride(out, nb + 1);
    if (row_stride && a.stride(-1) == 1 && *row_stride >= k && out_row_stride &&
        out.stride(-1) == 1 && *out_row_stride >= n) {
      const std::int64_t rows = out.numel() / n;
      Tensor a3 = raw::as_strided(a, {1, rows, k}, {0, *row_stride, 1}, a.offset());
      Tensor b3 = raw::as_strided(b, {1, k, n}, {0, b.stride(-2), b.stride(-1)}, b.offset());
      if (!blas_layout(b3)) b3 = packed(b3);
      be.matmul(a3, b3, raw::as_strided(out, {1, rows, n}, {0, *out_row_stride, 1}, out.offset()));
      return;
    }
  }
  // One matrix a shared by the whole batch on the left (Linformer's E against the heads): when
  // the inner batch dims of b and out fold into their columns (heads that are [H, n, d] views of
  // [n, H, d] buffers) and the outer ones walk with one stride (the sequences), one batch of
  // GEMMs [M, K] x [K, inner*N] instead of a batch of narrow ones.
  if (nb > 0 && collapsed_stride(a, nb) == 0) {
    for (std::int64_t outer = 0; outer < nb; ++outer) {
      const auto b_wide = columns_folded(b, nb, outer), out_wide = columns_folded(out, nb, outer);
      if (!b_wide || !out_wide) continue;
      Tensor a3 =
          raw::as_strided(a, {1, a.size(-2), k}, {0, a.stride(-2), a.stride(-1)}, a.offset());
      if (!blas_layout(a3)) a3 = packed(a3);
      be.matmul(a3, *b_wide, *out_wide);
      return;
    }
  }
  // Batch dims that no single stride walks (attention's heads inside the rows of a
  // [B, n, H, d] buffer): two of them go to the backend as they are, each with its own stride;
  // more, one product per entry of the outermost, each with one batch dim fewer.
  if (nb >= 2 &&
      (batch_dims_split(a, nb) || batch_dims_split(b, nb) || !collapsed_stride(out, nb))) {
    if (nb == 2) {
      // The backend walks the first batch dim with one stride over whole entries: the outer dim
      // goes first (heads reshaped inside a projection may put the inner one there).
      if (entries_disjoint(out)) {
        be.matmul(a, b, out);
        return;
      }
      if (entries_disjoint(transpose_batch(out))) {
        be.matmul(transpose_batch(a), transpose_batch(b), transpose_batch(out));
        return;
      }
    }
    for (std::int64_t i = 0; i < a.size(0); ++i) {
      product_into(entry(a, i), entry(b, i), entry(out, i));
    }
    return;
  }
  const Tensor a3 = as_batched(a), b3 = as_batched(b);
  be.matmul(
      a3, b3,
      raw::as_strided(out, {a3.size(0), out.size(-2), n},
                      {*collapsed_stride(out, nb), out.stride(-2), out.stride(-1)}, out.offset()));
}

using DimOrder = std::optional<std::vector<std::int64_t>>;

// A mixed product's incoming float32 gradient in the operands' dtype, differentiably, keeping
// its layout (one laid out like permuted heads stays so, and the products read it in place).
Tensor to_in_memory_order(const Tensor& x, DType dtype) {
  const DType from = x.dtype();
  return record("to_dtype", converted_in_memory_order(x, dtype), {x},
                [from](const Tensor& g) { return std::vector<Tensor>{raw::to_dtype(g, from)}; });
}

Tensor matmul_impl(const Tensor& a, const Tensor& b, const DimOrder& out_order,
                   std::optional<DType> result_dtype = std::nullopt);

// Whether t: [batch..., R, C] read as [R, batch... * C] (the rows to the front, the batch
// folded into the columns) is a view with unit column stride: the batch dims and the columns of
// t lie one after the other in memory, the columns innermost (columns_folded).
bool rows_first_in_place(const Tensor& t) {
  if (t.dim() == 2) return t.stride(-1) == 1 || t.size(-1) == 1;
  return columns_folded(t, t.dim() - 2).has_value();
}

// t: [B, batch..., R, C] -> [B, R, batch... * C]: for each entry of the first dim, the rows to
// the front and the other batch dims folded into the columns (a view where the layout allows).
Tensor rows_first_each(const Tensor& t) {
  Shape order{0, t.dim() - 2};
  for (std::int64_t d = 1; d < t.dim() - 2; ++d) order.push_back(d);
  order.push_back(t.dim() - 1);
  return reshape(permute(t, order), {t.size(0), t.size(-2), -1});
}

// The most rows of a shared matrix whose gradient runs in the taller orientation (below).
constexpr std::int64_t kTallMaxRows = 128;

// The gradient of a matrix a: [M, K] shared by every batch entry of a @ b, b: [batch..., K, N],
// g: [batch..., M, N]: the sum over the batch of g b^T. For each entry of the outermost batch
// dim the inner batch dims fold into one product [M, inner*N] x [inner*N, K] (Linformer's E
// against keys laid out [n, H, d] per sequence: the heads fold without a copy of the keys), so
// the gradient is one batch of those products, summed over the outermost dim. Undefined when
// b's entries do not fold in place (the caller then runs the batch of products). A column-major
// a gets (b g^T)^T, so the gradient reaching the untransposed tensor is contiguous; so does a
// matrix of at most kTallMaxRows rows and at least twice as many columns (E at k = 64 or 128
// against n >= 2k), whose gradient is then a transposed view: the products run with K rows and M
// columns, the orientation GEMMs run faster there. With more rows the two orientations tie and
// the transposed view's copy into the parameter's gradient would be a loss (benchmark_ops --quick
// times both orientations at k = 64, rows "matmul E grad"; docs/matmul.md).
Tensor shared_left_gradient(const Tensor& g, const Tensor& b, bool a_column_major,
                            DType out_dtype) {
  if (b.dim() < 4 || b.numel() == 0 || !rows_first_in_place(select(b, 0, 0))) return Tensor();
  const Tensor gw = rows_first_each(g);  // [B, M, inner*N]
  const Tensor bw = rows_first_each(b);  // [B, K, inner*N]
  const std::int64_t m = g.size(-2), k = b.size(-2);
  const bool tall = a_column_major || (m <= kTallMaxRows && k >= 2 * m);
  const Tensor parts =
      tall ? matmul_impl(bw, transpose(gw, 1, 2), std::nullopt, out_dtype)   // [B, K, M]
           : matmul_impl(gw, transpose(bw, 1, 2), std::nullopt, out_dtype);  // [B, M, K]
  const Tensor total = parts.size(0) == 1 ? select(parts, 0, 0) : sum(parts, {0});
  return tall ? transpose(total, 0, 1) : total;
}

// t with its last two dims swapped, as a view outside the graph.
Tensor swapped(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return raw::as_strided(t, shape, strides, t.offset());
}

// The dim order a gradient of `operand` (of shape `full` after broadcasting) is laid out in: the
// operand's own when it is a dense permutation that is not contiguous (a [B, H, n, d] view of a
// [B, n, H, d] buffer), so that the gradient flows back through the view without a copy; else
// none (contiguous). A broadcast operand's gradient is summed over its batch dims afterwards.
DimOrder gradient_order(const Tensor& operand, const Shape& full) {
  if (operand.shape() != full || operand.is_contiguous()) return std::nullopt;
  return dense_order(operand);
}

// 1-D operands become matrices ([K] -> [1, K] on the left, [K, 1] on the right), the batch dims
// broadcast, and the dims added for 1-D operands are removed from the result.
//   d(a @ b) = (g @ b^T, a^T @ g), with transposes as views; the engine sums each over the
//   batch dims its operand was broadcast along. Each gradient is laid out like its operand where
//   that is a permuted view (gradient_layout), so it flows back through the view without a copy.
// `result_dtype` is the operands' dtype, or float32 for bfloat16 operands (mixed precision: the
// kernel's float32 accumulator is the result, and the backward rounds the incoming gradient to
// bfloat16 for its two products, which return float32 gradients too).
Tensor matmul_impl(const Tensor& a, const Tensor& b, const DimOrder& out_order,
                   std::optional<DType> result_dtype) {
  // Mixed precision (autograd/autocast.h): float32 operands run as one bfloat16 product with a
  // float32 result.
  if (const auto low = autocast_operands({a, b})) {
    const AutocastSuspend suspend;
    return matmul_impl((*low)[0], (*low)[1], out_order, DType::float32);
  }
  TF_CHECK(a.defined() && b.defined(), "matmul: expected defined tensors, got an undefined Tensor");
  TF_CHECK(a.dim() > 0 && b.dim() > 0, "matmul: expected tensors with at least one dim, got ",
           shape_str(a.shape()), " @ ", shape_str(b.shape()), " (use mul for scalars)");
  TF_CHECK(a.device() == b.device(), "matmul: tensors are on different devices: ", a.device(),
           " and ", b.device());
  TF_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: ", a.dtype(), " and ", b.dtype(),
           " (no type promotion: convert one side with .to(), docs/pytorch.md)");
  TF_CHECK(is_floating(a.dtype()), "matmul: expected floating tensors, got ", a.dtype());
  const bool a_vector = a.dim() == 1, b_vector = b.dim() == 1;
  // a2: [batch_a..., M, K], b2: [batch_b..., K, N], as views.
  const Tensor a2 = a_vector ? raw::as_strided(a, {1, a.size(0)},
                                               {a.size(0) * a.stride(0), a.stride(0)}, a.offset())
                             : a;
  const Tensor b2 = b_vector ? raw::as_strided(b, {b.size(0), 1}, {b.stride(0), 1}, b.offset()) : b;
  TF_CHECK(a2.size(-1) == b2.size(-2), "matmul: inner dimensions differ: ", shape_str(a.shape()),
           " @ ", shape_str(b.shape()));
  const std::int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  const Shape batch = broadcast_shapes(Shape(a2.shape().begin(), a2.shape().end() - 2),
                                       Shape(b2.shape().begin(), b2.shape().end() - 2), "matmul");
  Shape a_full = batch, b_full = batch, out_full = batch;
  a_full.insert(a_full.end(), {m, k});
  b_full.insert(b_full.end(), {k, n});
  out_full.insert(out_full.end(), {m, n});
  shape_numel(out_full, "matmul");  // [2^40, 1] @ [1, 2^40]: more elements than an int64 counts
  const DType operand_dtype = a.dtype(), out_dtype = result_dtype.value_or(operand_dtype);
  TF_CHECK(out_dtype == operand_dtype ||
               (operand_dtype == DType::bfloat16 && out_dtype == DType::float32),
           "matmul: a ", operand_dtype, " product cannot write a ", out_dtype, " result");
  const TensorOptions options{.dtype = out_dtype, .device = a.device()};
  const bool matrices = !a_vector && !b_vector;
  const bool ordered = matrices && out_order && out_order->size() == out_full.size();
  Tensor out_full_t =
      ordered ? empty_in_order(out_full, *out_order, options) : empty(out_full, options);
  product_into(raw::expand(a2, a_full, "matmul"), raw::expand(b2, b_full, "matmul"), out_full_t);

  // The result drops the dims that 1-D operands brought in (out_full_t is contiguous then).
  Shape out_shape = batch;
  if (!a_vector) out_shape.push_back(m);
  if (!b_vector) out_shape.push_back(n);
  Tensor out = matrices ? out_full_t
                        : raw::as_strided(out_full_t, out_shape, contiguous_strides(out_shape),
                                          out_full_t.offset());

  Tensor sa = b.requires_grad() ? save(a2) : Tensor();
  Tensor sb = a.requires_grad() ? save(b2) : Tensor();
  const bool b_shared = b2.dim() == 2;
  const bool a_shared = !a_vector && a2.dim() == 2;
  // An operand that is a transposed view (weight.transpose(0, 1) in a linear layer) gets its
  // gradient as the transpose of a row-major product, so that the gradient reaching the
  // untransposed tensor is contiguous instead of a transposed view that must be copied.
  const bool a_column_major = !a_vector && column_major(a2);
  const bool b_column_major = !b_vector && column_major(b2);
  Shape a_full_t = batch, b_full_t = batch;  // the transposed operands' shapes
  a_full_t.insert(a_full_t.end(), {k, m});
  b_full_t.insert(b_full_t.end(), {n, k});
  const DimOrder a_order =
      a_column_major ? gradient_order(swapped(a2), a_full_t) : gradient_order(a2, a_full);
  const DimOrder b_order =
      b_column_major ? gradient_order(swapped(b2), b_full_t) : gradient_order(b2, b_full);
  return record("matmul", out, {a, b}, [=](const Tensor& g) {
    Tensor g2 = reshape(g, out_full);  // [batch..., M, N]
    if (g2.dtype() != operand_dtype) g2 = to_in_memory_order(g2, operand_dtype);
    Tensor ga, gb;
    if (sb.defined() && a_shared && !batch.empty()) {
      ga = shared_left_gradient(g2, sb, a_column_major, out_dtype);
    }
    if (sb.defined() && !ga.defined()) {
      ga = a_column_major
               ? transpose(matmul_impl(sb, transpose(g2, -1, -2), a_order, out_dtype), -1,
                           -2)                                                // (b g^T)^T
               : matmul_impl(g2, transpose(sb, -1, -2), a_order, out_dtype);  // [batch..., M, K]
      if (a_vector) ga = squeeze(ga, -2);  // a 1-D a has shape [K]
    }
    if (sa.defined()) {
      if (b_shared && !batch.empty()) {
        // b: [K, N] was used by every batch entry: one product over the folded batch,
        // [K, batch*M] x [batch*M, N], instead of a batch of products summed afterwards.
        const Tensor a_rows = reshape(sa, {-1, k}), g_rows = reshape(g2, {-1, n});
        gb = b_column_major
                 ? transpose(matmul_impl(transpose(g_rows, 0, 1), a_rows, std::nullopt, out_dtype),
                             0, 1)
                 : matmul_impl(transpose(a_rows, 0, 1), g_rows, std::nullopt, out_dtype);
      } else {
        gb = b_column_major
                 ? transpose(matmul_impl(transpose(g2, -1, -2), sa, b_order, out_dtype), -1,
                             -2)                                                // (g^T a)^T
                 : matmul_impl(transpose(sa, -1, -2), g2, b_order, out_dtype);  // [batch..., K, N]
      }
      if (b_vector) gb = squeeze(gb, -1);  // a 1-D b has shape [K]
    }
    return std::vector<Tensor>{ga, gb};
  });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  return matmul_impl(a, b, std::nullopt);
}

Tensor matmul_like(const Tensor& a, const Tensor& b, const Tensor& like) {
  return matmul_impl(a, b, dense_order(like));
}

}  // namespace tinyformer
