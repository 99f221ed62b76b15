// The reference backend: every primitive op of core/ops.def as plain loops in double precision
// on CPU memory, written to be read. It is the first code to open for an op's meaning, and the
// one source of expected values in the backend-parity tests of every other backend.
#pragma once

#include "core/backend.h"

namespace tinyformer {

namespace reference {

// One op family per file (elementwise.cpp, reduce.cpp, matmul.cpp, ...); each opens with the
// math and the shapes. Tensors live on Device::cpu(); any strides are read and written through
// shape, strides and offset. Arguments are checked with core/op_checks.h, as the CPU backend
// checks them, so bad input throws tinyformer::Error.
class ReferenceBackend final : public Backend {
 public:
  const char* name() const override { return "reference"; }
  DeviceType device_type() const override { return DeviceType::cpu; }
  bool supports(Op op, DType dtype) const override;
  std::string runtime_info() override;
  Allocator& allocator() override;
  void synchronize() override {}
  void memcpy(void* dst, Device dst_device, const void* src, Device src_device,
              std::size_t bytes) override;

#define TF_OP(name, params, args) void name params override;
#include "core/ops.def"
#undef TF_OP
};

}  // namespace reference

// The process's one ReferenceBackend.
Backend& reference_backend();

}  // namespace tinyformer
