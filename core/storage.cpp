// Storage allocation through the device's allocator, memory statistics and the settings every
// backend reads.
#include "core/storage.h"

#include "core/backend.h"

#include <atomic>

#include "core/profiler.h"
#include "core/random.h"

namespace tinyformer {

Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = &backend(device).allocator();
  data_ = allocator_->allocate(nbytes);
}

Storage::~Storage() {
  allocator_->deallocate(data_, nbytes_);
}

void synchronize(Device device) {
  backend(device).synchronize();
}

namespace {
std::atomic<MatmulPrecision> g_matmul_precision{MatmulPrecision::exact};
}  // namespace

void set_matmul_precision(MatmulPrecision precision) {
  g_matmul_precision = precision;
}
MatmulPrecision matmul_precision() {
  return g_matmul_precision;
}

std::string runtime_info(Device device) {
  return backend(device).runtime_info();
}

MemoryStats memory_stats(Device device) {
  return backend(device).allocator().stats();
}
void reset_peak_memory(Device device) {
  backend(device).allocator().reset_peak();
}
void empty_cache(Device device) {
  backend(device).allocator().empty_cache();
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(std::uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace tinyformer
