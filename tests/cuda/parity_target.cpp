// The backend the parity cases of tests/parity/ run on in this executable: the CUDA backend,
// where a GPU is present (the cases skip themselves, and say so, where none is).
#include "parity/parity.h"

namespace tinyformer::parity {

const Target& target() {
  static const Target cuda = {
      .name = "CUDA",
      .backend = []() -> Backend& { return backend(Device::cuda()); },
      .device = Device::cuda(),
      .usable = [] { return cuda_available(); },
      .dtypes = {DType::float32, DType::float64, DType::int64, DType::boolean, DType::bfloat16},
  };
  return cuda;
}

}  // namespace tinyformer::parity
