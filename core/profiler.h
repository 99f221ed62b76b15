// Profiler: times every primitive op (core/ops.def) that any backend runs while it is alive.
//
//   tinyformer::Profiler profiler;          // starts recording
//   auto loss = model.forward(batch); loss.backward();
//   std::cout << profiler.table();          // op, calls, time, share, GFLOP/s of the products
//
// While a Profiler exists, backend(device) hands out a wrapper that forwards each call to the real
// backend and adds its wall time to a row keyed by the op and its kind (`binary add`, `unary
// relu`, `matmul`). On a GPU the wrapper waits for each op to finish before it stops the clock, so
// the times are the kernels' own but the queue never runs ahead of the host: profile to see where
// time goes, not to measure overall speed. Work a backend does inside an op (a copy that matmul
// makes of a strided operand) counts to that op. The time between ops -- the autograd engine,
// shape logic, allocation -- is shown as one line: the wall time of the whole profiled span less
// the ops' sum.
//
// One Profiler at a time; it records ops from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tinyformer {

class Backend;

struct OpProfile {
  std::string name;        // "matmul", "binary add", "softmax_backward", ...
  std::string device;      // the name of the backend that ran it
  std::int64_t calls = 0;  //
  double seconds = 0;      // summed wall time of the calls
  double flops = 0;        // floating-point operations done (matrix products: 2 M N K)
  double bytes = 0;        // bytes of the ops' outputs (a lower bound on memory traffic)
};

class Profiler {
 public:
  // by_shape: one row per shape of each matrix product ("matmul 32x[1024x64]^T[1024x1024]"),
  // where ^T marks an operand read transposed (column-major), instead of one row for them all;
  // likewise one row per source layout of each copy ("copy [4x256x4x64] strides [...]") and
  // per source layout and result shape of each reduction.
  explicit Profiler(bool by_shape = false);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Recorded rows, longest total time first.
  std::vector<OpProfile> ops() const;
  // Wall time since construction (or the last reset()), less the time spent paused.
  double elapsed_seconds() const;
  // Forgets everything recorded so far and restarts the clock (a paused Profiler stays paused).
  void reset();
  // While paused, ops are not recorded and the clock stands still: a training loop leaves its
  // evaluations and data preparation out of a profile of its steps. An op running on another
  // thread when pause() is called still counts. Each is a no-op when already in that state.
  void pause();
  void resume();
  bool paused() const { return paused_; }
  // The rows as a table with each op's share of the wall time, then the time outside the ops.
  // At most `rows` rows; the rest are summed into one line.
  std::string table(std::size_t rows = 20) const;

 private:
  std::chrono::steady_clock::time_point start_, paused_at_;
  std::chrono::steady_clock::duration paused_for_{};  // paused since start_, up to paused_at_
  bool paused_ = false;
};

namespace detail {
// backend(device) asks these: while a Profiler exists it returns the timing wrapper of the
// device's backend, one wrapper per backend, made on first use.
bool profiler_active();
Backend& profiled_backend(Backend& inner);
}  // namespace detail

}  // namespace tinyformer
