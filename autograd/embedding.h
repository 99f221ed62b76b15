// Embedding lookup (gather) and dropout.
#pragma once

#include <cstdint>

#include "core/random.h"
#include "core/tensor.h"

namespace tinyformer {

// weight: [V, D], indices: int64 of any shape S; the result has shape S + [D]. The backward
// scatter-adds into the rows that were read.
Tensor embedding(const Tensor& weight, const Tensor& indices);

// In training, zeroes each element with probability p in [0, 1] and scales the rest by
// 1 / (1 - p) (p = 1: x * 0, every element dropped, as PyTorch's dropout); identity otherwise.
// The mask comes from `generator` (the default one if null).
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator = nullptr);

// What dropout with probability p multiplies a kept element by: 1 / (1 - p), and 0 at p = 1,
// where no element is kept.
inline double dropout_scale(double p) {
  return p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
}

}  // namespace tinyformer
