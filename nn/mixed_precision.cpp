// MixedPrecision: registers a model's matrix parameters in an autocast cache of bfloat16 copies.
#include "nn/mixed_precision.h"

namespace tinyformer::nn {

MixedPrecision::MixedPrecision(const Module& model) : MixedPrecision(model.parameters()) {}

MixedPrecision::MixedPrecision(const std::vector<Tensor>& parameters) {
  for (const Tensor& p : parameters) {
    if (p.dtype() == DType::float32 && p.dim() >= 2 && p.is_contiguous()) cache_.add(p);
  }
  cache_.refresh();
}

}  // namespace tinyformer::nn
