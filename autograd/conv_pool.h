// 1-D convolution and pooling along the last (sequence) axis: x is [B, C, L] (or [C, L]).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tinyformer {

// weight: [Cout, Cin, K], bias: [Cout] or undefined. Zero padding on both sides.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              std::int64_t stride = 1, std::int64_t padding = 0);
// stride 0 means stride = kernel. Windows that do not fit are dropped (floor mode).
Tensor avg_pool1d(const Tensor& x, std::int64_t kernel, std::int64_t stride = 0);
Tensor max_pool1d(const Tensor& x, std::int64_t kernel, std::int64_t stride = 0);

}  // namespace tinyformer
