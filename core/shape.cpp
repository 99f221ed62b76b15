// Shape helpers shared by every layer.
#include "core/shape.h"

#include <algorithm>

#include "core/checked.h"
#include "core/error.h"

namespace tinyformer {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void fail_size_overflow(const char* op, const Shape& shape, std::int64_t a, char sign,
                        std::int64_t b) {
  fail(op, ": shape ", shape_str(shape), " is too large (", a, " ", sign, " ", b,
       " overflows a 64-bit integer)");
}

std::int64_t shape_numel(const Shape& shape, const char* op) {
  // The product skips zeros (see the header), so a zero anywhere does not hide an overflow.
  std::int64_t n = 1;
  bool empty = false;
  for (auto d : shape) {
    if (d == 0) {
      empty = true;
    } else {
      n = checked_mul(n, d, op, shape);
    }
  }
  return empty ? 0 : n;
}

Shape contiguous_strides(const Shape& shape, const char* op) {
  Shape strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s = checked_mul(s, std::max<std::int64_t>(shape[i], 1), op, shape);
  }
  return strides;
}

std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  const std::int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  TF_CHECK(dim >= lo && dim <= hi, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
           " dims (expected ", lo, " to ", hi, ")");
  return dim < 0 ? dim + std::max<std::int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TF_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  shape_numel(out, op);  // [2^40, 1] and [1, 2^40] broadcast to more elements than an int64 counts
  return out;
}

}  // namespace tinyformer
