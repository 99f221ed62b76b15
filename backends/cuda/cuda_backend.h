// The CUDA backend: cuBLAS for matrix products, cuDNN for convolution and pooling, our own
// kernels for the rest. Each op family is defined in the file of its name, mirroring
// backends/cpu/ (unary.cu, matmul.cpp, ...). Everything runs on one stream per device; see
// "Synchronisation" below.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "core/backend.h"

namespace tinyformer::cuda {

// Synchronisation: every kernel and library call of this backend is queued on stream() of the
// current device, so work runs in issue order and no op waits for the one before it. The host
// waits only where it must: memcpy() between host and device memory (Tensor::item, to_vector,
// printing, checkpoints, to(Device::cpu())), synchronize() (timing code,
// tinyformer::synchronize), and the ops that must report bad input found on the device, which
// read back a flag right after their kernel: an index out of range (index_select, index_add), a
// target out of range (nll_loss, nll_loss_backward) and an integer division by zero (binary on
// int64).
class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  std::string runtime_info() override;
  Allocator& allocator() override;
  void synchronize() override;
  void memcpy(void* dst, Device dst_device, const void* src, Device src_device,
              std::size_t bytes) override;
  DeviceType device_type() const override { return DeviceType::cuda; }
  bool supports(Op op, DType dtype) const override;
  // NCCL (backends/cuda/collectives.cpp), queued on stream().
  std::vector<std::uint8_t> communicator_id() override;
  std::unique_ptr<DeviceCommunicator> communicator(const std::vector<std::uint8_t>& id, int rank,
                                                   int size, Device device) override;

#define TF_OP(name, params, args) void name params override;
#include "core/ops.def"
#undef TF_OP
};

// The one CudaBackend, created on first use; registered as the primary backend of CUDA tensors
// (backends/cuda/runtime.cpp), which makes sure a GPU is present before handing it out.
CudaBackend& instance();

// The stream, cuBLAS handle and cuDNN handle of the current device (backends/cuda/runtime.cpp),
// created on first use. The handles are bound to stream().
cudaStream_t stream();
cublasHandle_t cublas();
cudnnHandle_t cudnn();

// The caching device allocator (backends/cuda/allocator.cpp).
Allocator& device_allocator();

// The GPU, driver and library versions this process runs on, for benchmarks to print.
std::string runtime_info();

}  // namespace tinyformer::cuda
