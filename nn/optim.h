// Optimizers (SGD, Adam, AdamW) over parameter groups, with state dicts for checkpoints, and
// gradient clipping by global norm. Semantics follow torch.optim exactly.
//
// A training step:
//   optimizer.zero_grad();
//   loss.backward();
//   nn::optim::clip_grad_norm(model->parameters(), 1.0);
//   optimizer.set_lr(schedule.lr_at(step));
//   optimizer.step();
//
// Gradient accumulation needs no support of its own: backward() adds into .grad(), so several
// micro-batches each calling (loss / num_micro_batches).backward() before one step() give the
// gradient of the mean loss over the whole batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"

namespace tinyformer::nn::optim {

// Parameters that share a learning rate and weight decay. A group that leaves lr or
// weight_decay unset takes the optimizer's value. lr_scale multiplies the group's learning rate
// at construction and at every set_lr(lr) for all groups, so a schedule that sets one rate each
// step keeps a group at its fraction of it (set_lr(group, lr) sets that group's rate as given).
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
  double lr_scale = 1.0;
};

// The default groups. First two, in this order: the parameters with dim >= 2 (weight matrices,
// embeddings, convolution kernels) with `weight_decay`, and the rest (biases, LayerNorm weights
// and biases) with none. Decaying a gain or a shift towards zero only fights normalisation.
// Then one group for each other combination of decay and lr_scale that a module asked for
// through ParamOptions (Module::set_param_options), in the order first met: the linear
// Linformer projection's E, for one, learns at a tenth of the rate and is not decayed
// (docs/linformer.md). The first two groups exist even when empty.
std::vector<ParamGroup> decay_groups(const Module& module, double weight_decay);

// The base class: groups, per-parameter state, step() and the state dict.
//
// Parameters are numbered 0, 1, ... across groups in order. state_dict() holds
//   "param_groups.<g>.lr", "param_groups.<g>.weight_decay"   float64 scalars,
//   "param_groups.<g>.params"                                 int64 [n]: the indices in group g,
//   "state.<i>.step"                                          int64 scalar (Adam, AdamW),
//   "state.<i>.<buffer>"                                      like parameter i,
// where <buffer> is exp_avg and exp_avg_sq (Adam, AdamW) or momentum_buffer (SGD with
// momentum). A parameter that has never been updated has no state entries.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient, in place, outside the graph. Parameters
  // without a gradient (unused this step, or frozen) are skipped and their state is untouched.
  void step();
  // Drops every gradient (as PyTorch's zero_grad(set_to_none=True) does).
  void zero_grad();

  std::size_t num_groups() const { return groups_.size(); }
  const std::vector<Tensor>& group_params(std::size_t group) const;
  std::vector<Tensor> parameters() const;  // all groups, in index order

  double lr(std::size_t group = 0) const;
  void set_lr(double lr);  // every group: lr times the group's lr_scale
  void set_lr(std::size_t group, double lr);
  double weight_decay(std::size_t group = 0) const;
  void set_weight_decay(std::size_t group, double weight_decay);

  // The step count of parameter `index` (0 before its first update; SGD counts none).
  std::int64_t step_count(std::size_t index) const;
  // The largest step count a state dict may hold: 2^53, beyond which the count, read as the
  // double of the bias correction, no longer grows by one each step (and far beyond any run).
  static constexpr std::int64_t kMaxStepCount = std::int64_t{1} << 53;

  StateDict state_dict() const;
  // Throws an Error naming the first entry that does not fit this optimizer (unknown or missing
  // names, another group layout, a shape that differs from the parameter's, a step count
  // outside [1, kMaxStepCount], a non-finite buffer or a negative second moment); changes
  // nothing.
  void check_state_dict(const StateDict& state) const;
  // check_state_dict, then replaces the whole state and the groups' lr and weight_decay. The
  // buffers are copied to each parameter's dtype and device.
  void load_state_dict(const StateDict& state);

  virtual std::string type_name() const = 0;
  // Whether the state holds a step count per parameter (Adam, AdamW; not SGD).
  virtual bool counts_steps() const = 0;

 protected:
  // What one parameter carries between steps.
  struct ParamState {
    std::int64_t step = 0;
    std::map<std::string, Tensor> buffers;  // empty until the first update
  };

  Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay,
            const std::string& name);

  // The buffer names of an updated parameter's state.
  virtual std::vector<std::string> state_names() const = 0;
  // Whether the values of a buffer must be >= 0 (Adam's second moment); checked on load.
  virtual bool non_negative_buffer(const std::string& /*name*/) const { return false; }
  // One parameter's update, called under NoGradGuard with a gradient of the parameter's shape,
  // dtype and device. Writes the new values into `param` in place.
  virtual void update(const Tensor& param, const Tensor& grad, ParamState& state, double lr,
                      double weight_decay) = 0;

 private:
  struct Group {
    std::vector<Tensor> params;
    std::vector<std::size_t> indices;  // into params_
    double lr;
    double weight_decay;
    double lr_scale;
  };
  const Group& group_at(std::size_t group, const char* op) const;

  std::string name_;
  std::vector<Group> groups_;
  std::vector<Tensor> params_;
  std::vector<ParamState> state_;
};

// torch.optim.SGD:
//   g = grad + weight_decay * p
//   buf = g (first step), else momentum * buf + (1 - dampening) * g
//   g = g + momentum * buf (nesterov), else buf          [only when momentum != 0]
//   p = p - lr * g
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});
  std::string type_name() const override { return "SGD"; }
  bool counts_steps() const override { return false; }
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_names() const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state, double lr,
              double weight_decay) override;

 private:
  SGDOptions options_;
};

// torch.optim.Adam (weight decay as L2: added to the gradient) and torch.optim.AdamW (decoupled
// weight decay: the parameter shrinks by lr * weight_decay before the Adam step). At step t:
//   g = grad + weight_decay * p                  [Adam]      p = p * (1 - lr * weight_decay)
//   [AdamW] m = beta1 * m + (1 - beta1) * g v = beta2 * v + (1 - beta2) * g^2 p = p - lr / (1 -
//   beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// eps is added after the square root of the bias-corrected second moment, as PyTorch does.
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // PyTorch's default for AdamW
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {});
  std::string type_name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  bool counts_steps() const override { return true; }
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled);
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  bool non_negative_buffer(const std::string& name) const override { return name == "exp_avg_sq"; }
  void update(const Tensor& param, const Tensor& grad, ParamState& state, double lr,
              double weight_decay) override;

 private:
  AdamOptions options_;
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
};

// Scales the gradients of `params` so that their global 2-norm (all gradients taken as one
// vector) is at most max_norm: each is multiplied by max_norm / (norm + 1e-6) when that is
// below 1, as torch.nn.utils.clip_grad_norm_ does. Parameters without a gradient are skipped.
// Returns the norm before clipping (computed in float64). A non-finite norm is returned with
// the gradients left as they are, so the caller can see it and skip the step.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace tinyformer::nn::optim
