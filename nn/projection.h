// Linformer's sequence projections: map the keys or the values x from n rows to k rows, k being
// the rank (docs/attention.md, "Projection kinds"). One small interface, one class per kind,
// and a registry so that a user adds a kind as one class plus one register_projection call.
//
// Every kind returns exactly k rows for every n <= max_seq_len. A sequence's real positions are
// those its key-padding mask leaves false (all n without a mask); m is their number.
// - linear: x' = E[:, :n] x with a learned E in R^{k x max_seq_len}. By default E starts as
//   mean pooling over max_seq_len (row i averages pool_window(i, max_seq_len, k); with a matrix
//   per head, each head's windows shifted: pooling_start_window) and learns at
//   a tenth of the learning rate without weight decay (ProjectionSpec::init and lr_scale;
//   docs/linformer.md, "Learning E"); ProjectionInit::normal starts it at N(0, 1/k). Padded
//   rows arrive zeroed, so they add nothing. A summary row whose weights over a sequence's real
//   positions are all exactly zero covers none of them and is reported empty (with the pooling
//   start, the rows whose windows lie beyond a short sequence).
// - mean / max pooling: windows over the real positions of each sequence, like adaptive
//   pooling. For m >= k, window i holds real positions floor(i m / k) .. ceil((i + 1) m / k) - 1
//   (never empty; neighbouring windows may share a row); for m < k, window i holds real
//   position i alone for i < m, and windows m .. k-1 are empty. Each output row is the mean (or
//   max) of its window; an empty window gives 0 and is reported empty.
// - conv: a Conv1d over the sequence with kernel = stride = w = ceil(max_seq_len / k) and
//   channels = head width: one kernel per head for sharing "none", one for all heads
//   otherwise. The windows are fixed by max_seq_len: window i covers positions i*w .. i*w+w-1,
//   the sequence zero-padded at the end to k * w rows; a window with no real position is
//   reported empty.
// - identity: x' = x (k must equal n); its padded rows are reported empty. For tests and
//   teaching (it makes Linformer attention exactly full attention).
// LinformerAttention excludes the empty rows from the softmax (weight exactly 0), so a summary
// row that covers no real position never soaks up attention. Pooling works on the real positions
// wherever the padding lies; linear and conv index positions, so a padded sequence gives what
// its cut version gives when the padding is at the end (as batches are padded).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace tinyformer::nn {

// A projection's result: the k summary rows and which of them cover no real position.
struct Projected {
  Tensor rows;  // [B, H, k, d]
  // [B, k] bool, true where summary row i of sequence b covers no real position (the attention
  // excludes it), or [B, H, k] when the heads' rows differ (the linear kind with a matrix per
  // head); undefined when no row is empty.
  Tensor empty_rows;
};

class Projection : public Module {
 public:
  // x: [B, H, n, d] with n <= max_seq_len -> [B, H, k, d], every position real. Rows that
  // cover no position (pooling with n < k, conv windows beyond n) are 0; project() reports them.
  virtual Tensor forward(const Tensor& x) const = 0;
  // The same for a padded batch. x: [B, H, n, d] with its padded rows already zeroed;
  // key_padding_mask: [B, n] bool, true at padded positions, or undefined (nothing padded).
  // A padded position must contribute nothing to any summary row. The default, forward(x) with
  // no empty row, is right for every kind whose rows are products of a matrix with x (like
  // linear): the zeroed rows then add exactly nothing, and every row mixes all real positions.
  virtual Projected project(const Tensor& x, const Tensor& key_padding_mask) const;
  virtual std::int64_t k() const = 0;
};

// The pooling window rule (see above): the real positions [start, end) that window i of k
// covers in a sequence of m real positions; start == end for an empty window.
std::pair<std::int64_t, std::int64_t> pool_window(std::int64_t i, std::int64_t m, std::int64_t k);

// How a learned projection's weights start: as mean pooling over max_seq_len's windows, or
// random (the linear kind: N(0, 1/k), the paper's fairseq code's scale).
enum class ProjectionInit { pooling, normal };
const char* projection_init_name(ProjectionInit init);  // "pooling", "normal"

// What a projection is built from.
struct ProjectionSpec {
  std::int64_t k = 0;
  std::int64_t max_seq_len = 0;
  std::int64_t head_dim = 0;
  // Number of separate matrices across heads: heads for sharing "none", 1 when heads share.
  std::int64_t heads = 1;
  // The linear kind's recipe: its start, and the fraction of the learning rate its E gets from
  // an optimizer built with optim::decay_groups (which also leaves E undecayed).
  ProjectionInit init = ProjectionInit::pooling;
  double lr_scale = 0.1;
};

// Window i of head `head` in the linear kind's pooling start, over positions [0, max_seq_len):
// pool_window(i, max_seq_len, k) shifted right by s = head * floor(max_seq_len / k) / heads
// positions (integer division), the first window reaching down to 0 and the last up to
// max_seq_len, so that each head's windows cover every position. With a
// matrix per head (sharing "none"), the heads' window boundaries thus fall at different
// positions; with one matrix (heads == 1) s is 0 and the windows are pool_window's.
std::pair<std::int64_t, std::int64_t> pooling_start_window(std::int64_t head, std::int64_t i,
                                                           const ProjectionSpec& spec);

// The built-in kinds; each enumerator is named as the kind is registered. mean_pool and
// max_pool are other spellings of mean and max (the same values), and "mean_pool" and
// "max_pool" are accepted wherever a kind is named.
enum class ProjectionKind { linear, mean, max, conv, identity, mean_pool = mean, max_pool = max };
const char* projection_name(ProjectionKind kind);  // "linear", "mean", "max", "conv", "identity"
// The registered name a kind's name stands for: "mean_pool" -> "mean", "max_pool" -> "max", any
// other name itself.
std::string canonical_projection_name(const std::string& name);

using ProjectionFactory = std::function<std::shared_ptr<Projection>(const ProjectionSpec&)>;
// Registers (or replaces) a kind under a name; the built-in kinds are registered already.
void register_projection(const std::string& name, ProjectionFactory factory);
// The projection of kind `name` built from `spec`. An Error for an unknown name, and for a
// factory that returns null or a projection of another k than spec.k.
std::shared_ptr<Projection> make_projection(const std::string& name, const ProjectionSpec& spec);
// Whether `name` (or its other spelling) is a built-in kind not replaced by register_projection
// since: its parameters are then known from the spec alone (nn/model_shapes.h).
bool is_builtin_projection(const std::string& name);
// The registered names, sorted (without the other spellings mean_pool and max_pool).
std::vector<std::string> projection_names();

class LinearProjection : public Projection {
 public:
  explicit LinearProjection(const ProjectionSpec& spec);
  Tensor forward(const Tensor& x) const override;
  Projected project(const Tensor& x, const Tensor& key_padding_mask) const override;
  std::int64_t k() const override { return weight.size(1); }
  std::string type_name() const override { return "LinearProjection"; }
  std::string extra_repr() const override;

  Tensor weight;  // E: [heads, k, max_seq_len]
};

class PoolProjection : public Projection {
 public:
  PoolProjection(const ProjectionSpec& spec, bool max);
  Tensor forward(const Tensor& x) const override;
  Projected project(const Tensor& x, const Tensor& key_padding_mask) const override;
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
  Projected project(const Tensor& x, const Tensor& key_padding_mask) const override;
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
  Projected project(const Tensor& x, const Tensor& key_padding_mask) const override;
  std::int64_t k() const override { return k_; }
  std::string type_name() const override { return "IdentityProjection"; }

 private:
  std::int64_t k_;
};

}  // namespace tinyformer::nn
