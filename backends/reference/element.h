// Element access for the reference backend: any element of any tensor, through its shape,
// strides and offset, read as a double (or an int64) and written from one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace tinyformer::reference {

// The multi-index of element `i` of `shape` in row-major order (the last dim varies fastest).
std::vector<std::int64_t> unravel(const Shape& shape, std::int64_t i);

// Where the element at `index` lies, in elements from t.data_ptr(): sum of index[d] * stride[d].
std::int64_t position(const Tensor& t, const std::vector<std::int64_t>& index);

// The element at storage position `pos` (from position()) as a double; bool reads as 0 or 1,
// bfloat16 exactly.
double load(const Tensor& t, std::int64_t pos);
// Writes v converted to t's dtype: float32 and bfloat16 round to nearest (bfloat16 through
// float32, as every conversion in the library does), int64 truncates toward zero (NaN gives 0,
// out-of-range values saturate), bool is v != 0.
void store(const Tensor& t, std::int64_t pos, double v);
// The same for int64 tensors, exactly (a double holds only 53 bits).
std::int64_t load_int(const Tensor& t, std::int64_t pos);
void store_int(const Tensor& t, std::int64_t pos, std::int64_t v);

// Element i in row-major order, and the element at a multi-index.
double get(const Tensor& t, std::int64_t i);
void set(const Tensor& t, std::int64_t i, double v);
double at(const Tensor& t, std::initializer_list<std::int64_t> index);
void set_at(const Tensor& t, std::initializer_list<std::int64_t> index, double v);
std::int64_t get_int(const Tensor& t, std::int64_t i);
void set_int(const Tensor& t, std::int64_t i, std::int64_t v);

// One matrix of a tensor (its last two dims) as doubles, row-major: the products' loops read
// their operands from it rather than through the tensor's strides at every term. Reading and
// writing convert each element as load and store do, so the values are the same.
struct Matrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<double> values;

  Matrix() = default;
  Matrix(std::int64_t r, std::int64_t c)
      : rows(r), cols(c), values(static_cast<std::size_t>(r * c), 0.0) {}
  double operator()(std::int64_t r, std::int64_t c) const {
    return values[static_cast<std::size_t>(r * cols + c)];
  }
  double& operator()(std::int64_t r, std::int64_t c) {
    return values[static_cast<std::size_t>(r * cols + c)];
  }
};

// The matrix of t whose element [0, 0] lies at storage position `offset`; its element [r, c]
// at offset + r * stride(-2) + c * stride(-1).
Matrix read_matrix(const Tensor& t, std::int64_t offset);
// Writes m into the matrix of t at `offset` (the same layout), each element as store does.
void write_matrix(const Tensor& t, std::int64_t offset, const Matrix& m);

}  // namespace tinyformer::reference
