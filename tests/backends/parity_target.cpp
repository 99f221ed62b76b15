// The backend the parity cases of tests/parity/ run on in this executable: the CPU backend.
#include "parity/parity.h"

namespace tinyformer::parity {

const Target& target() {
  static const Target cpu = {
      .name = "CPU",
      .backend = []() -> Backend& { return backend(Device::cpu()); },
      .device = Device::cpu(),
      .usable = [] { return true; },
      .dtypes = {DType::float32, DType::float64, DType::int64, DType::boolean},
  };
  return cpu;
}

}  // namespace tinyformer::parity
