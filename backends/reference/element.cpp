// Element access for the reference backend (see element.h).
#include "backends/reference/element.h"

#include <cmath>
#include <cstddef>
#include <limits>

#include "core/error.h"

namespace tinyformer::reference {

std::vector<std::int64_t> unravel(const Shape& shape, std::int64_t i) {
  std::vector<std::int64_t> index(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

std::int64_t position(const Tensor& t, const std::vector<std::int64_t>& index) {
  std::int64_t pos = 0;
  for (std::size_t d = 0; d < index.size(); ++d) pos += index[d] * t.strides()[d];
  return pos;
}

double load(const Tensor& t, std::int64_t pos) {
  const void* base = t.data_ptr();
  switch (t.dtype()) {
    case DType::float32:
      return static_cast<const float*>(base)[pos];
    case DType::float64:
      return static_cast<const double*>(base)[pos];
    case DType::int64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[pos]);
    case DType::boolean:
      return static_cast<const bool*>(base)[pos] ? 1.0 : 0.0;
    case DType::bfloat16:
      return static_cast<float>(static_cast<const bfloat16*>(base)[pos]);
  }
  fail("reference: unknown dtype");
}

void store(const Tensor& t, std::int64_t pos, double v) {
  void* base = t.data_ptr();
  switch (t.dtype()) {
    case DType::float32:
      static_cast<float*>(base)[pos] = static_cast<float>(v);
      return;
    case DType::float64:
      static_cast<double*>(base)[pos] = v;
      return;
    case DType::int64: {
      constexpr double limit = 9223372036854775808.0;  // 2^63
      std::int64_t i = 0;
      if (std::isnan(v)) {
        i = 0;
      } else if (v >= limit) {
        i = std::numeric_limits<std::int64_t>::max();
      } else if (v < -limit) {
        i = std::numeric_limits<std::int64_t>::min();
      } else {
        i = static_cast<std::int64_t>(v);  // truncates toward zero
      }
      static_cast<std::int64_t*>(base)[pos] = i;
      return;
    }
    case DType::boolean:
      static_cast<bool*>(base)[pos] = v != 0.0;
      return;
    case DType::bfloat16:
      static_cast<bfloat16*>(base)[pos] = bfloat16(static_cast<float>(v));
      return;
  }
  fail("reference: unknown dtype");
}

std::int64_t load_int(const Tensor& t, std::int64_t pos) {
  TF_CHECK(t.dtype() == DType::int64, "reference: expected int64, got ", t.dtype());
  return static_cast<const std::int64_t*>(t.data_ptr())[pos];
}

void store_int(const Tensor& t, std::int64_t pos, std::int64_t v) {
  TF_CHECK(t.dtype() == DType::int64, "reference: expected int64, got ", t.dtype());
  static_cast<std::int64_t*>(t.data_ptr())[pos] = v;
}

// The position of element i in row-major order: its multi-index (the last dim varying fastest)
// dotted with the strides, without building the index.
static std::int64_t position_of(const Tensor& t, std::int64_t i) {
  std::int64_t pos = 0;
  for (std::size_t d = t.shape().size(); d-- > 0;) {
    pos += (i % t.shape()[d]) * t.strides()[d];
    i /= t.shape()[d];
  }
  return pos;
}
double get(const Tensor& t, std::int64_t i) {
  return load(t, position_of(t, i));
}
void set(const Tensor& t, std::int64_t i, double v) {
  store(t, position_of(t, i), v);
}
std::int64_t get_int(const Tensor& t, std::int64_t i) {
  return load_int(t, position_of(t, i));
}
void set_int(const Tensor& t, std::int64_t i, std::int64_t v) {
  store_int(t, position_of(t, i), v);
}

// The position of a short multi-index, without building a vector (matmul calls it per term).
static std::int64_t position_of(const Tensor& t, std::initializer_list<std::int64_t> index) {
  std::int64_t pos = 0;
  std::size_t d = 0;
  for (std::int64_t i : index) pos += i * t.strides()[d++];
  return pos;
}
double at(const Tensor& t, std::initializer_list<std::int64_t> index) {
  return load(t, position_of(t, index));
}
void set_at(const Tensor& t, std::initializer_list<std::int64_t> index, double v) {
  store(t, position_of(t, index), v);
}

Matrix read_matrix(const Tensor& t, std::int64_t offset) {
  Matrix m(t.size(-2), t.size(-1));
  const std::int64_t row_stride = t.stride(-2), col_stride = t.stride(-1);
  for (std::int64_t r = 0; r < m.rows; ++r) {
    for (std::int64_t c = 0; c < m.cols; ++c)
      m(r, c) = load(t, offset + r * row_stride + c * col_stride);
  }
  return m;
}

void write_matrix(const Tensor& t, std::int64_t offset, const Matrix& m) {
  const std::int64_t row_stride = t.stride(-2), col_stride = t.stride(-1);
  for (std::int64_t r = 0; r < m.rows; ++r) {
    for (std::int64_t c = 0; c < m.cols; ++c)
      store(t, offset + r * row_stride + c * col_stride, m(r, c));
  }
}

}  // namespace tinyformer::reference
