// DistributedDataParallel: the model check and broadcast at start, the buckets, and the
// all-reduces started from the engine's post-accumulate hooks (autograd/hooks.h) and finished by
// a callback at the end of the backward pass.
#include "nn/distributed/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/error.h"

namespace tinyformer::distributed {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One line per parameter and buffer: what must agree across processes.
std::vector<std::string> model_signature(const nn::Module& module) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : module.named_parameters()) {
    std::ostringstream line;
    line << "parameter '" << name << "' " << shape_str(t.shape()) << " " << t.dtype()
         << (t.requires_grad() ? "" : " (no grad)");
    lines.push_back(line.str());
  }
  for (const auto& [name, t] : module.named_buffers()) {
    std::ostringstream line;
    line << "buffer '" << name << "' " << shape_str(t.shape()) << " " << t.dtype();
    lines.push_back(line.str());
  }
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A contiguous view of `shape` at element `offset` of the flat buffer.
Tensor slot(const Tensor& flat, const Shape& shape, std::int64_t offset) {
  return raw::as_strided(flat, shape, contiguous_strides(shape), offset, "DistributedDataParallel");
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 const DataParallelOptions& options)
    : module_(std::move(module)), options_(options) {
  TF_CHECK(module_ != nullptr, "DistributedDataParallel: expected a module, got a null pointer");
  TF_CHECK(is_initialized(),
           "DistributedDataParallel: expected a running distributed job, but "
           "distributed::init() has not been called");
  TF_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel: expected bucket_cap_mb > 0, got ",
           options_.bucket_cap_mb);
  check_same_model();

  // Every process starts from rank 0's values.
  {
    NoGradGuard no_grad;
    for (const Tensor& p : module_->parameters()) broadcast(p, 0);
  }
  broadcast_buffers();

  // Buckets in reverse registration order: backward finishes the last layers first. A bucket
  // holds one dtype on one device, up to bucket_cap_mb.
  const auto cap = static_cast<std::int64_t>(options_.bucket_cap_mb * 1024.0 * 1024.0);
  for (const auto& [name, t] : module_->named_parameters()) {
    if (t.requires_grad()) params_.push_back({.name = name, .tensor = t});
  }
  std::vector<std::size_t> order(params_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  std::int64_t bucket_bytes = 0;
  for (std::size_t i : order) {
    const Tensor& t = params_[i].tensor;
    const auto bytes = t.numel() * static_cast<std::int64_t>(element_size(t.dtype()));
    bool fresh = buckets_.empty();
    if (!fresh) {
      const Tensor& first = params_[buckets_.back().params.front()].tensor;
      fresh =
          first.dtype() != t.dtype() || first.device() != t.device() || bucket_bytes + bytes > cap;
    }
    if (fresh) {
      buckets_.emplace_back();
      bucket_bytes = 0;
    }
    params_[i].bucket = buckets_.size() - 1;
    buckets_.back().params.push_back(i);
    bucket_bytes += bytes;
  }
  for (Bucket& bucket : buckets_) {
    std::int64_t numel = 0;
    for (std::size_t i : bucket.params) {
      params_[i].offset = numel;
      numel += params_[i].tensor.numel();
    }
    const Tensor& first = params_[bucket.params.front()].tensor;
    bucket.flat = zeros({numel}, {.dtype = first.dtype(), .device = first.device()});
    stats_.bytes_per_sync += numel * static_cast<std::int64_t>(element_size(first.dtype()));
  }
  stats_.buckets = static_cast<std::int64_t>(buckets_.size());

  for (std::size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(autograd::register_post_accumulate_grad_hook(
        params_[i].tensor, [this, i](const Tensor&) { on_gradient_ready(i); }));
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::check_same_model() const {
  const std::vector<std::string> mine = model_signature(*module_);
  const std::vector<std::string> root = split(broadcast_string(join(mine), 0));
  std::string difference;
  for (std::size_t i = 0; i < std::max(mine.size(), root.size()) && difference.empty(); ++i) {
    if (i >= mine.size()) {
      difference = "rank 0 has " + root[i] + ", which rank " + std::to_string(rank()) + " lacks";
    } else if (i >= root.size()) {
      difference = "rank " + std::to_string(rank()) + " has " + mine[i] + ", which rank 0 lacks";
    } else if (mine[i] != root[i]) {
      difference =
          "rank " + std::to_string(rank()) + " has " + mine[i] + " where rank 0 has " + root[i];
    }
  }
  const bool differs = all_reduce_max(difference.empty() ? 0 : 1) != 0;
  if (!differs) return;
  if (!difference.empty()) {
    fail("DistributedDataParallel: the model differs across ranks: ", difference,
         " (every process must build the same model)");
  }
  if (rank() == 0) {
    fail(
        "DistributedDataParallel: the model differs across ranks: another rank's differs from "
        "rank 0's (its message names the difference; every process must build the same model)");
  }
  fail("DistributedDataParallel: the model differs across ranks: rank ", rank(),
       " matches rank 0, but another rank does not (its message names the difference; every "
       "process must build the same model)");
}

void DistributedDataParallel::broadcast_buffers() {
  NoGradGuard no_grad;
  for (const auto& [name, t] : module_->named_buffers()) broadcast(t, 0);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameters() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& bucket : buckets_) {
    out.emplace_back();
    for (std::size_t i : bucket.params) out.back().push_back(params_[i].name);
  }
  return out;
}

void DistributedDataParallel::on_gradient_ready(std::size_t index) {
  if (!sync_) return;
  if (!pass_active_) {
    // The pass's first ready gradient: start the bookkeeping, and have the engine call back
    // when the pass ends.
    pass_active_ = true;
    // A pass that threw may have left all-reduces in flight (on every process alike, when the
    // error was the same everywhere): they finish before their buffers are reused.
    for (Bucket& b : buckets_) b.work.wait();
    next_bucket_ = 0;
    for (Param& p : params_) p.ready = false;
    for (Bucket& b : buckets_) {
      b.pending = b.params.size();
      b.launched = false;
    }
    pass_start_ = now_seconds();
    stats_.last_launched_in_backward = 0;
    stats_.last_launched_at_end = 0;
    stats_.last_first_launch_seconds = 0;
    // The guard ends the pass's bookkeeping also when the pass throws and drops the callback.
    const std::shared_ptr<bool> end(&pass_active_, [](bool* active) { *active = false; });
    autograd::queue_callback([this, end] { finish_pass(); });
  }
  Param& p = params_[index];
  if (!p.ready) {
    p.ready = true;
    --buckets_[p.bucket].pending;
  }
  launch_ready_buckets(/*in_backward=*/true);
  // MPI progresses non-blocking collectives inside MPI calls: ask about the ones in flight.
  for (std::size_t b = 0; b < next_bucket_; ++b) buckets_[b].work.test();
}

// Buckets start strictly in order, on every process alike: MPI matches collectives by their
// order, so a bucket that is ready early waits for the ones before it.
void DistributedDataParallel::launch_ready_buckets(bool in_backward) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    launch(buckets_[next_bucket_], in_backward);
    ++next_bucket_;
  }
}

