// Evaluation metrics computed from a model's outputs.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tinyformer::nn {

// The fraction of predictions that are right: logits [..., C] (any floating dtype, any device),
// labels [...] int64 with logits' shape less its last dim. A prediction is the argmax over the
// last dim (the first of tied maxima). Labels equal to ignore_index are left out of both counts
// (cross_entropy's convention, e.g. the unmasked tokens of masked-LM); when every label is
// ignored the result is NaN. Not differentiable. A shape, dtype or device mismatch is an Error.
double accuracy(const Tensor& logits, const Tensor& labels, std::int64_t ignore_index = -100);

}  // namespace tinyformer::nn
