// The caching device allocator. cudaMalloc and cudaFree cost tens of microseconds to
// milliseconds each, and cudaFree waits for the whole device, so freed blocks are kept in size
// classes (per device) and handed out again; the cache goes back to the driver only when a
// cudaMalloc runs out of memory or the user calls empty_cache().
//
// Why a freed block can be reused at once, with no event or stream wait: every kernel, library
// call and device-to-device copy of this backend is queued on the one stream of its device
// (cuda_backend.h, "Synchronisation"). A block is freed on the host when its last tensor dies,
// possibly while kernels that read or write it are still queued; whatever the next owner of the
// block queues goes on the same stream behind those kernels, so the device runs them first and
// the new owner never sees the block while the old work is using it. (This would no longer hold
// if work were queued on a second stream: such a block would need an event recorded on it.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "core/error.h"

namespace tinyformer::cuda {

namespace {

// Size classes: multiples of 512 bytes up to 1 MiB (small tensors: biases, norms, scalars), then
// multiples of 2 MiB (activations, weights). The waste is below 512 bytes or 2 MiB per block,
// and a block of a class serves any later request of the same class.
constexpr std::size_t kSmallGranularity = 512;
constexpr std::size_t kSmallLimit = std::size_t{1} << 20;
constexpr std::size_t kLargeGranularity = std::size_t{2} << 20;
// Above this a request cannot be rounded without overflowing; no GPU has that much memory.
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

std::size_t size_class(std::size_t bytes) {
  if (bytes <= kSmallLimit) {
    return std::max<std::size_t>(1, (bytes + kSmallGranularity - 1) / kSmallGranularity) *
           kSmallGranularity;
  }
  return (bytes + kLargeGranularity - 1) / kLargeGranularity * kLargeGranularity;
}

int current_device() {
  int device = 0;
  TF_CUDA_CHECK("allocate", cudaGetDevice(&device));
  return device;
}

class CachingDeviceAllocator final : public Allocator {
 public:
  // cudaMalloc returns 256-byte aligned pointers, more than the 64 the interface promises.
  void* allocate(std::size_t bytes) override {
    const int device = current_device();
    std::lock_guard lock(mutex_);
    if (bytes > kMaxRequest) out_of_memory(bytes, device);
    const std::size_t cls = size_class(bytes);
    void* ptr = nullptr;
    auto& blocks = free_[{device, cls}];
    if (!blocks.empty()) {
      ptr = blocks.back();
      blocks.pop_back();
      cached_ -= static_cast<std::int64_t>(cls);
    } else {
      ptr = malloc_or_null(cls);
      if (ptr == nullptr) {
        // Out of memory: blocks cached in other classes may be what is missing. Give the cache
        // back to the driver and retry once.
        release_cache_locked();
        ptr = malloc_or_null(cls);
      }
      if (ptr == nullptr) out_of_memory(bytes, device);
    }
    live_[ptr] = {device, cls};
    stats_.current_bytes += static_cast<std::int64_t>(bytes);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    ++stats_.allocation_count;
    return ptr;
  }

  // Never calls into CUDA: tensors held in static storage may be freed after the driver has
  // shut down at exit, and the cache is simply abandoned then.
  void deallocate(void* ptr, std::size_t bytes) override {
    if (ptr == nullptr) return;
    std::lock_guard lock(mutex_);
    const auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours; nothing sensible to do in a destructor
    const Block block = it->second;
    live_.erase(it);
    stats_.current_bytes -= static_cast<std::int64_t>(bytes);
    free_[{block.device, block.cls}].push_back(ptr);
    cached_ += static_cast<std::int64_t>(block.cls);
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
    std::lock_guard lock(mutex_);
    release_cache_locked();
  }

 private:
  struct Block {
    int device = 0;
    std::size_t cls = 0;
  };

  // cudaMalloc's result, or null when the device is out of memory (any other failure throws).
  static void* malloc_or_null(std::size_t bytes) {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clears the error so that the next launch check does not see it
      return nullptr;
    }
    TF_CUDA_CHECK("allocate", status);
    return ptr;
  }

  // Frees every cached block. Work still queued on a device may use a cached block (freed on
  // the host, not yet on the device), so each device's stream is drained first.
  void release_cache_locked() {
    if (cached_ == 0) return;
    const int previous = current_device();
    for (auto& [key, blocks] : free_) {
      if (blocks.empty()) continue;
      TF_CUDA_CHECK("empty_cache", cudaSetDevice(key.first));
      TF_CUDA_CHECK("empty_cache", cudaStreamSynchronize(stream()));
      for (void* p : blocks) TF_CUDA_CHECK("empty_cache", cudaFree(p));
      cached_ -= static_cast<std::int64_t>(key.second * blocks.size());
      blocks.clear();
    }
    TF_CUDA_CHECK("empty_cache", cudaSetDevice(previous));
  }

  [[noreturn]] void out_of_memory(std::size_t bytes, int device) const {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
    throw OutOfMemory(detail::concat("cuda: out of memory allocating ", bytes, " bytes (",
                                     free_bytes, " bytes free of ", total_bytes, " on GPU ", device,
                                     "; ", stats_.current_bytes,
                                     " bytes held by tinyformer tensors, ", cached_, " cached)"));
  }

  mutable std::mutex mutex_;
  // Free blocks by (device, size class), and the device and class of every block handed out.
  std::map<std::pair<int, std::size_t>, std::vector<void*>> free_;
  std::unordered_map<void*, Block> live_;
  MemoryStats stats_;
  std::int64_t cached_ = 0;
};

}  // namespace

Allocator& device_allocator() {
  // Never destroyed, like the host allocator: tensors in static storage may be freed after main
  // returns.
  static auto* allocator = new CachingDeviceAllocator();
  return *allocator;
}

Allocator& CudaBackend::allocator() {
  return device_allocator();
}

}  // namespace tinyformer::cuda
