// Backend: the interface each device implements (backends/cpu, backends/cuda), one virtual per
// primitive op of core/ops.def. core/ declares it and knows no concrete backend: the functions
// cpu_backend() and cuda_backend() are defined by the backend libraries the program links (a
// build without CUDA links a stub whose every entry throws).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace tinyformer {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // The libraries, kernels and threads this backend runs with (benchmarks print it).
  virtual std::string runtime_info() = 0;
  virtual Allocator& allocator() = 0;
  // Waits until all queued work on the device has finished.
  virtual void synchronize() = 0;
  // Copies bytes between host memory and this backend's memory (either side may be the host).
  virtual void memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                      std::size_t bytes) = 0;

#define TF_OP(name, params, args) virtual void name params = 0;
#include "core/ops.def"
#undef TF_OP
};

Backend& cpu_backend();   // defined in backends/cpu
Backend& cuda_backend();  // defined in backends/cuda (or its stub)
bool cuda_available();    // defined in backends/cuda (or its stub): false without a GPU

// The backend that owns tensors on `device`.
Backend& backend(Device device);
// backend(device).runtime_info(): e.g. the OpenBLAS core, oneDNN ISA and thread count, or the
// GPU and library versions.
std::string runtime_info(Device device = Device::cpu());

// How float32 matrix products and convolutions may round their inputs where a device has
// reduced-precision units: not at all (the default), to TF32, or to bfloat16, accumulating in
// float32 either way. The GPU uses its tensor cores for both. The CPU rounds matrix products'
// operands to bfloat16 under bf16 where oneDNN has bfloat16 kernels for it (AVX-512 BF16, AMX;
// runtime_info says), and otherwise computes float32 exactly. Products of bfloat16 tensors are
// bfloat16 products whatever this says.
enum class MatmulPrecision { exact, tf32, bf16 };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();

}  // namespace tinyformer
