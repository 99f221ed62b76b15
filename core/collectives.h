// Collective communication between processes on a device's own transport, reached through the
// device's backend: nn/distributed/ asks backend(device) for a communicator and never includes
// a backend header. The host side (CPU tensors, and the exchange of a communicator's id) is
// MPI's, in nn/distributed/.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tinyformer {

// One process's end of a communicator over every process of a job, on one device. Each call
// is collective (every process makes it, in the same order) and works in place on a
// contiguous tensor of that device; it is queued on the device's stream behind the work that
// produced the tensor, so the host does not wait for it.
class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  // t = the sum over processes of t (mean: divided by their number; floating dtypes only). A
  // bool tensor is reduced with logical or.
  virtual void all_reduce(const Tensor& t, bool mean) = 0;
  // t = root's t.
  virtual void broadcast(const Tensor& t, int root) = 0;
};

}  // namespace tinyformer
