// Embedding lookup (gather) and dropout.
#pragma once

#include <cstdint>

#include "core/random.h"
#include "core/tensor.h"

namespace tinyformer {

// weight: [V, D], indices: int64 of any shape S; the result has shape S + [D]. The backward
// scatter-adds into the rows that were read.
Tensor embedding(const Tensor& weight, const Tensor& indices);

// In training, zeroes each element with probability p and scales the rest by 1 / (1 - p);
// identity otherwise. The mask comes from `generator` (the default one if null).
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator = nullptr);

}  // namespace tinyformer
