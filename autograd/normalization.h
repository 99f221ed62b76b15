// Fused softmax, log-softmax, layer norm and residual add + layer norm, each with a hand-written
// backward.
#pragma once

#include "core/tensor.h"

namespace tinyformer {

Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);
// Normalises over the last normalized_shape.size() dims; weight and bias (optional, may be
// undefined) have shape normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// layer_norm(x + residual, ...) in one pass (the post-norm residual step of a Transformer
// layer); x and residual have one shape. Equal to the composite add then layer_norm, which a
// test holds it against.
Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                      const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);

}  // namespace tinyformer
