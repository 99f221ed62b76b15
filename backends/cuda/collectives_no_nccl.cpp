// The CUDA backend's collectives in a build that found no NCCL: asking for them says so.
#include <memory>
#include <vector>

#include "backends/cuda/cuda_backend.h"

namespace tinyformer::cuda {

std::vector<std::uint8_t> CudaBackend::communicator_id() {
  fail(
      "communicator_id: this build of the CUDA backend has no NCCL (install NCCL next to the "
      "CUDA Toolkit and configure again) ");
}

std::unique_ptr<DeviceCommunicator> CudaBackend::communicator(const std::vector<std::uint8_t>&, int,
                                                              int, Device) {
  fail(
      "communicator: this build of the CUDA backend has no NCCL (install NCCL next to the CUDA "
      "Toolkit and configure again)");
}

}  // namespace tinyformer::cuda
