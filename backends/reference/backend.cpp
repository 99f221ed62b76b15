// The reference backend's plumbing: its name, a plain heap allocator, and the process's one
// instance. The ops are in the files named after their families.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "backends/reference/reference_backend.h"

namespace tinyformer {

namespace reference {

namespace {

// new/delete with statistics; no caching (the reference backend is not about speed).
class PlainAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = ::operator new(bytes == 0 ? 1 : bytes);
    std::lock_guard lock(mutex_);
    stats_.current_bytes += static_cast<std::int64_t>(bytes);
    stats_.allocation_count += 1;
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) override {
    ::operator delete(ptr);
    std::lock_guard lock(mutex_);
    stats_.current_bytes -= static_cast<std::int64_t>(bytes);
  }
  MemoryStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard lock(mutex_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache() override {}

 private:
  mutable std::mutex mutex_;
  MemoryStats stats_;
};

}  // namespace

std::string ReferenceBackend::runtime_info() {
  return "reference: plain loops in double precision, one thread";
}

Allocator& ReferenceBackend::allocator() {
  static PlainAllocator allocator;
  return allocator;
}

// The dtypes the CPU backend takes, so that the two reject the same calls; where the CPU runs
// bfloat16 (matrix products) the reference reads it too, widened to double.
bool ReferenceBackend::supports(Op op, DType dtype) const {
  const bool f32_f64 = dtype == DType::float32 || dtype == DType::float64;
  switch (op) {
    case Op::fill:
    case Op::copy:
    case Op::random:
      return true;
    case Op::arange:
      return dtype != DType::boolean;
    case Op::unary:
    case Op::reduce:
    case Op::max_dim:
      return f32_f64 || dtype == DType::int64;
    case Op::binary:
    case Op::where:
    case Op::index_select:
      return dtype != DType::bfloat16;
    case Op::matmul:
      return f32_f64 || dtype == DType::bfloat16;
    case Op::unary_backward:
    case Op::softmax:
    case Op::softmax_backward:
    case Op::layer_norm:
    case Op::layer_norm_backward:
    case Op::nll_loss:
    case Op::nll_loss_backward:
    case Op::conv1d:
    case Op::conv1d_backward:
    case Op::pool1d:
    case Op::pool1d_backward:
    case Op::index_add:
    case Op::adamw_step:
      return f32_f64;
  }
  return false;
}

void ReferenceBackend::memcpy(void* dst, Device, const void* src, Device, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

}  // namespace reference

Backend& reference_backend() {
  static reference::ReferenceBackend instance;
  return instance;
}

namespace {

// Registered under "reference" for CPU tensors, but not as their primary backend: the tests
// and anyone curious reach it through find_backend("reference"); ops on CPU tensors go to the
// CPU backend.
const BackendRegistrar registrar({.name = "reference",
                                  .device = DeviceType::cpu,
                                  .get = &reference_backend,
                                  .primary = false,
                                  .available = nullptr});

}  // namespace

}  // namespace tinyformer

// Named on the link line of a static build (CMakeLists.txt), so that the linker keeps this file
// and the registrar above.
extern "C" void tinyformer_backend_reference_registered() {}
