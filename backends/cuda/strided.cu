// Host-side helpers of strided.cuh: the addressing of a view, with size-1 dims dropped and
// dims that are contiguous in memory merged.
#include "backends/cuda/strided.cuh"

namespace tinyformer::cuda {

StridedIndex strided_index(const Tensor& t, const char* op) {
  // Walk dims from the innermost out, merging dim d into the one inside it when
  // stride[d] == stride[inner] * size[inner] (the two address memory as one longer dim).
  std::int64_t sizes[64], strides[64];
  int dims = 0;
  for (std::int64_t d = t.dim() - 1; d >= 0; --d) {
    const std::int64_t size = t.size(d), stride = t.stride(d);
    if (size == 1) continue;
    if (dims > 0 && stride == strides[dims - 1] * sizes[dims - 1]) {
      sizes[dims - 1] *= size;
      continue;
    }
    TF_CHECK(dims < 64, op, ": too many dims");
    sizes[dims] = size;
    strides[dims] = stride;
    ++dims;
  }
  TF_CHECK(dims <= kMaxDims, op, ": the CUDA backend addresses views of at most ", kMaxDims,
           " non-mergeable dims, got ", dims, " for shape ", shape_str(t.shape()));
  StridedIndex index;
  index.dims = dims;
  // StridedIndex keeps the outermost dim first.
  for (int i = 0; i < dims; ++i) {
    index.sizes[i] = sizes[dims - 1 - i];
    index.strides[i] = strides[dims - 1 - i];
  }
  return index;
}

bool all_contiguous(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->is_contiguous()) return false;
  }
  return true;
}

}  // namespace tinyformer::cuda
