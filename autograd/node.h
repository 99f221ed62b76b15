// The graph: each op that needs a gradient leaves a Node on its output, with an edge to the
// node of every input. A Node's backward maps the gradient of its output to the gradients of
// its inputs; the tensors it needs are captured by the backward function ("saved") and freed
// after the backward pass unless it is asked to retain the graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tinyformer::autograd {

class Node;

// Where the gradient of one input goes. `node` is null when that input needs no gradient.
struct Edge {
  std::shared_ptr<Node> node;
  Shape shape;  // the input's shape: the engine reduces broadcast gradients to it
};

// Given the gradient of the output, returns one gradient per input (undefined where none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad)>;

// A tensor an op saved for its backward (save(), below) and its storage's version then.
struct SavedVersion {
  std::weak_ptr<TensorImpl> tensor;
  std::uint64_t version = 0;
};

class Node {
 public:
  Node(std::string name, std::vector<Edge> inputs, BackwardFn backward,
       std::vector<SavedVersion> saved = {})
      : name_(std::move(name)),
        inputs_(std::move(inputs)),
        backward_(std::move(backward)),
        saved_(std::move(saved)) {}
  virtual ~Node() = default;

  const std::string& name() const { return name_; }
  const std::vector<Edge>& inputs() const { return inputs_; }

  // Runs the backward function, after checking that no tensor it saved changed in place since
  // the forward (an Error naming the op otherwise).
  virtual std::vector<Tensor> apply(const Tensor& grad);
  // Frees what the backward function saved; a later apply() throws.
  virtual void release() {
    backward_ = nullptr;
    saved_.clear();
  }

 private:
  std::string name_;
  std::vector<Edge> inputs_;
  BackwardFn backward_;
  std::vector<SavedVersion> saved_;
};

// The sink of a leaf tensor: adds the incoming gradient into the leaf's .grad(), then runs the
// leaf's post-accumulate hooks (autograd/hooks.h).
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf)
      : Node("AccumulateGrad", {}, nullptr), leaf_(leaf) {}
  std::vector<Tensor> apply(const Tensor& grad) override;
  void release() override {}

  std::uint64_t add_hook(std::function<void(const Tensor&)> hook);
  void remove_hook(std::uint64_t id);

 private:
  std::weak_ptr<TensorImpl> leaf_;
  std::vector<std::pair<std::uint64_t, std::function<void(const Tensor&)>>> hooks_;
  std::uint64_t next_hook_id_ = 1;
};

// The accumulator of a leaf that requires grad (created on first use and shared by every graph
// that reads the leaf); the node of a non-leaf; null for a tensor that needs no gradient.
std::shared_ptr<Node> gradient_sink(const Tensor& t);

// A tensor saved for a backward: a copy of the handle that holds the data but no history, so a
// node never keeps its own output alive. Its storage's version is noted, and the node that the
// next record() on this thread creates checks it before its backward runs: an op saves its
// tensors, then records its node.
Tensor save(const Tensor& t);
// Notes t (a handle the backward keeps) as save() does, without making a copy.
void note_saved(const Tensor& t);

// True when grad mode is on and any input requires a gradient.
bool needs_grad(const std::vector<Tensor>& inputs);

// Attaches a node named `name` to `out` when needs_grad(inputs); returns `out`.
Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward);

// Runs the backward pass from `root` (see Tensor::backward).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Sums `grad` over broadcast dims so that it has `shape` (the one central place that undoes
// broadcasting for every op).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace tinyformer::autograd
