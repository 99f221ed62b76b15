// The CPU backend's oneDNN state: one engine, one stream, a bounded cache of primitives, and the
// glue that describes a tinyformer Tensor (shape, strides, dtype) to oneDNN without copying it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <dnnl.hpp>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace tinyformer::cpu {

// Created once, on first use. oneDNN's CPU stream executes synchronously on the calling thread
// (work is spread over the OpenMP pool inside the primitive), so one of each serves every thread.
dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();

// Whether oneDNN runs its AVX-512 kernels here (its effective ISA avx512_core or better): the CPU
// and OS have them and DNNL_MAX_CPU_ISA does not cap them. Computed once.
bool dnnl_runs_avx512();

// Whether oneDNN's effective ISA is avx512_core_amx (the CPU has AMX tiles, and DNNL_MAX_CPU_ISA
// does not cap them). Computed once.
bool dnnl_runs_amx();

// oneDNN's element type for a tinyformer dtype; throws naming `op` for float64, int64 and bool,
// which oneDNN has no kernels for (callers route those to their loop paths first).
dnnl::memory::data_type dnnl_type(DType dtype, const char* op);

// A plain memory descriptor with exactly these dims and strides (in elements). oneDNN accepts
// arbitrary strides, so a transposed view is described as it is, with no copy.
dnnl::memory::desc dnnl_desc(const Shape& dims, const Shape& strides, DType dtype, const char* op);
inline dnnl::memory::desc dnnl_desc(const Tensor& t, const char* op) {
  return dnnl_desc(t.shape(), t.strides(), t.dtype(), op);
}
// A oneDNN memory object over the tensor's own data (no copy).
dnnl::memory dnnl_memory(const dnnl::memory::desc& desc, const Tensor& t);

// What a cached primitive is looked up by: the op and every integer its creation depends on
// (shapes, strides, dtypes, flags, attributes). Two keys are equal only if all of these are.
class PrimitiveKey {
 public:
  explicit PrimitiveKey(std::string op) : op_(std::move(op)) {}
  PrimitiveKey& add(std::int64_t value) {
    values_.push_back(value);
    return *this;
  }
  PrimitiveKey& add(const Shape& values);  // length first, so [2, 3] + [4] != [2] + [3, 4]
  PrimitiveKey& add(const Tensor& t);      // shape, strides and dtype; undefined adds a marker
  bool operator==(const PrimitiveKey&) const = default;
  std::size_t hash() const;
  const std::string& op() const { return op_; }

 private:
  std::string op_;
  std::vector<std::int64_t> values_;
};

// A ready primitive and its descriptor (for the scratchpad and workspace sizes).
struct CachedPrimitive {
  dnnl::primitive primitive;
  dnnl::primitive_desc_base pd;
};

// How many threads a product of `work` multiply-adds runs on: all of OpenMP's, or 1 below
// kDnnlParallelWork. Waking the team costs microseconds, more than a small product takes, and on
// a busy machine a team barrier can wait milliseconds for a descheduled thread. The threshold is
// a constant, not parallel.h's grain (which follows the wait policy, for the passes around the
// products): oneDNN sizes some products' thread split when they are created (gemm-based matmul
// does), and a split can change the order of a sum. Primitives that are passes over their
// elements (layer norm, softmax) take pass_threads().
inline constexpr std::int64_t kDnnlParallelWork = std::int64_t{1} << 18;
int dnnl_threads(std::int64_t work);

// The primitive cached under `key` (plus `threads`, the count it runs on), created with `make` on a
// miss. Creating a primitive descriptor costs tens of microseconds to milliseconds (oneDNN walks
// its implementation list and may generate code), more than executing a small one, so each shape
// is made once. Thread-safe; holds at most dnnl_cache_capacity() entries and evicts the least
// recently used.
CachedPrimitive cached_primitive(PrimitiveKey key, const std::function<CachedPrimitive()>& make,
                                 int threads);

struct DnnlCacheStats {
  std::int64_t hits = 0;
  std::int64_t misses = 0;
  std::int64_t size = 0;
  std::int64_t capacity = 0;
};
DnnlCacheStats dnnl_cache_stats();
std::int64_t dnnl_cache_capacity();

// Attributes for every primitive we create: the scratchpad is ours (user mode), taken from the
// caching host allocator at each execution. That keeps a cached primitive safe to run from any
// thread, and its temporary memory visible in memory_stats().
dnnl::primitive_attr dnnl_attr();

// Runs `p` with `args` on the stream on `threads` threads (those it was cached with), adding a
// scratchpad when the
// primitive needs one, and waits for it. oneDNN errors come back as tinyformer::Error naming `op`.
void dnnl_execute(const CachedPrimitive& p, std::unordered_map<int, dnnl::memory> args,
                  const char* op, int threads);

// Converts a dnnl::error into a tinyformer::Error naming `op` (for use in catch blocks).
[[noreturn]] void rethrow_dnnl(const dnnl::error& e, const char* op);

}  // namespace tinyformer::cpu
