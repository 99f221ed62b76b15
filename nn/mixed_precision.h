// Mixed-precision training: float32 master parameters that the optimizer updates, bfloat16
// copies that the products read, refreshed once per optimizer step; docs/mixed_precision.md.
#pragma once

#include <vector>

#include "autograd/autocast.h"
#include "core/tensor.h"
#include "nn/module.h"

namespace tinyformer::nn {

//   nn::MixedPrecision mp(*model);           // after the weights are loaded or resumed
//   for (...) {
//     Tensor loss;
//     {
//       const AutocastGuard autocast = mp.autocast();
//       loss = loss_fn(model->forward(x), y);  // products in bfloat16, float32 result
//     }
//     optimizer.zero_grad();
//     loss.backward();                       // float32 gradients on the float32 parameters
//     optimizer.step();
//     mp.refresh();                          // the bfloat16 copies follow the new weights
//   }
class MixedPrecision {
 public:
  // Caches a bfloat16 copy of every float32 parameter of `model` with at least two dims (the
  // product operands; biases and norm gains enter float32 ops and are never rounded).
  explicit MixedPrecision(const Module& model);
  explicit MixedPrecision(const std::vector<Tensor>& parameters);

  // The scope of a forward pass in mixed precision.
  AutocastGuard autocast() const { return AutocastGuard(DType::bfloat16, &cache_); }
  // Rounds the masters into new copies; call after each optimizer step and after loading weights.
  void refresh() { cache_.refresh(); }

  const AutocastCache& cache() const { return cache_; }

 private:
  AutocastCache cache_;
};

}  // namespace tinyformer::nn
