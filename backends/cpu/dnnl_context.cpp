// The oneDNN engine, stream and primitive cache of the CPU backend (see dnnl_context.h).
#include "backends/cpu/dnnl_context.h"

#include <omp.h>

#include <list>
#include <mutex>
#include <utility>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"

namespace tinyformer::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  static dnnl::stream stream(dnnl_engine());
  return stream;
}

dnnl::memory::data_type dnnl_type(DType dtype, const char* op) {
  TF_CHECK(dtype == DType::float32, op, ": the oneDNN path takes float32, got ", dtype);
  return dnnl::memory::data_type::f32;
}

dnnl::memory::desc dnnl_desc(const Shape& dims, const Shape& strides, DType dtype, const char* op) {
  TF_CHECK(dims.size() == strides.size() && !dims.empty() &&
               dims.size() <= static_cast<std::size_t>(DNNL_MAX_NDIMS),
           op, ": cannot describe shape ", shape_str(dims), " with strides ", shape_str(strides),
           " to oneDNN");
  try {
    return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dnnl_type(dtype, op),
                              dnnl::memory::dims(strides.begin(), strides.end()));
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, op);
  }
}

dnnl::memory dnnl_memory(const dnnl::memory::desc& desc, const Tensor& t) {
  return dnnl::memory(desc, dnnl_engine(), t.data_ptr());
}

PrimitiveKey& PrimitiveKey::add(const Shape& values) {
  values_.push_back(static_cast<std::int64_t>(values.size()));
  values_.insert(values_.end(), values.begin(), values.end());
  return *this;
}

PrimitiveKey& PrimitiveKey::add(const Tensor& t) {
  if (!t.defined()) return add(-1);
  add(static_cast<std::int64_t>(t.dtype()));
  add(t.shape());
  return add(t.strides());
}

std::size_t PrimitiveKey::hash() const {
  std::size_t h = std::hash<std::string>{}(op_);
  for (std::int64_t v : values_) {
    h ^= std::hash<std::int64_t>{}(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return h;
}

namespace {

struct KeyHash {
  std::size_t operator()(const PrimitiveKey& k) const { return k.hash(); }
};

// Enough for every shape of a training run (a model has a few dozen distinct primitives per
// step); a program that sweeps sizes evicts old ones instead of growing without bound. oneDNN
// keeps its own cache of generated code as well, so a re-created primitive is cheaper than a
// first one.
constexpr std::int64_t kCapacity = 512;

class PrimitiveCache {
 public:
  CachedPrimitive get(const PrimitiveKey& key, const std::function<CachedPrimitive()>& make) {
    {
      std::lock_guard lock(mutex_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        ++stats_.hits;
        lru_.splice(lru_.begin(), lru_, it->second);  // most recently used goes first
        return it->second->second;
      }
      ++stats_.misses;
    }
    // Created outside the lock: creation can take milliseconds, and other threads should keep
    // finding their primitives meanwhile. If two threads race on one key, the first insert wins.
    CachedPrimitive made = make();
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    lru_.emplace_front(key, made);
    index_.emplace(key, lru_.begin());
    if (static_cast<std::int64_t>(lru_.size()) > kCapacity) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return made;
  }

  DnnlCacheStats stats() const {
    std::lock_guard lock(mutex_);
    DnnlCacheStats s = stats_;
    s.size = static_cast<std::int64_t>(lru_.size());
    s.capacity = kCapacity;
    return s;
  }

 private:
  using Entry = std::pair<PrimitiveKey, CachedPrimitive>;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;
  std::unordered_map<PrimitiveKey, std::list<Entry>::iterator, KeyHash> index_;
  DnnlCacheStats stats_;
};

PrimitiveCache& cache() {
  // Never destroyed: primitives must not be released after oneDNN's own globals at exit.
  static auto* c = new PrimitiveCache();
  return *c;
}

// A scratchpad from the host allocator, returned when the execution is done.
class HostBuffer {
 public:
  explicit HostBuffer(std::size_t bytes)
      : bytes_(bytes), ptr_(bytes > 0 ? host_allocator().allocate(bytes) : nullptr) {}
  ~HostBuffer() { host_allocator().deallocate(ptr_, bytes_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  std::size_t bytes_;
  void* ptr_;
};

}  // namespace

int dnnl_threads(std::int64_t work) {
  return work < kDnnlParallelWork ? 1 : omp_get_max_threads();
}

namespace {
// Sets this thread's OpenMP team size (which oneDNN reads) for a scope, restoring it on every
// way out.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : saved_(omp_get_max_threads()), changed_(threads != saved_) {
    if (changed_) omp_set_num_threads(threads);
  }
  ~ThreadScope() {
    if (changed_) omp_set_num_threads(saved_);
  }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
  bool changed_;
};
}  // namespace

CachedPrimitive cached_primitive(PrimitiveKey key, const std::function<CachedPrimitive()>& make,
                                 int threads) {
  key.add(threads);
  try {
    return cache().get(key, [&] {
      ThreadScope scope(threads);
      return make();
    });
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, key.op().c_str());
  }
}

DnnlCacheStats dnnl_cache_stats() {
  return cache().stats();
}
std::int64_t dnnl_cache_capacity() {
  return kCapacity;
}

dnnl::primitive_attr dnnl_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void dnnl_execute(const CachedPrimitive& p, std::unordered_map<int, dnnl::memory> args,
                  const char* op, int threads) {
  ThreadScope scope(threads);
  try {
    const dnnl::memory::desc scratch_desc = p.pd.scratchpad_desc();
    HostBuffer scratch(scratch_desc.get_size());
    if (scratch.get() != nullptr) {
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch_desc, dnnl_engine(), scratch.get()));
    }
    p.primitive.execute(dnnl_stream(), args);
    dnnl_stream().wait();
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, op);
  }
}

void rethrow_dnnl(const dnnl::error& e, const char* op) {
  fail(op, ": oneDNN failed: ", e.what(), " (status ", static_cast<int>(e.status), ")");
}

bool dnnl_runs_avx512() {
  static const bool yes = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
           isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return yes;
}

bool dnnl_runs_amx() {
  static const bool yes = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  return yes;
}

}  // namespace tinyformer::cpu
