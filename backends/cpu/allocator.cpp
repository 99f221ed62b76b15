// The caching host allocator. Fresh pages cost a page fault each on first touch, several times
// the cost of writing resident memory, so freed blocks are kept in size classes and handed out
// again instead of going back to the system. Large blocks ask the kernel for transparent huge
// pages.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"

// AddressSanitizer builds: GCC defines __SANITIZE_ADDRESS__, clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define TINYFORMER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TINYFORMER_ASAN 1
#endif
#endif
#ifndef TINYFORMER_ASAN
#define TINYFORMER_ASAN 0
#endif

namespace tinyformer::cpu {

namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Size classes: powers of two below 1 MiB, multiples of 2 MiB above (bounded waste either way;
// a multiple of the huge-page size, as aligned_alloc requires for that alignment).
std::size_t size_class(std::size_t bytes) {
  if (bytes <= kAlignment) return kAlignment;
  if (bytes < (std::size_t{1} << 20)) {
    std::size_t c = kAlignment;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + kHugePage - 1) / kHugePage * kHugePage;
}

class CachingHostAllocator final : public Allocator {
 public:
  ~CachingHostAllocator() override { release_cache(); }

  void* allocate(std::size_t bytes) override {
    const std::size_t cls = size_class(bytes);
    std::lock_guard lock(mutex_);
    void* ptr = nullptr;
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      cached_ -= static_cast<std::int64_t>(cls);
    } else {
      ptr = std::aligned_alloc(cls >= kHugePage ? kHugePage : kAlignment, cls);
      if (ptr == nullptr) {
        release_cache_locked();
        ptr = std::aligned_alloc(cls >= kHugePage ? kHugePage : kAlignment, cls);
      }
      if (ptr == nullptr) {
        throw OutOfMemory(detail::concat("allocate: out of host memory asking for ", bytes,
                                         " bytes (", stats_.current_bytes, " bytes in use)"));
      }
      if (cls >= kHugePage) madvise(ptr, cls, MADV_HUGEPAGE);
    }
    stats_.current_bytes += static_cast<std::int64_t>(bytes);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    ++stats_.allocation_count;
    return ptr;
  }

  void deallocate(void* ptr, std::size_t bytes) override {
    if (ptr == nullptr) return;
    std::lock_guard lock(mutex_);
    stats_.current_bytes -= static_cast<std::int64_t>(bytes);
#if TINYFORMER_ASAN
    std::free(ptr);  // under AddressSanitizer a reused block would hide use-after-free bugs
#else
    const std::size_t cls = size_class(bytes);
    free_[cls].push_back(ptr);
    cached_ += static_cast<std::int64_t>(cls);
#endif
  }

  MemoryStats stats() const override {
    std::lock_guard lock(mutex_);
    MemoryStats s = stats_;
    s.cached_bytes = cached_;
    return s;
  }

  void reset_peak() override {
    std::lock_guard lock(mutex_);
    stats_.peak_bytes = stats_.current_bytes;
  }

  void empty_cache() override {
    release_cache();
  }

 private:
  void release_cache() {
    std::lock_guard lock(mutex_);
    release_cache_locked();
  }
  void release_cache_locked() {
    for (auto& [cls, blocks] : free_) {
      for (void* p : blocks) std::free(p);
      blocks.clear();
    }
    cached_ = 0;
  }

  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;
  MemoryStats stats_;
  std::int64_t cached_ = 0;
};

}  // namespace

Allocator& host_allocator() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static auto* allocator = new CachingHostAllocator();
  return *allocator;
}

Allocator& CpuBackend::allocator() {
  return host_allocator();
}

void CpuBackend::memcpy(void* dst, Device, const void* src, Device, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

}  // namespace tinyformer::cpu
