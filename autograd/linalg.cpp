// matmul with PyTorch's semantics, lowered onto the backend's one batched product
// [B, M, K] x [B, K, N]. Broadcast and transposed operands reach the backend as strided views;
// a copy is made only when the batch dims cannot be described by a single stride.
#include "autograd/linalg.h"

#include <optional>

#include "autograd/autocast.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

namespace {

// The single stride that walks dims [0, n) of t as one flattened dim, if there is one: every
// dim (ignoring size-1 dims) must sit right after the next in memory, or all must be stride 0.
std::optional<std::int64_t> collapsed_stride(const Tensor& t, std::int64_t n) {
  std::optional<std::int64_t> inner;  // stride of the innermost dim seen so far
  std::int64_t inner_size = 1;
  std::int64_t result = 0;
  for (std::int64_t d = n - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!inner) {
      result = t.stride(d);
    } else if (t.stride(d) != *inner * inner_size) {
      return std::nullopt;
    }
    inner = t.stride(d);
    inner_size = t.size(d);
  }
  return result;
}

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

// out: [batch..., M, N] = a: [batch..., M, K] @ b: [batch..., K, N] (same batch dims); no graph.
Tensor batched_product(const Tensor& a, const Tensor& b, const Shape& out_shape) {
  const std::int64_t nb = a.dim() - 2;
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Tensor out = empty(out_shape, {.dtype = a.dtype(), .device = a.device()});
  if (out.numel() == 0) return out;
  if (k == 0) {
    raw::fill(out, 0.0);  // a sum over nothing
    return out;
  }
  Backend& be = backend(a.device());
  // One matrix b shared by the whole batch (the Linear-layer case): the batch folds into M, so
  // the backend runs one GEMM [B*M, K] x [K, N] instead of B small ones.
  if (nb > 0 && collapsed_stride(b, nb) == 0) {
    const auto row_stride = collapsed_stride(a, nb + 1);
    if (row_stride && a.stride(-1) == 1 && *row_stride >= k) {
      const std::int64_t rows = out.numel() / n;
      Tensor a3 = raw::as_strided(a, {1, rows, k}, {0, *row_stride, 1}, a.offset());
      Tensor b3 = raw::as_strided(b, {1, k, n}, {0, b.stride(-2), b.stride(-1)}, b.offset());
      if (!blas_layout(b3)) b3 = packed(b3);
      be.matmul(a3, b3, raw::as_strided(out, {1, rows, n}, {rows * n, n, 1}, 0));
      return out;
    }
  }
  Tensor a3 = as_batched(a), b3 = as_batched(b);
  be.matmul(a3, b3, raw::as_strided(out, {a3.size(0), m, n}, {m * n, n, 1}, 0));
  return out;
}

}  // namespace

// 1-D operands become matrices ([K] -> [1, K] on the left, [K, 1] on the right), the batch dims
// broadcast, and the dims added for 1-D operands are removed from the result.
//   d(a @ b) = (g @ b^T, a^T @ g), with transposes as views; the engine sums each over the
//   batch dims its operand was broadcast along.
Tensor matmul(const Tensor& a, const Tensor& b) {
  // Mixed precision (autograd/autocast.h): float32 operands run as one bfloat16 product.
  if (const auto low = autocast_operands({a, b})) {
    const AutocastSuspend suspend;
    return to(matmul((*low)[0], (*low)[1]), DType::float32);
  }
  TF_CHECK(a.defined() && b.defined(), "matmul: expected defined tensors, got an undefined Tensor");
  TF_CHECK(a.dim() > 0 && b.dim() > 0, "matmul: expected tensors with at least one dim, got ",
           shape_str(a.shape()), " @ ", shape_str(b.shape()), " (use mul for scalars)");
  TF_CHECK(a.device() == b.device(), "matmul: tensors are on different devices: ", a.device(),
           " and ", b.device());
  TF_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: ", a.dtype(), " and ", b.dtype());
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
  Tensor out_full_t = batched_product(raw::expand(a2, a_full, "matmul"),
                                      raw::expand(b2, b_full, "matmul"), out_full);

  // The result drops the dims that 1-D operands brought in.
  Shape out_shape = batch;
  if (!a_vector) out_shape.push_back(m);
  if (!b_vector) out_shape.push_back(n);
  Tensor out =
      raw::as_strided(out_full_t, out_shape, contiguous_strides(out_shape), out_full_t.offset());

  Tensor sa = b.requires_grad() ? save(a2) : Tensor();
  Tensor sb = a.requires_grad() ? save(b2) : Tensor();
  const bool b_shared = b2.dim() == 2;
  // An operand that is a transposed view (weight.transpose(0, 1) in a linear layer) gets its
  // gradient as the transpose of a row-major product, so that the gradient reaching the
  // untransposed tensor is contiguous instead of a transposed view that must be copied.
  const bool a_column_major = !a_vector && column_major(a2);
  const bool b_column_major = !b_vector && column_major(b2);
  return record("matmul", out, {a, b}, [=](const Tensor& g) {
    Tensor g2 = reshape(g, out_full);  // [batch..., M, N]
    Tensor ga, gb;
    if (sb.defined()) {
      ga = a_column_major ? transpose(matmul(sb, transpose(g2, -1, -2)), -1, -2)  // (b g^T)^T
                          : matmul(g2, transpose(sb, -1, -2));  // [batch..., M, K]
      if (a_vector) ga = squeeze(ga, -2);                       // a 1-D a has shape [K]
    }
    if (sa.defined()) {
      if (b_shared && !batch.empty()) {
        // b: [K, N] was used by every batch entry: one product over the folded batch,
        // [K, batch*M] x [batch*M, N], instead of a batch of products summed afterwards.
        const Tensor a_rows = reshape(sa, {-1, k}), g_rows = reshape(g2, {-1, n});
        gb = b_column_major ? transpose(matmul(transpose(g_rows, 0, 1), a_rows), 0, 1)
                            : matmul(transpose(a_rows, 0, 1), g_rows);
      } else {
        gb = b_column_major ? transpose(matmul(transpose(g2, -1, -2), sa), -1, -2)  // (g^T a)^T
                            : matmul(transpose(sa, -1, -2), g2);  // [batch..., K, N]
      }
      if (b_vector) gb = squeeze(gb, -1);  // a 1-D b has shape [K]
    }
    return std::vector<Tensor>{ga, gb};
  });
}

}  // namespace tinyformer
