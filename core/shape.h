// Shapes and strides: printing, element counts, dim normalisation and NumPy broadcasting.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tinyformer {

using Shape = std::vector<std::int64_t>;

std::string shape_str(const Shape& shape);  // "[2, 3]"

// Every shape a tensor may have keeps the product of its sizes, zeros counted as 1, within an
// int64: then its element count, its contiguous strides and any product of some of its sizes
// fit too, even when a zero size makes the element count 0. These two throw an Error naming
// `op` and the shape when it does not hold (core/checked.h).
std::int64_t shape_numel(const Shape& shape, const char* op = "numel");
Shape contiguous_strides(const Shape& shape, const char* op = "contiguous_strides");

// Maps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim, const char* op);

// The NumPy broadcast of two shapes; throws naming `op` when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace tinyformer
