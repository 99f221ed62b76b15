// Optimizers: parameter groups, the state dict, the SGD update written as a composition of
// tensor ops, the Adam / AdamW update as one fused primitive per parameter (adamw_step, on any
// backend), and gradient clipping.
#include "nn/optim.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer::nn::optim {

namespace {

void check_hyper(bool ok, const std::string& op, const char* what, double value,
                 const char* expected) {
  TF_CHECK(ok, op, ": expected ", what, " ", expected, ", got ", value);
}

void check_lr(const std::string& op, double lr) {
  check_hyper(std::isfinite(lr) && lr >= 0.0, op, "lr", lr, ">= 0");
}

void check_weight_decay(const std::string& op, double weight_decay) {
  check_hyper(std::isfinite(weight_decay) && weight_decay >= 0.0, op, "weight_decay", weight_decay,
              ">= 0");
}

std::vector<ParamGroup> single_group(std::vector<Tensor> params) {
  return {ParamGroup{.params = std::move(params), .lr = {}, .weight_decay = {}}};
}

// "state.12.exp_avg" -> (12, "exp_avg"); "param_groups.0.lr" -> (0, "lr"). False when `key`
// does not start with `prefix` followed by a decimal index and a dot.
bool split_key(const std::string& key, const std::string& prefix, std::size_t& index,
               std::string& field) {
  if (key.rfind(prefix, 0) != 0) return false;
  const char* begin = key.data() + prefix.size();
  const char* end = key.data() + key.size();
  const auto [ptr, ec] = std::from_chars(begin, end, index);
  if (ec != std::errc() || ptr == begin || ptr == end || *ptr != '.') return false;
  if (*begin == '0' && ptr - begin > 1) return false;  // "01" is not a canonical index
  field.assign(ptr + 1, end);
  return !field.empty();
}

std::string describe(const Tensor& t) {
  return detail::concat(t.dtype(), " ", shape_str(t.shape()));
}

// A fresh tensor with src's values in `like`'s dtype and device: loaded state must not alias
// the caller's tensors.
Tensor copy_like(const Tensor& src, const Tensor& like) {
  Tensor out = empty(like.shape(), {.dtype = like.dtype(), .device = like.device()});
  raw::copy(src, out);
  return out;
}

}  // namespace

std::vector<ParamGroup> decay_groups(const Module& module, double weight_decay) {
  check_weight_decay("decay_groups", weight_decay);
  std::vector<ParamGroup> groups = {{.params = {}, .lr = {}, .weight_decay = weight_decay},
                                    {.params = {}, .lr = {}, .weight_decay = 0.0}};
  // What tells groups apart: whether the group decays, and its lr_scale.
  std::vector<std::pair<bool, double>> keys = {{true, 1.0}, {false, 1.0}};
  for (const auto& [p, options] : module.parameters_with_options()) {
    const std::pair<bool, double> key{options.decay.value_or(p.dim() >= 2), options.lr_scale};
    std::size_t g = std::find(keys.begin(), keys.end(), key) - keys.begin();
    if (g == keys.size()) {
      keys.push_back(key);
      groups.push_back({.params = {},
                        .lr = {},
                        .weight_decay = key.first ? weight_decay : 0.0,
                        .lr_scale = key.second});
    }
    groups[g].params.push_back(p);
  }
  return groups;
}

// --- Optimizer ---

