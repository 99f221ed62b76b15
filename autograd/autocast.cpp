// The autocast state, the cache of parameter copies, and the casts the ops' entries call.
#include "autograd/autocast.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/layout.h"
#include "autograd/node.h"
#include "autograd/shape_ops.h"
#include "core/error.h"

namespace tinyformer {

// Activations rounded under one guard, by the storage and layout they were read from (the query,
// key and value projections each read a new view of the same input). An entry holds both
// storages weakly: the products that read the copy keep it alive (they save it for backward), and
// once none does, or the source is gone, the next product rounds again. Activations are not
// written in place, so a live source read with the same layout has the same values.
struct AutocastCasts {
  struct Entry {
    std::weak_ptr<Storage> source;
    std::int64_t offset = 0;
    Shape shape, strides;
    std::weak_ptr<Storage> copy;
    std::int64_t copy_offset = 0;
    Shape copy_strides;
  };
  std::unordered_map<const Storage*, std::vector<Entry>> entries;
};

namespace {
thread_local std::optional<DType> current_dtype;
thread_local const AutocastCache* current_cache = nullptr;
thread_local AutocastCasts* current_casts = nullptr;

// `t` in `dtype` (converted_in_memory_order): the copy made earlier under this guard while both
// are alive, else a new one, remembered.
Tensor rounded_activation(const Tensor& t, DType dtype) {
  if (current_casts == nullptr) return converted_in_memory_order(t, dtype);
  auto& by_storage = current_casts->entries;
  if (by_storage.size() > 4096) {  // a guard held over many steps: forget what is gone
    std::erase_if(by_storage, [](const auto& kv) {
      return std::all_of(kv.second.begin(), kv.second.end(),
                         [](const AutocastCasts::Entry& e) { return e.copy.expired(); });
    });
  }
  std::vector<AutocastCasts::Entry>& entries = by_storage[t.storage().get()];
  for (auto it = entries.begin(); it != entries.end();) {
    const std::shared_ptr<Storage> source = it->source.lock();
    std::shared_ptr<Storage> copy = it->copy.lock();
    if (source != t.storage() || !copy) {
      it = entries.erase(it);  // gone, or another storage at the same address
      continue;
    }
    if (it->offset == t.offset() && it->shape == t.shape() && it->strides == t.strides()) {
      auto impl = std::make_shared<TensorImpl>();
      impl->storage = std::move(copy);
      impl->shape = t.shape();
      impl->strides = it->copy_strides;
      impl->offset = it->copy_offset;
      impl->dtype = dtype;
      return Tensor(std::move(impl));
    }
    ++it;
  }
  Tensor result = converted_in_memory_order(t, dtype);
  entries.push_back({.source = t.storage(),
                     .offset = t.offset(),
                     .shape = t.shape(),
                     .strides = t.strides(),
                     .copy = result.storage(),
                     .copy_offset = result.offset(),
                     .copy_strides = result.strides()});
  return result;
}
}  // namespace

AutocastCache::AutocastCache(DType dtype) : dtype_(dtype) {
  TF_CHECK(dtype == DType::bfloat16, "AutocastCache: expected bfloat16 copies, got ", dtype);
}

void AutocastCache::add(const Tensor& master) {
  TF_CHECK(master.defined() && master.dtype() == DType::float32 && master.is_contiguous(),
           "AutocastCache: expected a contiguous float32 tensor, got ",
           master.defined() ? dtype_name(master.dtype()) : "an undefined Tensor");
  for (const Entry& e : entries_) {
    if (e.master.is_same(master)) return;
  }
  entries_.push_back({.master = master, .copy = Tensor(), .storage = nullptr});
}

void AutocastCache::refresh() {
  const NoGradGuard no_grad;
  for (Entry& e : entries_) {
    e.copy = raw::to_dtype(e.master, dtype_);
    e.storage = e.master.storage();
    conversions_ += 1;
  }
}

Tensor AutocastCache::lookup(const Tensor& operand) const {
  if (!operand.defined() || operand.dtype() != DType::float32 || operand.numel() == 0) {
    return Tensor();
  }
  for (const Entry& e : entries_) {
    if (!e.copy.defined() || operand.storage() != e.storage || e.master.storage() != e.storage ||
        operand.device() != e.copy.device()) {
      continue;
    }
    // The operand's elements, as offsets into the master, must all lie inside it.
    std::int64_t first = operand.offset() - e.master.offset(), last = first;
    bool inside = first >= 0;
    for (std::int64_t d = 0; inside && d < operand.dim(); ++d) {
      inside = operand.stride(d) >= 0;
      last += (operand.size(d) - 1) * operand.stride(d);
    }
    if (!inside || last >= e.master.numel()) continue;
    return raw::as_strided(e.copy, operand.shape(), operand.strides(), e.copy.offset() + first);
  }
  return Tensor();
}

Tensor AutocastCache::copy_of(const Tensor& master) const {
  for (const Entry& e : entries_) {
    if (e.master.is_same(master)) return e.copy;
  }
  return Tensor();
}

AutocastGuard::AutocastGuard(DType dtype, const AutocastCache* cache)
    : previous_dtype_(current_dtype),
      previous_cache_(current_cache),
      previous_casts_(current_casts) {
  TF_CHECK(dtype == DType::bfloat16 || dtype == DType::float32,
           "AutocastGuard: expected bfloat16 (or float32: off), got ", dtype);
  TF_CHECK(cache == nullptr || dtype == DType::float32 || cache->dtype() == dtype,
           "AutocastGuard: the cache holds ", cache ? dtype_name(cache->dtype()) : "", " copies, ",
           "the guard asks for ", dtype);
  if (dtype == DType::float32) {
    current_dtype.reset();
    current_cache = nullptr;
    current_casts = nullptr;
  } else {
    casts_ = std::make_unique<AutocastCasts>();
    current_dtype = dtype;
    current_cache = cache;
    current_casts = casts_.get();
  }
}

AutocastGuard::~AutocastGuard() {
  current_dtype = previous_dtype_;
  current_cache = previous_cache_;
  current_casts = previous_casts_;
}

std::optional<DType> autocast_dtype() {
  return current_dtype;
}

std::optional<std::vector<Tensor>> autocast_operands(std::initializer_list<Tensor> operands) {
  if (!current_dtype) return std::nullopt;
  const DType low = *current_dtype;
  bool any_float32 = false;
  for (const Tensor& t : operands) {
    if (!t.defined() || (t.dtype() != DType::float32 && t.dtype() != low) ||
        t.device() != operands.begin()->device()) {
      return std::nullopt;  // the op's own checks report what is wrong
    }
    any_float32 = any_float32 || t.dtype() == DType::float32;
  }
  if (!any_float32) return std::nullopt;
  std::vector<Tensor> out;
  out.reserve(operands.size());
  for (const Tensor& t : operands) {
    if (t.dtype() == low) {
      out.push_back(t);
      continue;
    }
    const Tensor cached = current_cache ? current_cache->lookup(t) : Tensor();
    if (!cached.defined()) {
      // An activation: rounded once under this guard, its gradient widened back.
      out.push_back(autograd::record(
          "to_dtype", rounded_activation(t, low), {t},
          [](const Tensor& g) { return std::vector<Tensor>{raw::to_dtype(g, DType::float32)}; }));
      continue;
    }
    // A parameter: its copy, no rounding; the gradient reaches the float32 master widened.
    out.push_back(autograd::record("autocast_cached", cached, {t}, [](const Tensor& g) {
      return std::vector<Tensor>{raw::to_dtype(g, DType::float32)};
    }));
  }
  return out;
}

autograd::BackwardFn autograd::autocast_backward(BackwardFn backward) {
  if (!current_dtype || !backward) return backward;
  return [dtype = *current_dtype, backward = std::move(backward)](const Tensor& g) {
    const AutocastGuard guard(dtype);
    return backward(g);
  };
}

Tensor autocast_to_float(const Tensor& x) {
  if (!current_dtype || !x.defined() || x.dtype() != *current_dtype) return x;
  return to(x, DType::float32);
}

}  // namespace tinyformer
