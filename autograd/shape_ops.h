// Views (sharing storage) and the ops that move data between shapes: cat, stack, split.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tinyformer {

// `shape` may hold one -1, inferred from the element count. view needs compatible strides;
// reshape returns a view where it can and a copy otherwise.
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);
Tensor permute(const Tensor& x, const Shape& dims);
// Elements start, start + step, ... < end along dim (start/end clamp like Python slices).
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end,
             std::int64_t step = 1);
Tensor narrow(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length);
Tensor select(const Tensor& x, std::int64_t dim, std::int64_t index);  // drops dim
Tensor unsqueeze(const Tensor& x, std::int64_t dim);
Tensor squeeze(const Tensor& x);                    // every size-1 dim
Tensor squeeze(const Tensor& x, std::int64_t dim);  // that dim, if its size is 1
// Broadcasts size-1 dims (and new leading dims) to `shape` with stride 0; -1 keeps a size.
Tensor expand(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device);

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim);
// Pieces of `split_size` along dim (the last may be smaller); views of x.
std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim);
// `chunks` pieces of equal size ceil(n / chunks) (the last may be smaller).
std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim);

}  // namespace tinyformer
