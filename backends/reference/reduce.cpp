// Reductions.
//   reduce:  out = sum, mean, max or min of x over the dims in `dims`
//            x: any shape; out: x's shape with those dims set to 1 (keepdim form)
//   max_dim: values[j] = max_i x[.., i, ..] over `dim`, indices[j] = the i of the first maximum
//            values, indices (int64): x's shape with `dim` set to 1
// A NaN is larger than anything (max, min and max_dim return it; the first NaN wins max_dim).
// The sum of an empty set is 0, its mean NaN. int64 sums are exact (integers, wrapping).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::reduce(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& out) {
  const std::vector<bool> reduced = check_reduce_args(op, x, dims, out, *this);
  TF_CHECK(x.dtype() != DType::boolean, reduce_name(op), ": unsupported dtype bool");
  const bool integers = x.dtype() == DType::int64;
  const std::int64_t n = out.numel();
  // One accumulator per output element; x's elements are visited once each in row-major order
  // and land on the output element with the reduced dims of their index set to 0.
  std::vector<double> acc(static_cast<std::size_t>(n), 0.0);
  std::vector<std::int64_t> iacc(static_cast<std::size_t>(n), 0);
  std::vector<std::int64_t> count(static_cast<std::size_t>(n), 0);
  const Shape& shape = x.shape();
  const Shape& strides = x.strides();
  std::vector<std::int64_t> index(shape.size(), 0);  // of element i, advanced with i
  std::int64_t pos = 0;                              // its storage position
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    if (i > 0) {
      for (std::size_t d = shape.size(); d-- > 0;) {
        pos += strides[d];
        if (++index[d] < shape[d]) break;
        pos -= shape[d] * strides[d];
        index[d] = 0;
      }
    }
    std::int64_t o = 0;  // row-major number of the output element: the reduced dims at 0
    for (std::size_t d = 0; d < index.size(); ++d) {
      o = o * out.shape()[d] + (reduced[d] ? 0 : index[d]);
    }
    const auto k = static_cast<std::size_t>(o);
    const bool first = count[k] == 0;
    count[k] += 1;
    if (integers) {
      const std::int64_t v = load_int(x, pos);
      if (op == ReduceOp::sum) {
        iacc[k] = static_cast<std::int64_t>(static_cast<std::uint64_t>(iacc[k]) +
                                            static_cast<std::uint64_t>(v));
      } else if (first || (op == ReduceOp::max ? v > iacc[k] : v < iacc[k])) {
        iacc[k] = v;
      }
      continue;
    }
    const double v = load(x, pos);
    if (op == ReduceOp::sum || op == ReduceOp::mean) {
      acc[k] += v;
    } else if (first || std::isnan(v) ||
               (!std::isnan(acc[k]) && (op == ReduceOp::max ? v > acc[k] : v < acc[k]))) {
      acc[k] = v;
    }
  }
  for (std::int64_t j = 0; j < n; ++j) {
    const auto k = static_cast<std::size_t>(j);
    if (integers) {
      set_int(out, j, iacc[k]);
    } else if (op == ReduceOp::mean) {
      set(out, j, count[k] == 0 ? std::nan("") : acc[k] / static_cast<double>(count[k]));
    } else {
      set(out, j, acc[k]);
    }
  }
}

void ReferenceBackend::max_dim(const Tensor& x, std::int64_t dim, const Tensor& values,
                               const Tensor& indices) {
  const std::int64_t d = check_max_dim_args(x, dim, values, indices, *this);
  if (values.numel() == 0) return;
  const std::int64_t n = x.dim() > 0 ? x.size(d) : 1;
  TF_CHECK(n > 0, "max_dim: cannot take the maximum over an empty dim of shape ",
           shape_str(x.shape()));
  TF_CHECK(x.dtype() != DType::boolean, "max_dim: unsupported dtype bool");
  const bool integers = x.dtype() == DType::int64;
  for (std::int64_t j = 0; j < values.numel(); ++j) {
    std::vector<std::int64_t> index = unravel(values.shape(), j);  // index[d] is 0
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < n; ++i) {
      if (x.dim() > 0) index[static_cast<std::size_t>(d)] = i;
      const std::int64_t pos = position(x, index);
      if (x.dim() > 0) index[static_cast<std::size_t>(d)] = best;
      const std::int64_t best_pos = position(x, index);
      if (integers) {
        if (load_int(x, pos) > load_int(x, best_pos)) best = i;
      } else {
        const double v = load(x, pos), b = load(x, best_pos);
        if (!std::isnan(b) && (v > b || std::isnan(v))) best = i;  // strictly: the first wins
      }
    }
    if (x.dim() > 0) index[static_cast<std::size_t>(d)] = best;
    const std::int64_t best_pos = position(x, index);
    if (integers) {
      set_int(values, j, load_int(x, best_pos));
    } else {
      set(values, j, load(x, best_pos));
    }
    set_int(indices, j, best);
  }
}

}  // namespace tinyformer::reference