Optimizer::Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay,
                     const std::string& name)
    : name_(name) {
  check_lr(name_, default_lr);
  check_weight_decay(name_, default_weight_decay);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    Group group;
    const double scale = groups[g].lr_scale;
    TF_CHECK(std::isfinite(scale) && scale > 0, name_, ": group ", g,
             " expects a positive, finite lr_scale, got ", scale);
    group.lr_scale = scale;
    group.lr = groups[g].lr.value_or(default_lr) * scale;
    group.weight_decay = groups[g].weight_decay.value_or(default_weight_decay);
    check_lr(name_ + ": group " + std::to_string(g), group.lr);
    check_weight_decay(name_ + ": group " + std::to_string(g), group.weight_decay);
    for (const Tensor& p : groups[g].params) {
      const std::size_t index = params_.size();
      TF_CHECK(p.defined(), name_, ": parameter ", index, " (group ", g,
               ") is an undefined Tensor");
      TF_CHECK(is_floating(p.dtype()), name_, ": expected floating parameters, parameter ", index,
               " is ", p.dtype());
      TF_CHECK(p.is_leaf(), name_, ": parameter ", index,
               " is not a leaf tensor (it has a grad_fn): optimize the tensor it came from");
      for (std::size_t j = 0; j < params_.size(); ++j) {
        TF_CHECK(!params_[j].is_same(p), name_, ": parameter ", index,
                 " is the same tensor as parameter ", j,
                 "; a parameter may appear only once across all groups");
      }
      params_.push_back(p);
      group.params.push_back(p);
      group.indices.push_back(index);
    }
    groups_.push_back(std::move(group));
  }
  TF_CHECK(!params_.empty(), name_, ": got an empty parameter list");
  state_.resize(params_.size());
}

const Optimizer::Group& Optimizer::group_at(std::size_t group, const char* op) const {
  TF_CHECK(group < groups_.size(), name_, "::", op, ": group ", group, " out of range (",
           groups_.size(), " groups)");
  return groups_[group];
}

const std::vector<Tensor>& Optimizer::group_params(std::size_t group) const {
  return group_at(group, "group_params").params;
}

std::vector<Tensor> Optimizer::parameters() const {
  return params_;
}

double Optimizer::lr(std::size_t group) const {
  return group_at(group, "lr").lr;
}

void Optimizer::set_lr(double lr) {
  check_lr(name_ + "::set_lr", lr);
  for (Group& g : groups_) g.lr = lr * g.lr_scale;
}

void Optimizer::set_lr(std::size_t group, double lr) {
  check_lr(name_ + "::set_lr", lr);
  group_at(group, "set_lr");
  groups_[group].lr = lr;
}

double Optimizer::weight_decay(std::size_t group) const {
  return group_at(group, "weight_decay").weight_decay;
}

void Optimizer::set_weight_decay(std::size_t group, double weight_decay) {
  check_weight_decay(name_ + "::set_weight_decay", weight_decay);
  group_at(group, "set_weight_decay");
  groups_[group].weight_decay = weight_decay;
}

std::int64_t Optimizer::step_count(std::size_t index) const {
  TF_CHECK(index < params_.size(), name_, "::step_count: parameter ", index, " out of range (",
           params_.size(), " parameters)");
  return state_[index].step;
}

void Optimizer::step() {
  // Every gradient is checked before any parameter moves, so a bad one leaves the model as it
  // was instead of half-updated.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    TF_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(), name_,
             "::step: the gradient of parameter ", i, " is ", describe(g), " on ", g.device(),
             ", the parameter is ", describe(p), " on ", p.device());
  }
  NoGradGuard no_grad;
  for (const Group& group : groups_) {
    for (std::size_t k = 0; k < group.params.size(); ++k) {
      const Tensor& p = group.params[k];
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      update(p, g, state_[group.indices[k]], group.lr, group.weight_decay);
    }
  }
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    out.emplace_back(prefix + "lr", scalar_tensor(groups_[g].lr, {.dtype = kFloat64}));
    out.emplace_back(prefix + "weight_decay",
                     scalar_tensor(groups_[g].weight_decay, {.dtype = kFloat64}));
    std::vector<std::int64_t> indices(groups_[g].indices.begin(), groups_[g].indices.end());
    out.emplace_back(prefix + "params", from(indices, {static_cast<std::int64_t>(indices.size())}));
  }
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].buffers.empty() && state_[i].step == 0) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    if (counts_steps()) {
      out.emplace_back(prefix + "step",
                       scalar_tensor(static_cast<double>(state_[i].step), {.dtype = kInt64}));
    }
    // Adam's step writes its buffers in place, so the dict holds copies: a snapshot that later
    // steps leave alone.
    for (const std::string& name : state_names()) {
      const Tensor& buffer = state_[i].buffers.at(name);
      out.emplace_back(prefix + name, copy_like(buffer, buffer));
    }
  }
  return out;
}

