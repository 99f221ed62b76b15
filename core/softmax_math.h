// The softmax math that every backend shares, from CPU loops and GPU kernels alike: the
// log-softmax normaliser, the backward's element of softmax and log-softmax, and fused attention's
// rule for the keys a query may not attend to (memory-efficient attention's dropout draw is in
// core/attention_dropout.h).
#pragma once

#include <cstdint>

#include "core/attention_dropout.h"
#include "core/host_device.h"
#include "core/math.h"

namespace tinyformer {

// log_softmax's normaliser above the row maximum: log(sum), where sum = sum over the row of
// exp(x - max). In exact arithmetic sum >= 1 (the maximum's own term is exp(0) = 1), so the
// normaliser is at least 0 and every log-probability (x - max) - normaliser is at most 0; the
// floor keeps that so where exp() and log() round. A NaN sum stays NaN.
template <typename T>
TF_HOST_DEVICE inline T log_softmax_normaliser(T sum) {
  const T l = math::log(sum);
  return l < T(0) ? T(0) : l;
}

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
