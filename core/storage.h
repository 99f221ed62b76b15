// Storage: one allocation of bytes on a device, shared by every tensor that views it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace tinyformer {

class Allocator;

class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // The version counter, shared by every view of this storage: bumped by each change of the
  // elements in place (Tensor::bump_version), so that a backward can tell that a tensor it saved
  // has changed since the forward.
  std::uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::atomic<std::uint64_t> version_{0};
};

}  // namespace tinyformer