void Optimizer::check_state_dict(const StateDict& state) const {
  const std::string op = name_ + "::load_state_dict";
  const std::vector<std::string> buffers = state_names();
  std::set<std::string> seen;
  std::map<std::size_t, std::set<std::string>> group_fields, param_fields;
  for (const auto& [key, t] : state) {
    TF_CHECK(seen.insert(key).second, op, ": \"", key, "\" appears twice");
    TF_CHECK(t.defined(), op, ": \"", key, "\" is an undefined Tensor");
    std::size_t index = 0;
    std::string field;
    if (split_key(key, "param_groups.", index, field)) {
      TF_CHECK(index < groups_.size(), op, ": \"", key, "\" names group ", index, ", the ", name_,
               " has ", groups_.size(), " groups");
      const Group& group = groups_[index];
      if (field == "lr" || field == "weight_decay") {
        TF_CHECK(t.numel() == 1 && is_floating(t.dtype()), op, ": \"", key,
                 "\" must be a floating scalar, got ", describe(t));
        const double value = t.item<double>();
        TF_CHECK(std::isfinite(value) && value >= 0.0, op, ": \"", key,
                 "\" must be finite and >= 0, got ", value);
      } else if (field == "params") {
        TF_CHECK(t.dtype() == kInt64 && t.dim() == 1, op, ": \"", key,
                 "\" must be an int64 vector, got ", describe(t));
        const std::vector<std::int64_t> got = t.to_vector<std::int64_t>();
        const std::vector<std::int64_t> want(group.indices.begin(), group.indices.end());
        TF_CHECK(got == want, op, ": group ", index, " holds ", got.size(),
                 " parameters in the saved state, this ", name_, "'s holds ", want.size(),
                 got.size() == want.size() ? " with other indices" : "",
                 ": the parameter groups differ");
      } else {
        fail(op, ": unexpected entry \"", key, "\"");
      }
      group_fields[index].insert(field);
    } else if (split_key(key, "state.", index, field)) {
      TF_CHECK(index < params_.size(), op, ": \"", key, "\" names parameter ", index, ", the ",
               name_, " has ", params_.size(), " parameters");
      const Tensor& p = params_[index];
      if (field == "step" && counts_steps()) {
        TF_CHECK(t.numel() == 1 && t.dtype() == kInt64, op, ": \"", key,
                 "\" must be an int64 scalar, got ", describe(t));
        TF_CHECK(t.item<std::int64_t>() >= 1 && t.item<std::int64_t>() <= kMaxStepCount, op, ": \"",
                 key, "\" must lie in [1, ", kMaxStepCount, "], got ", t.item<std::int64_t>());
      } else if (std::find(buffers.begin(), buffers.end(), field) != buffers.end()) {
        TF_CHECK(is_floating(t.dtype()) && t.shape() == p.shape(), op, ": \"", key, "\" is ",
                 describe(t), ", parameter ", index, " is ", describe(p));
        // A NaN or infinity here, or a negative second moment (whose square root Adam takes),
        // would turn the parameter into NaN at the next step.
        const bool non_negative = non_negative_buffer(field);
        const std::vector<double> values = t.to_vector<double>();
        for (std::size_t j = 0; j < values.size(); ++j) {
          TF_CHECK(std::isfinite(values[j]) && (!non_negative || values[j] >= 0.0), op, ": \"", key,
                   "\" element ", j, " is ", values[j], " (expected a finite",
                   non_negative ? ", non-negative" : "", " value)");
        }
      } else {
        std::string known = counts_steps() ? "step" : "";
        for (const auto& b : buffers) known += (known.empty() ? "" : ", ") + b;
        fail(op, ": unexpected entry \"", key, "\" (the state of a parameter of ", name_, " holds ",
             known.empty() ? "nothing" : known, ")");
      }
      param_fields[index].insert(field);
    } else {
      fail(op, ": unexpected entry \"", key, "\"");
    }
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (const char* field : {"lr", "weight_decay", "params"}) {
      TF_CHECK(group_fields[g].count(field), op, ": missing entry \"param_groups.", g, ".", field,
               "\"");
    }
  }
  for (const auto& [index, fields] : param_fields) {
    std::vector<std::string> want = buffers;
    if (counts_steps()) want.push_back("step");
    for (const auto& field : want) {
      TF_CHECK(fields.count(field), op, ": missing entry \"state.", index, ".", field, "\"");
    }
  }
}

