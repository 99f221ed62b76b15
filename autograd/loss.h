// Losses.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tinyformer {

enum class Reduction { none, mean, sum };

// logits: [N, C] (or [C]), targets: [N] int64 class indices. Rows whose target equals
// ignore_index contribute nothing; mean divides by the number of other rows.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100,
                     Reduction reduction = Reduction::mean);
// The same on log-probabilities.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, std::int64_t ignore_index = -100,
                Reduction reduction = Reduction::mean);

}  // namespace tinyformer
