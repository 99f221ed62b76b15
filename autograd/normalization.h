// Fused softmax, log-softmax and layer norm, each with a hand-written backward.
#pragma once

#include "core/tensor.h"

namespace tinyformer {

Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);
// Normalises over the last normalized_shape.size() dims; weight and bias (optional, may be
// undefined) have shape normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

}  // namespace tinyformer
