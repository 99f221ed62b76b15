// The interfaces of an encoder block's position-wise parts, which the stack calls through
// (nn/block.h registers factories for them): a feed-forward and a normalisation.
#pragma once

#include "nn/module.h"

namespace tinyformer::nn {

// A position-wise feed-forward part: x [..., d_model] -> [..., d_model].
class FeedForwardModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
};

// A normalisation part: x [..., d_model] -> [..., d_model], each position on its own.
class NormModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
};

}  // namespace tinyformer::nn
