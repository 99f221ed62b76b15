// test_backends runs the CPU kernels with the smallest parallel grain (backends/cpu/parallel.h),
// so that the kernel tests reach the threaded paths at the sizes they use (the default grain
// keeps passes below half a million elements on one thread when idle threads sleep).
#include "backends/cpu/parallel.h"

namespace {
const bool smallest_grain = [] {
  tinyformer::cpu::set_parallel_grain(tinyformer::cpu::kMinParallelGrain);
  return true;
}();
}  // namespace
