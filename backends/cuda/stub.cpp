// The CUDA backend of a build without it: registered for CUDA tensors like the real one, so that
// asking for a GPU tensor gives a clear Error, and reporting no device.
#include <string>

#include "core/backend.h"
#include "core/error.h"

namespace tinyformer {

namespace {

Backend& no_cuda_backend() {
  fail(
      "cuda: this build has no CUDA backend (configure with -DTINYFORMER_CUDA=ON where the CUDA "
      "Toolkit is installed)");
}

bool no_gpu() {
  return false;
}

const BackendRegistrar registrar({.name = "cuda",
                                  .device = DeviceType::cuda,
                                  .get = &no_cuda_backend,
                                  .primary = true,
                                  .available = &no_gpu});

}  // namespace

}  // namespace tinyformer

// Named on the link line of a static build (CMakeLists.txt): nothing else refers to this file,
// and without it the linker would leave out the registrar above and the backend with it.
extern "C" void tinyformer_backend_cuda_registered() {}
