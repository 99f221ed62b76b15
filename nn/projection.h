// Linformer's sequence projections: map the keys or the values x from n rows to k rows, k being
// the rank (docs/attention.md, "Projection kinds"). One small interface, one class per kind,
// and a registry so that a user adds a kind as one class plus one register_projection call.
//
// Every kind returns exactly k rows for every n <= max_seq_len:
// - linear: x' = E[:, :n] x with a learned E in R^{k x max_seq_len} (N(0, 1/k) initially).
// - mean / max pooling: window = stride = w = ceil(n / k). The sequence is cut into k windows
//   of w rows, the last ones partly or wholly beyond n; each output row is the mean (or max)
//   of the real rows of its window, and 0 for a window with none.
// - conv: a Conv1d over the sequence with kernel = stride = w = ceil(max_seq_len / k) and
//   channels = head width, weights shared by the heads; the sequence is zero-padded at the end
//   to k * w rows.
// - identity: x' = x (k must equal n); for tests and teaching (it makes Linformer attention
//   exactly full attention).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace tinyformer::nn {

class Projection : public Module {
 public:
  // x: [B, H, n, d] with n <= max_seq_len -> [B, H, k, d].
  virtual Tensor forward(const Tensor& x) const = 0;
  virtual std::int64_t k() const = 0;
};

// What a projection is built from.
struct ProjectionSpec {
  std::int64_t k = 0;
  std::int64_t max_seq_len = 0;
  std::int64_t head_dim = 0;
  // Number of separate matrices across heads: heads for sharing "none", 1 when heads share.
  std::int64_t heads = 1;
};

enum class ProjectionKind { linear, mean_pool, max_pool, conv, identity };
const char* projection_name(ProjectionKind kind);  // "linear", "mean", "max", "conv", "identity"

using ProjectionFactory = std::function<std::shared_ptr<Projection>(const ProjectionSpec&)>;
// Registers (or replaces) a kind under a name; the built-in kinds are registered already.
void register_projection(const std::string& name, ProjectionFactory factory);
std::shared_ptr<Projection> make_projection(const std::string& name, const ProjectionSpec& spec);
std::vector<std::string> projection_names();

class LinearProjection : public Projection {
 public:
  explicit LinearProjection(const ProjectionSpec& spec);
  Tensor forward(const Tensor& x) const override;
  std::int64_t k() const override { return weight.size(1); }
  std::string type_name() const override { return "LinearProjection"; }
  std::string extra_repr() const override;

  Tensor weight;  // E: [heads, k, max_seq_len]
};

class PoolProjection : public Projection {
 public:
  PoolProjection(const ProjectionSpec& spec, bool max);
  Tensor forward(const Tensor& x) const override;
  std::int64_t k() const override { return k_; }
  std::string type_name() const override {
    return max_ ? "MaxPoolProjection" : "MeanPoolProjection";
  }
  std::string extra_repr() const override { return "k=" + std::to_string(k_); }

 private:
  std::int64_t k_, max_seq_len_;
  bool max_;
};

class ConvProjection : public Projection {
 public:
  explicit ConvProjection(const ProjectionSpec& spec);
  Tensor forward(const Tensor& x) const override;
  std::int64_t k() const override { return k_; }
  std::string type_name() const override { return "ConvProjection"; }
  std::string extra_repr() const override;

  Tensor weight;  // [d, d, w], no bias: a bias would add the same row to every output

 private:
  std::int64_t k_, max_seq_len_, window_;
};

class IdentityProjection : public Projection {
 public:
  explicit IdentityProjection(const ProjectionSpec& spec) : k_(spec.k) {}
  Tensor forward(const Tensor& x) const override;
  std::int64_t k() const override { return k_; }
  std::string type_name() const override { return "IdentityProjection"; }

 private:
  std::int64_t k_;
};

}  // namespace tinyformer::nn
