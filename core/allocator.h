// The allocator interface every device implements, with the memory statistics users read.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tinyformer {

// Bytes held by live tensors (current, and the peak since the last reset), the number of
// allocations served, and bytes kept in the cache for reuse. The Linformer memory claims are
// measured with these.
struct MemoryStats {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t allocation_count = 0;
  std::int64_t cached_bytes = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns at least `bytes` bytes, 64-byte aligned; throws Error when memory runs out.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Returns cached blocks to the system.
  virtual void empty_cache() = 0;
};

MemoryStats memory_stats(Device device = Device::cpu());
// Waits until all work queued on `device` has finished (a no-op on the CPU). Reading a tensor
// (item, to_vector, printing) synchronises by itself; timing code calls this explicitly.
void synchronize(Device device = Device::cpu());
void reset_peak_memory(Device device = Device::cpu());
void empty_cache(Device device = Device::cpu());

}  // namespace tinyformer
