// Element access for the reference backend: any element of any tensor, through its shape,
// strides and offset, read as a double (or an int64) and written from one.
#pragma once

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

}  // namespace tinyformer::reference