void Optimizer::load_state_dict(const StateDict& state) {
  check_state_dict(state);
  std::vector<ParamState> loaded(params_.size());
  std::vector<Group> groups = groups_;
  for (const auto& [key, t] : state) {
    std::size_t index = 0;
    std::string field;
    if (split_key(key, "param_groups.", index, field)) {
      if (field == "lr") groups[index].lr = t.item<double>();
      if (field == "weight_decay") groups[index].weight_decay = t.item<double>();
    } else if (split_key(key, "state.", index, field)) {
      if (field == "step" && counts_steps()) {
        loaded[index].step = t.item<std::int64_t>();
      } else {
        NoGradGuard no_grad;
        loaded[index].buffers[field] = copy_like(t, params_[index]);
      }
    }
  }
  groups_ = std::move(groups);
  state_ = std::move(loaded);
}

// --- SGD ---

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(single_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, "SGD"), options_(options) {
  check_hyper(std::isfinite(options.momentum) && options.momentum >= 0.0, "SGD", "momentum",
              options.momentum, ">= 0");
  check_hyper(std::isfinite(options.dampening), "SGD", "dampening", options.dampening, "finite");
  TF_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
           "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum ", options.momentum,
           " and dampening ", options.dampening);
}

std::vector<std::string> SGD::state_names() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::update(const Tensor& param, const Tensor& grad, ParamState& state, double lr,
                 double weight_decay) {
  Tensor d = weight_decay != 0.0 ? grad + param * weight_decay : grad;
  if (options_.momentum != 0.0) {
    auto it = state.buffers.find("momentum_buffer");
    if (it == state.buffers.end()) {
      // The first step takes the gradient itself (no dampening), as PyTorch does.
      it = state.buffers.emplace("momentum_buffer", clone(d)).first;
    } else {
      it->second = it->second * options_.momentum + d * (1.0 - options_.dampening);
    }
    const Tensor& buf = it->second;
    d = options_.nesterov ? d + buf * options_.momentum : buf;
  }
  raw::copy(param - d * lr, param);
}

// --- Adam and AdamW ---

