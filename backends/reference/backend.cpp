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

// Every dtype the loops can read and write (all of them go through double), by what each op
// means: floating-only math, integer-or-floating arithmetic, and data movement for any dtype.
bool ReferenceBackend::supports(Op op, DType dtype) const {
  switch (op) {
    case Op::fill:
    case Op::copy:
    case Op::random:  // normal and uniform check for a floating dtype themselves
    case Op::binary:
    case Op::where:
    case Op::index_select:
      return true;
    case Op::arange:
      return dtype != DType::boolean;
    case Op::unary:
    case Op::reduce:
    case Op::max_dim:
      return is_floating(dtype) || dtype == DType::int64;
    case Op::attention:
    case Op::attention_backward:
    case Op::flash_attention:
    case Op::flash_attention_backward:
      return dtype == DType::float32 || dtype == DType::float64;
    default:
      return is_floating(dtype);
  }
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