void DistributedDataParallel::launch(Bucket& bucket, bool in_backward) {
  for (std::size_t i : bucket.params) {
    const Param& p = params_[i];
    Tensor dst = slot(bucket.flat, p.tensor.shape(), p.offset);
    const Tensor grad = p.tensor.grad();
    // A parameter with no gradient on this process counts as zeros.
    if (grad.defined()) {
      raw::copy(grad, dst);
    } else {
      raw::fill(dst, 0.0);
    }
  }
  bucket.work = all_reduce_async(bucket.flat, Reduction::sum);
  bucket.launched = true;
  if (in_backward) {
    if (stats_.last_launched_in_backward == 0) {
      stats_.last_first_launch_seconds = now_seconds() - pass_start_;
    }
    ++stats_.last_launched_in_backward;
  } else {
    if (stats_.last_launched_in_backward == 0 && stats_.last_launched_at_end == 0) {
      stats_.last_first_launch_seconds = now_seconds() - pass_start_;
    }
    ++stats_.last_launched_at_end;
  }
}

void DistributedDataParallel::finish_pass() {
  struct EndPass {
    bool& active;
    ~EndPass() { active = false; }
  } end_pass{pass_active_};
  const double backward_end = now_seconds();
  stats_.last_backward_seconds = backward_end - pass_start_;

  // Parameters this pass did not reach: their buckets start now (their gradient, when one was
  // accumulated earlier, or zeros).
  for (Bucket& b : buckets_) b.pending = 0;
  launch_ready_buckets(/*in_backward=*/false);

  // Which parameters have a gradient on some process: those get the average; one that has none
  // anywhere keeps none, as in a single process.
  Tensor used = zeros({static_cast<std::int64_t>(params_.size())}, {.dtype = DType::int64});
  auto* flags = used.data<std::int64_t>();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    flags[i] = params_[i].tensor.grad().defined() ? 1 : 0;
  }
  all_reduce(used, Reduction::sum);

  for (Bucket& b : buckets_) b.work.wait();
  // From the end of backward: the flags' all-reduce above also lets MPI finish the buckets.
  stats_.last_wait_seconds = now_seconds() - backward_end;
  stats_.total_wait_seconds += stats_.last_wait_seconds;

  const double processes = world_size();
  for (Bucket& b : buckets_) {
    const Tensor average =
        div(b.flat, scalar_tensor(processes, {.dtype = b.flat.dtype(), .device = b.flat.device()}));
    for (std::size_t i : b.params) {
      if (flags[i] == 0) continue;
      const Param& p = params_[i];
      const Tensor value = slot(average, p.tensor.shape(), p.offset);
      const Tensor grad = p.tensor.grad();
      if (grad.defined()) {
        raw::copy(value, grad);
      } else {
        p.tensor.set_grad(value.clone());  // the leaf owns its gradient's memory
      }
    }
  }
  ++stats_.syncs;
  stats_.last_sync_seconds = now_seconds() - pass_start_;
}

}  // namespace tinyformer::distributed
