// How a tensor's dims lie in memory, as the product ops and mixed precision need to know it:
// whether leading dims fold into one stride, and the memory order of a dense permuted view.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace tinyformer {

// The single stride that walks dims [0, n) of t as one flattened dim, if there is one: every
// dim (ignoring size-1 dims) must sit right after the next in memory, or all must be stride 0.
// 0 when every walked dim has size 1.
std::optional<std::int64_t> collapsed_stride(const Tensor& t, std::int64_t n);

// The order of t's dims from outermost to innermost in memory, when t is a permutation of a
// contiguous tensor (every element once, no gaps: a transposed or permuted view); else nullopt.
// Size-1 dims take whatever place their stride gives them: it does not change the memory.
std::optional<std::vector<std::int64_t>> memory_order(const Tensor& t);

// `t` converted to `dtype` (no graph). A t whose elements fill a dense block in some dim order (a
// transposed or permuted view) keeps its strides, the conversion streaming through memory;
// anything else becomes contiguous.
Tensor converted_in_memory_order(const Tensor& t, DType dtype);

// memory_order for a t of at least 2 dims whose last dim is innermost; else nullopt.
std::optional<std::vector<std::int64_t>> dense_order(const Tensor& t);

// An uninitialised tensor of `shape` whose dims lie in memory in `order` (outermost first).
Tensor empty_in_order(const Shape& shape, const std::vector<std::int64_t>& order,
                      const TensorOptions& options);

}  // namespace tinyformer