namespace {
void check_adam(const std::string& name, const AdamOptions& o) {
  check_hyper(o.betas.first >= 0.0 && o.betas.first < 1.0, name, "beta1", o.betas.first,
              "in [0, 1)");
  check_hyper(o.betas.second >= 0.0 && o.betas.second < 1.0, name, "beta2", o.betas.second,
              "in [0, 1)");
  check_hyper(std::isfinite(o.eps) && o.eps >= 0.0, name, "eps", o.eps, ">= 0");
}

AdamOptions as_adam(const AdamWOptions& o) {
  return {.lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(single_group(std::move(params)), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options)
    : Adam(std::move(groups), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, decoupled ? "AdamW" : "Adam"),
      options_(options),
      decoupled_(decoupled) {
  check_adam(type_name(), options);
}

void Adam::update(const Tensor& param, const Tensor& grad, ParamState& state, double lr,
                  double weight_decay) {
  const auto [beta1, beta2] = options_.betas;
  // The fused step wants contiguous tensors. State made here or loaded by load_state_dict is;
  // a parameter or gradient that is a strided view is stepped through a contiguous copy.
  auto moment = [&](const char* name) {
    const auto it = state.buffers.find(name);
    if (it == state.buffers.end() || !it->second.defined()) {
      return zeros(param.shape(), {.dtype = param.dtype(), .device = param.device()});
    }
    return it->second.is_contiguous() ? it->second : raw::contiguous(it->second);
  };
  const Tensor m = moment("exp_avg"), v = moment("exp_avg_sq");
  const std::int64_t step = state.step + 1;
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(beta1, t);
  const double bias_correction2 = 1.0 - std::pow(beta2, t);
  const Tensor p = param.is_contiguous() ? param : raw::contiguous(param);
  // One primitive per parameter (core/ops.def, adamw_step): AdamW shrinks p by lr *
  // weight_decay before the Adam step, Adam adds weight_decay * p to the gradient.
  backend(param.device())
      .adamw_step(p, raw::contiguous(grad), m, v, lr, beta1, beta2, options_.eps, weight_decay,
                  decoupled_, bias_correction1, bias_correction2);
  if (p.is_same(param)) {
    param.bump_version();  // changed in place (raw::copy bumps it otherwise)
  } else {
    raw::copy(p, param);
  }
  // The state changes only once the step has gone through, so a step that throws leaves it as
  // it was.
  state.buffers["exp_avg"] = m;
  state.buffers["exp_avg_sq"] = v;
  state.step = step;
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam(single_group(std::move(params)), as_adam(options), true) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Adam(std::move(groups), as_adam(options), true) {}

// --- Gradient clipping ---

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TF_CHECK(std::isfinite(max_norm) && max_norm > 0.0, "clip_grad_norm: expected max_norm > 0, got ",
           max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < params.size(); ++i) {
    TF_CHECK(params[i].defined(), "clip_grad_norm: parameter ", i, " is an undefined Tensor");
    const Tensor g = params[i].grad();
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return 0.0;

  // Each gradient's sum of squares (one sum_squares call, in float64) goes to its slot of a
  // float64 buffer on the gradient's device; each buffer then comes to the host once, so a GPU
  // is not waited for gradient by gradient. The sums are added in the parameters' order.
  std::vector<Device> devices;
  std::vector<std::size_t> device_of(grads.size()), slot_of(grads.size());
  std::vector<std::int64_t> counts;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const auto it = std::find(devices.begin(), devices.end(), grads[i].device());
    device_of[i] = static_cast<std::size_t>(it - devices.begin());
    if (it == devices.end()) {
      devices.push_back(grads[i].device());
      counts.push_back(0);
    }
    slot_of[i] = static_cast<std::size_t>(counts[device_of[i]]++);
  }
  std::vector<Tensor> sums(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) {
    sums[d] = empty({counts[d]}, {.dtype = kFloat64, .device = devices[d]});
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    Backend& be = backend(grads[i].device());
    Tensor g = grads[i];
    if (!be.supports(Op::sum_squares, g.dtype())) g = to(g, kFloat64);  // bfloat16: widened
    const Tensor& buffer = sums[device_of[i]];
    be.sum_squares(
        g.is_contiguous() ? g : raw::contiguous(g),
        raw::as_strided(buffer, {1}, {1}, buffer.offset() + static_cast<std::int64_t>(slot_of[i])));
  }
  std::vector<Tensor> host(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) host[d] = to(sums[d], Device::cpu());
  double sum_sq = 0.0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    sum_sq += host[device_of[i]].data<double>()[slot_of[i]];
  }
  const double norm = std::sqrt(sum_sq);
  if (!std::isfinite(norm)) return norm;
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1.0) {
    for (const Tensor& g : grads) {
      // g * scale in g's dtype, in place where g is contiguous (binary's out may be its first
      // operand); a dtype the backend does not multiply (bfloat16) through float64, rounded once.
      Backend& be = backend(g.device());
      if (!be.supports(Op::binary, g.dtype())) {
        raw::copy(to(g, kFloat64) * scale, g);
      } else if (g.is_contiguous()) {
        const Tensor s = scalar_tensor(scale, {.dtype = g.dtype(), .device = g.device()});
        be.binary(BinaryOp::mul, g, raw::expand(s, g.shape(), "clip_grad_norm"), g);
      } else {
        raw::copy(g * scale, g);
      }
    }
  }
  return norm;
}

}  // namespace tinyformer::nn::optim
