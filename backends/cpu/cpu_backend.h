// The CPU backend: OpenBLAS and oneDNN for the heavy primitives, OpenMP loops for the rest.
// Each op family is defined in the file of its name (unary.cpp, matmul.cpp, ...).
#pragma once

#include "core/backend.h"

namespace tinyformer::cpu {

class CpuBackend final : public Backend {
 public:
  // Reads the parallel grain's configuration (parallel.h).
  CpuBackend();
  const char* name() const override { return "cpu"; }
  std::string runtime_info() override;
  Allocator& allocator() override;
  void synchronize() override {}
  void memcpy(void* dst, Device dst_device, const void* src, Device src_device,
              std::size_t bytes) override;
  DeviceType device_type() const override { return DeviceType::cpu; }
  bool supports(Op op, DType dtype) const override;

#define TF_OP(name, params, args) void name params override;
#include "core/ops.def"
#undef TF_OP
};

// The one CpuBackend, created on first use; registered as the primary backend of CPU tensors
// (backends/cpu/runtime.cpp).
CpuBackend& instance();

// The caching host allocator (backends/cpu/allocator.cpp).
Allocator& host_allocator();

// A description of the kernels this process runs: the OpenBLAS core and threading, the oneDNN
// version and ISA, the OpenMP thread count. Benchmarks print it.
std::string runtime_info();

}  // namespace tinyformer::cpu
