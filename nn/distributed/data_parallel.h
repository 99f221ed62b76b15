// DistributedDataParallel: the same model in every process, each on its own share of the batch,
// with gradients averaged across processes during backward, as PyTorch's
// torch.nn.parallel.DistributedDataParallel does. At construction it checks that every process
// holds the same parameters and copies rank 0's values (and buffers) to the others. During each
// backward pass the gradients are gathered into buckets (about 25 MB by default) in reverse
// registration order, which is roughly the order backward finishes them; a bucket's
// all-reduce starts (non-blocking) as soon as each of its gradients is final, so that the
// communication of the last layers overlaps the backward computation of the first ones. When
// the pass ends, the remaining buckets start, every all-reduce is waited for, and each gradient
// is replaced by its average over the processes: after backward() returns, every process holds
// the same gradients and the optimizer step stays unchanged.
//
//   distributed::init();
//   auto model = std::make_shared<Mlp>();
//   distributed::DistributedDataParallel ddp(model);
//   ...
//   loss = loss_fn(model->forward(local_batch));  // the local share of the batch
//   loss.backward();                               // gradients averaged on every rank
//   optimizer.step();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/hooks.h"
#include "core/tensor.h"
#include "nn/distributed/distributed.h"
#include "nn/module.h"

namespace tinyformer::distributed {

struct DataParallelOptions {
  // A bucket's size in MiB (PyTorch's bucket_cap_mb): smaller buckets start communicating
  // earlier, larger ones pay each all-reduce's latency fewer times. A parameter larger than
  // this is a bucket of its own.
  double bucket_cap_mb = 25.0;
};

// What the synchronisations did, for tests and benchmarks. The "last_" fields describe the most
// recent synchronised backward pass (and are updated while it runs); the rest are totals.
struct DataParallelStats {
  std::int64_t buckets = 0;  // all-reduces per synchronised pass
  std::int64_t bytes_per_sync = 0;
  std::int64_t syncs = 0;                      // synchronised backward passes
  std::int64_t last_launched_in_backward = 0;  // buckets started from a gradient hook
  std::int64_t last_launched_at_end = 0;       // buckets started when the pass had ended
  // Seconds from the pass's first ready gradient to: the first all-reduce's start, the end of
  // the backward computation, and the end of the synchronisation.
  double last_first_launch_seconds = 0;
  double last_backward_seconds = 0;
  double last_sync_seconds = 0;
  // Seconds from the end of backward until every all-reduce had finished: starting the buckets
  // left, the all-reduce of the gradient flags and the waits (the communication not hidden
  // behind backward).
  double last_wait_seconds = 0;
  double total_wait_seconds = 0;
};

class DistributedDataParallel {
 public:
  // Throws Error when distributed::init() has not run, or when the processes' models differ
  // (names, shapes, dtypes, which parameters need gradients): every process throws, the ones
  // that differ from rank 0 naming the first difference.
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                   const DataParallelOptions& options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  const std::shared_ptr<nn::Module>& module() const { return module_; }

  // While a NoSync lives, backward passes only accumulate gradients locally (gradient
  // accumulation: the micro-batches before the last); the next pass outside it all-reduces the
  // accumulated gradients.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) {
      ddp.sync_ = false;
    }
    ~NoSync() { ddp_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  bool sync_enabled() const { return sync_; }

  // Copies rank 0's buffers to every process (the constructor did it once).
  void broadcast_buffers();

  const DataParallelStats& stats() const { return stats_; }
  // The names of each bucket's parameters, in the order the buckets are all-reduced.
  std::vector<std::vector<std::string>> bucket_parameters() const;

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    std::size_t bucket = 0;
    std::int64_t offset = 0;  // in the bucket's flat buffer, in elements
    bool ready = false;       // its gradient is final in the pass in progress
  };
  struct Bucket {
    std::vector<std::size_t> params;
    Tensor flat;  // the gradients side by side, all-reduced as one tensor
    std::size_t pending = 0;
    bool launched = false;
    Work work;
  };

  void check_same_model() const;
  void on_gradient_ready(std::size_t index);
  void launch_ready_buckets(bool in_backward);
  void launch(Bucket& bucket, bool in_backward);
  void finish_pass();

  std::shared_ptr<nn::Module> module_;
  DataParallelOptions options_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<autograd::HookHandle> hooks_;
  bool sync_ = true;
  bool pass_active_ = false;
  std::size_t next_bucket_ = 0;
  double pass_start_ = 0;
  DataParallelStats stats_;
};

}  // namespace tinyformer::distributed
