// gemm_operand (core/gemm.h): which strided operands a GEMM reads as they are.
#include "core/gemm.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace tinyformer {

namespace {

// True when no two elements of the layout share an address (sizes of 1 are ignored).
bool non_overlapping(const Shape& dims, const Shape& strides) {
  std::vector<std::size_t> order;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] > 1) order.push_back(d);
  }
  std::sort(order.begin(), order.end(),
            [&](std::size_t x, std::size_t y) { return strides[x] > strides[y]; });
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    if (strides[order[i]] < strides[order[i + 1]] * dims[order[i + 1]]) return false;
  }
  return order.empty() || strides[order.back()] > 0;
}

}  // namespace

GemmOperand gemm_operand(const Shape& shape, const Shape& strides) {
  TF_CHECK(shape.size() == 3 && strides.size() == 3, "matmul: expected a [batch, rows, cols] ",
           "operand, got shape ", shape_str(shape), " with strides ", shape_str(strides));
  const std::int64_t batch = shape[0], rows = shape[1], cols = shape[2];
  const std::int64_t rs = strides[1], cs = strides[2];
  GemmOperand op;
  op.broadcast = batch == 1 || strides[0] == 0;
  op.batch_stride = op.broadcast ? 0 : strides[0];
  // A stride only matters along a dimension longer than 1; the leading dimension must cover the
  // other dimension so that rows (or columns) do not overlap, and be at least 1 for BLAS.
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= std::max<std::int64_t>(cols, 1))) {
    op.ld = rows <= 1 ? std::max<std::int64_t>(cols, 1) : rs;
  } else if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= std::max<std::int64_t>(rows, 1))) {
    op.transposed = true;
    op.ld = cols <= 1 ? std::max<std::int64_t>(rows, 1) : cs;
  } else {
    op.copy = true;
    return op;
  }
  if (!op.broadcast) {
    const Shape norm = {op.batch_stride, op.transposed ? 1 : op.ld, op.transposed ? op.ld : 1};
    op.copy = !non_overlapping(shape, norm);
  }
  return op;
}

GemmInput gemm_input(const Tensor& t) {
  GemmInput p{t, gemm_operand(t.shape(), t.strides()), t.data_ptr()};
  if (!p.layout.copy) return p;
  // A broadcast operand is one matrix: pack just that one.
  const Tensor source =
      p.layout.broadcast && t.size(0) > 1
          ? raw::as_strided(t, {1, t.size(1), t.size(2)}, {0, t.stride(1), t.stride(2)}, t.offset())
          : t;
  Tensor packed = empty(source.shape(), {.dtype = t.dtype(), .device = t.device()});
  raw::copy(source, packed);
  p = {packed, gemm_operand(packed.shape(), packed.strides()), packed.data_ptr()};
  TF_CHECK(!p.layout.copy, "matmul: internal error: a packed operand is not GEMM-readable");
  return p;
}

GemmOutput gemm_output(const Tensor& out) {
  const GemmOperand op = gemm_operand(out.shape(), out.strides());
  const bool one_matrix = out.size(0) <= 1;
  TF_CHECK(!op.copy && !op.transposed && (one_matrix || !op.broadcast),
           "matmul: expected an out of row-major matrices that do not overlap (unit stride along ",
           "N, a row stride of at least N), got shape ", shape_str(out.shape()), " with strides ",
           shape_str(out.strides()));
  // A batch of one has no batch stride; a contiguous one keeps its span for libraries that
  // describe every batch dim.
  return {op.ld, one_matrix ? out.size(1) * op.ld : op.batch_stride};
}

Tensor matmul_entry(const Tensor& t, std::int64_t i) {
  const std::int64_t at = t.size(0) == 1 || t.stride(0) == 0 ? 0 : i;
  return raw::as_strided(t, {t.size(1), t.size(2), t.size(3)},
                         {t.stride(1), t.stride(2), t.stride(3)}, t.offset() + at * t.stride(0));
}

void check_matmul_out4(const Tensor& out) {
  if (out.numel() == 0) return;
  gemm_output(matmul_entry(out, 0));
  std::int64_t extent = 1;  // elements from an entry's first to its last, inclusive
  for (std::int64_t d = 1; d < 4; ++d) extent += (out.size(d) - 1) * out.stride(d);
  TF_CHECK(out.size(0) == 1 || out.stride(0) >= extent,
           "matmul: expected an out whose batch entries do not overlap (a first batch stride of ",
           "at least ", extent, "), got shape ", shape_str(out.shape()), " with strides ",
           shape_str(out.strides()));
}

}  // namespace tinyformer
