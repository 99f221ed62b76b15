// Host-side helpers of strided.cuh: the addressing of a view, with size-1 dims dropped and
// dims that are contiguous in memory merged by core's coalesce() (core/strided_layout.h).
#include "backends/cuda/strided.cuh"
#include "core/strided_layout.h"

namespace tinyformer::cuda {

StridedIndex strided_index(const Shape& sizes, const Shape& strides, const char* op) {
  const StridedLayout layout = coalesce(sizes, {&strides});
  // A view of one element has no dims to walk (coalesce() keeps one of size 1).
  const bool single = layout.sizes.size() == 1 && layout.sizes[0] == 1;
  const int dims = single ? 0 : static_cast<int>(layout.sizes.size());
  TF_CHECK(dims <= kMaxDims, op, ": the CUDA backend addresses views of at most ", kMaxDims,
           " non-mergeable dims, got ", dims, " for sizes ", shape_str(sizes), " and strides ",
           shape_str(strides));
  StridedIndex index;
  index.dims = dims;
  for (int i = 0; i < dims; ++i) {  // outermost first, as in the layout
    index.sizes[i] = layout.sizes[static_cast<std::size_t>(i)];
    index.strides[i] = layout.strides[0][static_cast<std::size_t>(i)];
  }
  return index;
}

StridedIndex strided_index(const Tensor& t, const char* op) {
  return strided_index(t.shape(), t.strides(), op);
}

bool all_contiguous(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->is_contiguous()) return false;
  }
  return true;
}

}  // namespace tinyformer::cuda
