// The backward pass: one topological sort from the root, gradients accumulated per node, and
// broadcast gradients reduced to each input's shape here and nowhere else.
#include <algorithm>
#include <functional>
#include <unordered_map>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/hooks.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

namespace {
thread_local bool grad_mode_enabled = true;
}

bool GradMode::is_enabled() {
  return grad_mode_enabled;
}
void GradMode::set_enabled(bool enabled) {
  grad_mode_enabled = enabled;
}

namespace autograd {

namespace {
// What save() noted since the last record() on this thread.
thread_local std::vector<SavedVersion> pending_saves;

// The notes of the tensors still held: a save whose op threw before record() left a note whose
// tensor is gone with the op's locals.
std::vector<SavedVersion> take_pending_saves() {
  std::vector<SavedVersion> saved;
  for (SavedVersion& s : pending_saves) {
    if (!s.tensor.expired()) saved.push_back(std::move(s));
  }
  pending_saves.clear();
  return saved;
}
}  // namespace

void note_saved(const Tensor& t) {
  if (t.defined()) pending_saves.push_back({t.impl_ptr(), t.version()});
}

Tensor save(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor saved = t.detach();
  note_saved(saved);
  return saved;
}

std::vector<Tensor> Node::apply(const Tensor& grad) {
  TF_CHECK(backward_ != nullptr, "backward: the graph through '", name_,
           "' was already freed by an earlier backward; pass retain_graph = true to the first "
           "backward to run backward twice");
  for (const SavedVersion& s : saved_) {
    const auto impl = s.tensor.lock();
    if (impl == nullptr) continue;
    const Tensor t(impl);
    TF_CHECK(t.version() == s.version, "backward: a tensor that '", name_,
             "' saved for its backward (", t.dtype(), " ", shape_str(t.shape()),
             ") was modified in place after the forward: it is at version ", t.version(),
             ", saved at version ", s.version,
             "; run the backward before changing it, or change a clone()");
  }
  return backward_(grad);
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad) {
  auto leaf = leaf_.lock();
  if (!leaf) return {};
  // The leaf owns its gradient's memory, so optimizers and clipping may update it in place. A
  // gradient that nothing else holds (the engine passes its only handle), dense over its whole
  // storage and outside any graph, becomes the leaf's as it is; any other is copied.
  if (!leaf->grad.defined()) {
    const bool take = grad.is_sole_owner() && grad.is_contiguous() && !grad.requires_grad() &&
                      grad.offset() == 0 && grad.storage() != nullptr &&
                      grad.storage()->nbytes() ==
                          static_cast<std::size_t>(grad.numel()) * element_size(grad.dtype());
    leaf->grad = take                                  ? grad
                 : raw::contiguous(grad).is_same(grad) ? grad.clone()
                                                       : raw::contiguous(grad);
  } else {
    leaf->grad = add(leaf->grad, grad);
  }
  if (!hooks_.empty()) {
    const Tensor handle(leaf);
    // A hook may remove itself (or another): iterate over a copy.
    const auto hooks = hooks_;
    for (const auto& [id, hook] : hooks) hook(handle);
  }
  return {};
}

std::uint64_t AccumulateGrad::add_hook(std::function<void(const Tensor&)> hook) {
  const std::uint64_t id = next_hook_id_++;
  hooks_.emplace_back(id, std::move(hook));
  return id;
}

void AccumulateGrad::remove_hook(std::uint64_t id) {
  std::erase_if(hooks_, [id](const auto& entry) { return entry.first == id; });
}

HookHandle::HookHandle(HookHandle&& other) noexcept
    : sink_(std::move(other.sink_)), id_(other.id_) {
  other.sink_ = nullptr;
}

HookHandle& HookHandle::operator=(HookHandle&& other) noexcept {
  if (this != &other) {
    remove();
    sink_ = std::move(other.sink_);
    id_ = other.id_;
    other.sink_ = nullptr;
  }
  return *this;
}

void HookHandle::remove() {
  if (sink_) sink_->remove_hook(id_);
  sink_ = nullptr;
}

HookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  TF_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(),
           "register_post_accumulate_grad_hook: expected a leaf tensor that requires grad, got ",
           !leaf.defined()         ? "an undefined tensor"
           : !leaf.requires_grad() ? "a tensor that does not require grad"
                                   : "a non-leaf tensor");
  TF_CHECK(hook != nullptr, "register_post_accumulate_grad_hook: expected a function, got none");
  auto sink = std::static_pointer_cast<AccumulateGrad>(gradient_sink(leaf));
  const std::uint64_t id = sink->add_hook(std::move(hook));
  return HookHandle(std::move(sink), id);
}

namespace {
// The callbacks of each backward pass running on this thread, innermost last (a backward pass
// may run inside another one's node, e.g. in a custom function).
thread_local std::vector<std::vector<std::function<void()>>*> pass_callbacks;

struct PassScope {
  std::vector<std::function<void()>> callbacks;
  PassScope() { pass_callbacks.push_back(&callbacks); }
  ~PassScope() { pass_callbacks.pop_back(); }
  PassScope(const PassScope&) = delete;
  PassScope& operator=(const PassScope&) = delete;
};
}  // namespace

void queue_callback(std::function<void()> callback) {
  TF_CHECK(!pass_callbacks.empty(),
           "queue_callback: expected to be called during a backward pass (from a hook or a "
           "node's backward function), but no backward pass is running on this thread");
  pass_callbacks.back()->push_back(std::move(callback));
}

