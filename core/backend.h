// Backend: the interface each device implements, one virtual per primitive op of core/ops.def,
// and the registry that backends enter themselves in. core/ knows no concrete backend: each one
// registers for a device type with a static BackendRegistrar, and backend(device) finds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/attention_dropout.h"
#include "core/collectives.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace tinyformer {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // The libraries, kernels and threads this backend runs with (benchmarks print it).
  virtual std::string runtime_info() = 0;
  virtual Allocator& allocator() = 0;
  // Waits until all queued work on the device has finished.
  virtual void synchronize() = 0;
  // Copies bytes between host memory and this backend's memory (either side may be the host).
  virtual void memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                      std::size_t bytes) = 0;
  // The kind of device whose tensors this backend's kernels read and write.
  virtual DeviceType device_type() const = 0;
  // Whether this backend runs `op` on tensors of `dtype` (its kernels' dtype list; for ops with
  // operands of several dtypes, the dtype of the data: x, the table, fill's output). The
  // op-argument checks and their error messages ask this instead of naming a device.
  virtual bool supports(Op op, DType dtype) const = 0;
  // The dtypes supports(op, ...) accepts, as error messages list them: "float32 or float64".
  std::string dtype_list(Op op) const;

  // Collectives between processes on this backend's devices (core/collectives.h). One process
  // makes an id, the caller sends it to the others (over MPI), and every process then builds
  // its end with communicator(); `rank` in [0, size). The default: this backend has none, an
  // Error naming it (the CPU's collectives are MPI's own, in nn/distributed/).
  virtual std::vector<std::uint8_t> communicator_id();
  virtual std::unique_ptr<DeviceCommunicator> communicator(const std::vector<std::uint8_t>& id,
                                                           int rank, int size, Device device);

#define TF_OP(name, params, args) virtual void name params = 0;
#include "core/ops.def"
#undef TF_OP
};

// One registered backend. Each backend library defines a static BackendRegistrar, so linking it
// is what makes it available; core/ never names it.
struct BackendEntry {
  std::string name;     // unique; what find_backend looks up and error messages say
  DeviceType device;    // the kind of device its kernels work on
  Backend& (*get)();    // the instance, created on first use; throws Error if it cannot run here
  bool primary;         // the backend that owns tensors of this device type (one per type)
  bool (*available)();  // whether a device of this type is present (a GPU); nullptr = always
};

// Called by a static registrar in each backend, before main. Thread-safe, and safe whatever the
// order of static initialisation (the registry is created on first use).
void register_backend(BackendEntry entry);
struct BackendRegistrar {
  explicit BackendRegistrar(BackendEntry entry) { register_backend(std::move(entry)); }
};

// The primary backend of device.type, which owns tensors on `device` (while a Profiler lives, a
// wrapper that times each op). Throws Error when none is registered, or when the device is
// absent (the backend's own message: a GPU build on a machine without a GPU).
Backend& backend(Device device);
// The backend registered under `name` (primary or not), without the profiler's wrapper; nullptr
// when there is none. Throws Error, as backend() does, when it is registered but cannot run here.
Backend* find_backend(std::string_view name);
// Every registered backend, in registration order.
std::vector<BackendEntry> registered_backends();
// Whether tensors of this device type can be made here: its primary backend is registered and
// reports the device present.
bool device_available(DeviceType type);
// device_available(DeviceType::cuda): false in a build without a GPU backend or without a GPU.
bool cuda_available();

// backend(device).runtime_info(): e.g. the BLAS core, the ISA and thread count, or the GPU and
// library versions.
std::string runtime_info(Device device = Device::cpu());

// How float32 matrix products and convolutions may round their inputs where a device has
// reduced-precision units: not at all (the default), to TF32, or to bfloat16, accumulating in
// float32 either way. The GPU uses its tensor cores for both. The CPU rounds matrix products'
// operands to bfloat16 under bf16 where it has bfloat16 instructions (AVX-512 BF16, AMX;
// runtime_info says), and otherwise computes float32 exactly. Products of bfloat16 tensors are
// bfloat16 products whatever this says.
enum class MatmulPrecision { exact, tf32, bf16 };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();

}  // namespace tinyformer
