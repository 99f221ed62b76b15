// Collectives between processes for CUDA tensors, on NCCL: each call is queued on the backend's
// stream (cuda::stream()) behind the kernels that produced the tensor, so the host never waits
// for it. The communicator's id is made here and sent to the other processes by the caller.
#include <nccl.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"

#define TF_NCCL_CHECK(op, call)                                                                \
  do {                                                                                         \
    const ncclResult_t tf_status_ = (call);                                                    \
    if (tf_status_ != ncclSuccess) {                                                           \
      ::tinyformer::fail(op, ": ", #call, " failed: ", ::ncclGetErrorString(tf_status_), " (", \
                         ::ncclGetLastError(nullptr), ")");                                    \
    }                                                                                          \
  } while (0)

namespace tinyformer::cuda {

namespace {

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return ncclFloat32;
    case DType::float64:
      return ncclFloat64;
    case DType::bfloat16:
      return ncclBfloat16;
    case DType::int64:
      return ncclInt64;
    case DType::boolean:
      return ncclUint8;  // one byte, 0 or 1; reduced with max (logical or)
  }
  fail("nccl: unknown dtype");
}

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, Device device) : device_(device) {
    TF_CUDA_CHECK("communicator", cudaSetDevice(device.index));
    TF_NCCL_CHECK("communicator", ncclCommInitRank(&comm_, size, id, rank));
  }
  ~NcclCommunicator() override {
    // Waits for this communicator's queued work; errors at exit have no one to report to.
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  void all_reduce(const Tensor& t, bool mean) override {
    check(t, "all_reduce");
    const bool floating = is_floating(t.dtype());
    TF_CHECK(!mean || floating, "all_reduce: mean needs a floating dtype, got ", t.dtype());
    const ncclRedOp_t op = t.dtype() == DType::boolean ? ncclMax : mean ? ncclAvg : ncclSum;
    TF_NCCL_CHECK("all_reduce",
                  ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<std::size_t>(t.numel()),
                                nccl_dtype(t.dtype()), op, comm_, stream()));
  }

  void broadcast(const Tensor& t, int root) override {
    check(t, "broadcast");
    TF_NCCL_CHECK("broadcast",
                  ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<std::size_t>(t.numel()),
                                nccl_dtype(t.dtype()), root, comm_, stream()));
  }

 private:
  void check(const Tensor& t, const char* op) const {
    TF_CHECK(t.device() == device_, op, ": expected a tensor on ", device_.str(),
             " (the communicator's device), got one on ", t.device().str());
    TF_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor, got shape ",
             shape_str(t.shape()), " with strides ", shape_str(t.strides()));
  }

  Device device_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::vector<std::uint8_t> CudaBackend::communicator_id() {
  ncclUniqueId id;
  TF_NCCL_CHECK("communicator_id", ncclGetUniqueId(&id));
  std::vector<std::uint8_t> bytes(sizeof id.internal);
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return bytes;
}

std::unique_ptr<DeviceCommunicator> CudaBackend::communicator(const std::vector<std::uint8_t>& id,
                                                              int rank, int size, Device device) {
  ncclUniqueId uid;
  TF_CHECK(id.size() == sizeof uid.internal, "communicator: expected an id of ",
           sizeof uid.internal, " bytes (from communicator_id), got ", id.size());
  TF_CHECK(device.is_cuda(), "communicator: expected a CUDA device, got ", device.str());
  TF_CHECK(size >= 1 && rank >= 0 && rank < size,
           "communicator: expected 0 <= rank < size, got rank ", rank, " of ", size);
  std::memcpy(uid.internal, id.data(), id.size());
  return std::make_unique<NcclCommunicator>(uid, rank, size, device);
}

}  // namespace tinyformer::cuda
