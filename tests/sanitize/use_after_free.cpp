// Reads a CPU tensor's memory after the tensor is gone. The sanitizer build must report it: the
// caching allocator hands freed blocks back to the system under AddressSanitizer (with GCC and
// clang alike), so a stale pointer into a tensor is caught, not read from a recycled block.
#include <cstdio>

#include <tinyformer/tinyformer.h>

int main() {
  using namespace tinyformer;
  float* stale = nullptr;
  {
    Tensor t = zeros({256});
    stale = t.data<float>();
  }
  // The block went back to the allocator above; this read must be reported.
  std::printf("read %f after free\n", static_cast<double>(stale[7]));
  return 0;
}
