// Mixed precision: under an AutocastGuard, matrix products run on bfloat16 operands (float32
// accumulation in the kernels) and float32-only ops widen bfloat16 inputs; docs/mixed_precision.md.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/node.h"
#include "core/tensor.h"

namespace tinyformer {

// bfloat16 copies of float32 tensors (the parameters, whose float32 values are the masters the
// optimizer updates), rounded once by refresh() instead of at every product. A product under an
// AutocastGuard that names this cache reads a master, or any view of one (weight.transpose(0, 1)),
// through its copy, and the gradient reaches the master in float32.
class AutocastCache {
 public:
  explicit AutocastCache(DType dtype = DType::bfloat16);

  // Registers a contiguous float32 tensor; its copy is made by the next refresh().
  void add(const Tensor& master);
  // Rounds every master into a new copy: call it after each optimizer step and after loading
  // weights. A new copy each time, so that a graph still alive keeps the values it was built on.
  void refresh();
  // The copy seen through `operand`'s layout when `operand` is a float32 view inside a
  // registered master (same storage as at the last refresh); undefined otherwise.
  Tensor lookup(const Tensor& operand) const;
  // The current copy of a registered master (undefined before the first refresh).
  Tensor copy_of(const Tensor& master) const;

  DType dtype() const { return dtype_; }
  std::size_t size() const { return entries_.size(); }
  // How many masters refresh() has rounded so far (each refresh counts each master once).
  std::int64_t conversions() const { return conversions_; }

 private:
  struct Entry {
    Tensor master;
    Tensor copy;                       // contiguous, the master's shape, dtype_
    std::shared_ptr<Storage> storage;  // the master's storage when the copy was made
  };
  DType dtype_;
  std::vector<Entry> entries_;
  std::int64_t conversions_ = 0;
};

struct AutocastCasts;  // the activations rounded under one guard (autograd/autocast.cpp)

// While alive, differentiable matrix products (matmul, and with it the products inside
// fused_attention and nn::functional attention) whose operands are float32 compute in `dtype`
// (bfloat16, or float32, which turns autocast off) and return float32, and softmax,
// log_softmax, layer_norm and nll_loss widen `dtype` inputs to float32. Parameters registered in
// `cache` are read through their cached copies; an activation read by several products (the
// input of the query, key and value projections) is rounded once per guard, and its products
// save that one copy. Thread-local, like NoGradGuard.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype, const AutocastCache* cache = nullptr);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_dtype_;
  const AutocastCache* previous_cache_;
  AutocastCasts* previous_casts_;
  std::unique_ptr<AutocastCasts> casts_;
};

// The dtype products compute in under the innermost AutocastGuard; nullopt when autocast is off.
std::optional<DType> autocast_dtype();

// --- The hooks at the ops' entries ---

// For a product op: its operands in the autocast dtype (a cached copy where one is registered,
// else a differentiable cast) when autocast is on and every operand is floating, on one device,
// float32 or already the autocast dtype, and at least one is float32; nullopt otherwise. The
// op then runs on these under AutocastSuspend and widens its result to float32.
std::optional<std::vector<Tensor>> autocast_operands(std::initializer_list<Tensor> operands);

// For a float32-only op: `x` widened to float32 when autocast is on and x has the autocast dtype.
Tensor autocast_to_float(const Tensor& x);

// Turns autocast off for a scope: an op that has lowered its operands runs on them as they are,
// its inner steps neither lowered again nor widened.
class AutocastSuspend {
 public:
  AutocastSuspend() : guard_(DType::float32) {}

 private:
  AutocastGuard guard_;
};

namespace autograd {
// `backward` wrapped to run under the autocast dtype active now (without the cache, which may be
// gone by then), so that the products a hand-written backward computes (fused attention's) run
// in that dtype like the forward's; `backward` itself when autocast is off. record() calls it.
BackwardFn autocast_backward(BackwardFn backward);
}  // namespace autograd

}  // namespace tinyformer
