// The index arithmetic of strided loops on every device: coalescing the dims of operands that
// share one shape (size-1 dims dropped, neighbours that every operand walks contiguously merged)
// and the memory offset of a row-major position. Every backend's strided loops and kernel
// addressing start from coalesce().
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/shape.h"

namespace tinyformer {

// The common shape of up to kMaxOperands operands and each one's strides (in elements), after
// coalescing. `sizes` is never empty (a 0-dim tensor becomes one dim of size 1).
struct StridedLayout {
  static constexpr std::size_t kMaxOperands = 4;
  Shape sizes;                 // outermost first
  std::vector<Shape> strides;  // strides[k][d]: operand k along dim d

  std::int64_t inner_stride(std::size_t k) const { return strides[k].back(); }
  // One dim walked with unit stride by every operand: the whole loop is over plain pointers.
  bool contiguous() const;
  // Some operand steps through memory more finely along the second-innermost dim than along
  // the innermost one (a transposed view): row by row, it would touch a new cache line at
  // every element.
  bool transposing() const;
};

// Drops size-1 dims and merges dim d into the dim outside it wherever every operand has
// stride[outer] == stride[d] * size[d] (the two address memory as one longer dim).
StridedLayout coalesce(const Shape& shape, std::initializer_list<const Shape*> strides);

// Operand k's element offset of the element at row-major position `index` of the layout.
std::int64_t element_offset(const StridedLayout& layout, std::int64_t index, std::size_t k);

}  // namespace tinyformer
