// The softmax math that every backend shares, from CPU loops and GPU kernels alike: the
// backward's element of softmax and log-softmax, and fused attention's rule for the keys a query
// may not attend to.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/math.h"

namespace tinyformer {

// softmax's backward at one element: dx = y (g - dot), with dot = sum over the row of g y.
template <typename T>
TF_HOST_DEVICE inline T softmax_grad(T y, T g, T dot) {
  return y * (g - dot);
}

// log_softmax's backward at one element: dx = g - exp(y) dot, with dot = sum over the row of g.
template <typename T>
TF_HOST_DEVICE inline T log_softmax_grad(T y, T g, T dot) {
  return g - math::exp(y) * dot;
}

// Whether query i may not attend to key j: its mask entry says so, or the causal rule does
// (key j lies after query i).
TF_HOST_DEVICE inline bool attention_excluded(bool masked, bool causal, std::int64_t i,
                                              std::int64_t j) {
  return masked || (causal && j > i);
}

}  // namespace tinyformer
