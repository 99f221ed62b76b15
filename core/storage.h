// Storage: one allocation of bytes on a device, shared by every tensor that views it.
#pragma once

#include <cstddef>
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

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
};

}  // namespace tinyformer
