// Hooks into the backward pass: a function run when a leaf's gradient is final for the pass in
// progress (data-parallel training starts sending a gradient as soon as it is complete), and
// functions queued to run once the pass has run its last node.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"

namespace tinyformer::autograd {

class AccumulateGrad;

// Called with the leaf itself; leaf.grad() holds the gradient accumulated so far (earlier passes
// included, when the caller did not zero it), and no later node of this pass adds to it.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// Owns one registered hook: it stays registered while the handle lives (or until remove()).
// The handle keeps the leaf's gradient accumulator alive, so hooks registered before the first
// forward pass are found by every graph built afterwards.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::shared_ptr<AccumulateGrad> sink, std::uint64_t id)
      : sink_(std::move(sink)), id_(id) {}
  HookHandle(HookHandle&& other) noexcept;
  HookHandle& operator=(HookHandle&& other) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  ~HookHandle() { remove(); }
  void remove();

 private:
  std::shared_ptr<AccumulateGrad> sink_;
  std::uint64_t id_ = 0;
};

// Runs `hook` at the moment a backward pass has added its last contribution to `leaf`'s
// gradient: the engine runs a leaf's accumulator once per pass, after every consumer of the
// leaf has delivered (Kahn's order), and the hook runs right after that accumulation. A pass
// that sends the leaf no gradient (it was not used, or only through paths that produced none)
// runs no hook for it. Hooks of one leaf run in registration order, on the thread running the
// backward pass and under its NoGradGuard. Throws Error for a tensor that is not a leaf
// requiring grad.
[[nodiscard]] HookHandle register_post_accumulate_grad_hook(const Tensor& leaf,
                                                            PostAccumulateGradHook hook);

// Queues `callback` to run when the backward pass in progress on this thread has run its last
// node, before backward() returns (still under the pass's NoGradGuard; a callback may queue
// further ones, which run too). A pass that throws drops its queued callbacks. Throws Error when
// no backward pass is running on this thread.
void queue_callback(std::function<void()> callback);

// True while a backward pass runs on this thread (inside hooks and node backward functions).
bool in_backward();

}  // namespace tinyformer::autograd
