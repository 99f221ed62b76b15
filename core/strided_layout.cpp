// Coalescing of strided layouts (core/strided_layout.h), shared by the CPU and CUDA backends.
#include "core/strided_layout.h"

#include <cstdlib>

#include "core/checked.h"
#include "core/error.h"

namespace tinyformer {

bool StridedLayout::contiguous() const {
  if (sizes.size() != 1) return false;
  for (const Shape& s : strides) {
    if (s[0] != 1) return false;
  }
  return true;
}

bool StridedLayout::transposing() const {
  const std::size_t nd = sizes.size();
  if (nd < 2) return false;
  for (const Shape& s : strides) {
    const std::int64_t inner = std::abs(s[nd - 1]), outer = std::abs(s[nd - 2]);
    if (outer != 0 && outer < inner) return true;
  }
  return false;
}

StridedLayout coalesce(const Shape& shape, std::initializer_list<const Shape*> strides) {
  TF_CHECK(strides.size() <= StridedLayout::kMaxOperands, "coalesce: at most ",
           StridedLayout::kMaxOperands, " operands, got ", strides.size());
  StridedLayout layout;
  layout.strides.resize(strides.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // its stride is never used
    // Merge into the previous kept dim when every operand steps over this one contiguously.
    bool merge = !layout.sizes.empty();
    std::size_t k = 0;
    for (const Shape* s : strides) {
      // A product that overflows cannot be a stride of the same storage: no merge.
      std::int64_t span = 0;
      merge = merge && !mul_overflows((*s)[d], shape[d], span) && layout.strides[k].back() == span;
      ++k;
    }
    if (merge) {
      layout.sizes.back() *= shape[d];
    } else {
      layout.sizes.push_back(shape[d]);
    }
    k = 0;
    for (const Shape* s : strides) {
      if (merge) {
        layout.strides[k].back() = (*s)[d];
      } else {
        layout.strides[k].push_back((*s)[d]);
      }
      ++k;
    }
  }
  if (layout.sizes.empty()) {  // a 0-dim tensor, or only size-1 dims: one element
    layout.sizes.push_back(1);
    for (Shape& s : layout.strides) s.push_back(1);
  }
  return layout;
}

std::int64_t element_offset(const StridedLayout& layout, std::int64_t index, std::size_t k) {
  std::int64_t offset = 0;
  for (std::size_t d = layout.sizes.size(); d-- > 0;) {
    offset += index % layout.sizes[d] * layout.strides[k][d];
    index /= layout.sizes[d];
  }
  return offset;
}

}  // namespace tinyformer
