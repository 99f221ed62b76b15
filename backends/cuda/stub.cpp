// The CUDA entry points of a build without the CUDA backend: every use throws a clear Error.
#include "core/backend.h"

namespace tinyformer {

Backend& cuda_backend() {
  fail(
      "cuda: this build has no CUDA backend (configure with -DTINYFORMER_CUDA=ON where the CUDA "
      "Toolkit is installed)");
}

bool cuda_available() {
  return false;
}

}  // namespace tinyformer