bool in_backward() {
  return !pass_callbacks.empty();
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const Tensor& t) { return t.requires_grad(); });
}

std::shared_ptr<Node> gradient_sink(const Tensor& t) {
  if (!t.requires_grad()) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  TensorImpl* impl = t.impl();
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return acc;
}

Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs,
              BackwardFn backward) {
  std::vector<SavedVersion> saved = take_pending_saves();
  if (!needs_grad(inputs)) return out;
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    edges.push_back({gradient_sink(in), in.defined() ? in.shape() : Shape{}});
  }
  // Under autocast the backward runs under the same dtype (autograd/autocast.h).
  out.impl()->grad_fn = std::make_shared<Node>(
      name, std::move(edges), autocast_backward(std::move(backward)), std::move(saved));
  out.impl()->requires_grad = true;
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  // A bfloat16 gradient (mixed precision: a shared matrix broadcast over a batch of products)
  // is summed in float32 where the backend reduces no bfloat16, and rounded once.
  if (grad.dtype() == DType::bfloat16 &&
      !backend(grad.device()).supports(Op::reduce, DType::bfloat16)) {
    return to(sum_to(to(grad, DType::float32), shape), DType::bfloat16);
  }
  const auto lead = static_cast<std::int64_t>(grad.dim()) - static_cast<std::int64_t>(shape.size());
  TF_CHECK(lead >= 0, "backward: a gradient of shape ", shape_str(grad.shape()),
           " cannot be reduced to shape ", shape_str(shape));
  Shape dims;
  for (std::int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) dims.push_back(d);
  }
  Tensor reduced = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return reduced.reshape(shape);
}

namespace {
// sum += g for a node's pending gradient. In place where nothing else holds the sum's memory (a
// gradient the engine made, or one a node returned and let go of) and the backend adds its dtype:
// no new buffer, and one pass that reads both and writes over the sum. Otherwise a new tensor.
void accumulate(Tensor& sum, const Tensor& g) {
  if (sum.is_sole_owner() && sum.is_contiguous() && sum.shape() == g.shape() &&
      sum.dtype() == g.dtype() && sum.device() == g.device() && !sum.requires_grad()) {
    Backend& be = backend(sum.device());
    if (be.supports(Op::binary, sum.dtype())) {
      be.binary(BinaryOp::add, sum, g, sum);
      return;
    }
  }
  sum = add(sum, g);
}
}  // namespace

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  TF_CHECK(root.defined(), "backward: expected a defined tensor, got an undefined Tensor");
  TF_CHECK(root.requires_grad(),
           "backward: the tensor does not require grad (no input of the computation had "
           "requires_grad set, or it ran under NoGradGuard)");
  Tensor seed = grad;
  if (!seed.defined()) {
    TF_CHECK(root.numel() == 1,
             "backward: an implicit gradient needs a tensor with one element, got shape ",
             shape_str(root.shape()), "; pass the gradient explicitly");
    seed = ones_like(root);
  } else {
    TF_CHECK(seed.shape() == root.shape() && seed.dtype() == root.dtype(),
             "backward: expected a gradient of shape ", shape_str(root.shape()), " ", root.dtype(),
             ", got ", shape_str(seed.shape()), " ", seed.dtype());
  }

  NoGradGuard no_grad;
  PassScope pass;
  std::shared_ptr<Node> start = gradient_sink(root);

  // Count, for every node reachable from the root, how many edges lead into it.
  std::unordered_map<Node*, int> pending;
  std::vector<Node*> stack = {start.get()};
  pending[start.get()] = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->inputs()) {
      if (!e.node) continue;
      auto [it, fresh] = pending.try_emplace(e.node.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.node.get());
    }
  }

  // Kahn's order: a node runs once every consumer has delivered its gradient.
  std::unordered_map<Node*, Tensor> grads;
  grads[start.get()] = seed;
  std::vector<Node*> ready = {start.get()};
  while (!ready.empty()) {
    Node* node = ready.back();
    ready.pop_back();
    Tensor g = std::move(grads[node]);
    grads.erase(node);
    const auto& edges = node->inputs();
    // A node whose consumers sent no gradient (all undefined) passes none on.
    std::vector<Tensor> input_grads =
        g.defined() ? node->apply(g) : std::vector<Tensor>(edges.size());
    if (!retain_graph) node->release();
    TF_CHECK(input_grads.size() == edges.size() || edges.empty(), "backward: '", node->name(),
             "' returned ", input_grads.size(), " gradients for ", edges.size(), " inputs");
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.node) continue;
      if (input_grads[i].defined()) {
        Tensor gi = sum_to(input_grads[i], e.shape);
        auto it = grads.find(e.node.get());
        if (it == grads.end() || !it->second.defined()) {
          grads[e.node.get()] = gi;
        } else {
          accumulate(it->second, gi);
        }
      }
      if (--pending[e.node.get()] == 0) ready.push_back(e.node.get());
    }
  }
  // The pass's end: queued callbacks run in order (one may queue another).
  for (std::size_t i = 0; i < pass.callbacks.size(); ++i) {
    auto callback = std::move(pass.callbacks[i]);
    callback();
  }
}

}  // namespace autograd
}  // namespace tinyformer
