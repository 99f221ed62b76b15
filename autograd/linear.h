// The linear layer as one fused op: the product, its bias and its activation in one backend call.
#pragma once

#include "core/ops.h"
#include "core/tensor.h"

namespace tinyformer {

// y = act(x weight^T + bias), act the epilogue (Epilogue::none, relu, gelu, gelu_tanh).
// x: [..., K] (any strides), weight: [N, K], bias: [N] or undefined -> y: [..., N]. The same
// values as matmul(x, weight.transpose(0, 1)) + bias followed by the activation, in one call that
// applies the bias and the activation inside the product (docs/matmul.md). float32, float64 or
// bfloat16, one dtype for all three; throws Error naming `linear` for mismatched shapes, dtypes
// or devices.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              Epilogue epilogue = Epilogue::none);

}  // namespace tinyformer
