// The backend registry: the entries backends add at static initialisation, and the lookup of a
// device type's primary backend that every op call goes through.
#include "core/backend.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/profiler.h"

namespace tinyformer {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<BackendEntry> entries;
  // The primary backend of each device type once backend() has found it, so that the lookup
  // every op makes is one atomic load. Indexed by the DeviceType's value (a byte).
  std::array<std::atomic<Backend*>, 256> primary{};
};

// Created on first use: a registrar in a backend's object file may run before any static object
// of this file is constructed.
Registry& registry() {
  static Registry r;
  return r;
}

std::size_t slot_of(DeviceType type) {
  return static_cast<std::size_t>(type);
}

// "cpu", "cuda"; "device type 7" for a value no Device constructor makes.
std::string type_name(DeviceType type) {
  if (type == DeviceType::cpu) return "cpu";
  if (type == DeviceType::cuda) return "cuda";
  return "device type " + std::to_string(slot_of(type));
}

// The registered backends for messages: "name (device type), ...".
std::string names_of(const std::vector<BackendEntry>& entries) {
  std::string names;
  for (const BackendEntry& e : entries) {
    if (!names.empty()) names += ", ";
    names += e.name + " (" + type_name(e.device) + ")";
  }
  return names.empty() ? "none" : names;
}

// The primary entry of `type`, or nullptr when none is registered. Throws when two backends
// claim the same device type. The caller holds the registry's mutex.
const BackendEntry* primary_entry(const Registry& r, DeviceType type) {
  const BackendEntry* found = nullptr;
  for (const BackendEntry& e : r.entries) {
    if (e.device != type || !e.primary) continue;
    TF_CHECK(found == nullptr, "backend: two backends claim ", type_name(type),
             " tensors: ", found->name, " and ", e.name, " are both registered as primary");
    found = &e;
  }
  return found;
}

// The primary backend of `type`, without the profiler's wrapper.
Backend& primary_backend(DeviceType type) {
  Registry& r = registry();
  std::atomic<Backend*>& slot = r.primary[slot_of(type)];
  if (Backend* b = slot.load(std::memory_order_acquire)) return *b;
  Backend& (*get)() = nullptr;
  {
    const std::lock_guard lock(r.mutex);
    const BackendEntry* entry = primary_entry(r, type);
    TF_CHECK(entry != nullptr, type_name(type), ": this build has no backend for ", type_name(type),
             " tensors (registered: ", names_of(r.entries), ")");
    get = entry->get;
  }
  // Outside the lock: creating the instance may take long (a GPU context) or throw (no device),
  // and a throw leaves the slot empty, so the next call asks again.
  Backend& b = get();
  slot.store(&b, std::memory_order_release);
  return b;
}

}  // namespace

std::vector<std::uint8_t> Backend::communicator_id() {
  fail("communicator_id: the ", name(),
       " backend has no collectives between processes (tensors of its device are not "
       "communicated by it)");
}

std::unique_ptr<DeviceCommunicator> Backend::communicator(const std::vector<std::uint8_t>&, int,
                                                          int, Device device) {
  fail("communicator: the ", name(), " backend has no collectives between processes (asked for ",
       device.str(), ")");
}

std::string Backend::dtype_list(Op op) const {
  // Floating dtypes first, as messages have always listed them.
  constexpr DType order[] = {DType::float32, DType::float64, DType::bfloat16, DType::int64,
                             DType::boolean};
  std::vector<const char*> names;
  for (DType dtype : order) {
    if (supports(op, dtype)) names.push_back(dtype_name(dtype));
  }
  if (names.empty()) return "no dtype";
  std::string list = names[0];
  for (std::size_t i = 1; i < names.size(); ++i) {
    list += i + 1 == names.size() ? " or " : ", ";
    list += names[i];
  }
  return list;
}

void register_backend(BackendEntry entry) {
  TF_CHECK(!entry.name.empty(), "register_backend: expected a name, got an empty one");
  TF_CHECK(entry.get != nullptr, "register_backend: expected a getter for backend ", entry.name,
           ", got none");
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  for (const BackendEntry& e : r.entries) {
    TF_CHECK(e.name != entry.name, "register_backend: a backend named ", entry.name,
             " is registered already (for ", type_name(e.device), " tensors)");
  }
  r.entries.push_back(std::move(entry));
}

Backend& backend(Device device) {
  Backend& b = primary_backend(device.type);
  if (detail::profiler_active()) return detail::profiled_backend(b);
  return b;
}

Backend* find_backend(std::string_view name) {
  Registry& r = registry();
  Backend& (*get)() = nullptr;
  {
    const std::lock_guard lock(r.mutex);
    for (const BackendEntry& e : r.entries) {
      if (e.name == name) {
        get = e.get;
        break;
      }
    }
  }
  return get == nullptr ? nullptr : &get();
}

std::vector<BackendEntry> registered_backends() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  return r.entries;
}

bool device_available(DeviceType type) {
  Registry& r = registry();
  bool (*available)() = nullptr;
  {
    const std::lock_guard lock(r.mutex);
    const BackendEntry* entry = primary_entry(r, type);
    if (entry == nullptr) return false;
    available = entry->available;
  }
  return available == nullptr || available();
}

bool cuda_available() {
  return device_available(DeviceType::cuda);
}

}  // namespace tinyformer
