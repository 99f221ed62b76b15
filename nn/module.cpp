// Module bookkeeping: registration, traversal, devices, state dicts and printing.
#include "nn/module.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "autograd/ops.h"

namespace tinyformer::nn {

namespace {
void check_name(const std::string& name, const char* what) {
  TF_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module::register_", what,
           ": expected a non-empty name without '.', got \"", name, "\"");
}

template <typename Entries>
void check_unique(const Entries& entries, const std::string& name, const char* what) {
  for (const auto& e : entries) {
    TF_CHECK(e.first != name, "Module::register_", what, ": the name \"", name,
             "\" is already registered");
  }
}
}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_name(name, "parameter");
  check_unique(parameters_, name, "parameter");
  TF_CHECK(tensor.defined(), "Module::register_parameter: \"", name, "\" is an undefined Tensor");
  TF_CHECK(tensor.is_leaf(), "Module::register_parameter: \"", name,
           "\" must be a leaf tensor (detach it first)");
  if (requires_grad && !tensor.requires_grad()) tensor.requires_grad_(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name(name, "buffer");
  check_unique(buffers_, name, "buffer");
  TF_CHECK(tensor.defined(), "Module::register_buffer: \"", name, "\" is an undefined Tensor");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::set_param_options(const std::string& name, const ParamOptions& options) {
  const bool known = std::any_of(parameters_.begin(), parameters_.end(),
                                 [&](const auto& entry) { return entry.first == name; });
  TF_CHECK(known, "Module::set_param_options: \"", name, "\" is not a parameter of this ",
           type_name());
  TF_CHECK(std::isfinite(options.lr_scale) && options.lr_scale > 0,
           "Module::set_param_options: expected a positive, finite lr_scale for \"", name,
           "\", got ", options.lr_scale);
  param_options_[name] = options;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_name(name, "module");
  check_unique(children_, name, "module");
  TF_CHECK(module != nullptr, "Module::register_module: \"", name, "\" is a null pointer");
  TF_CHECK(module.get() != this, "Module::register_module: a module cannot contain itself");
  TF_CHECK(!module->contains(*this), "Module::register_module: \"", name, "\" (a ",
           module->type_name(), ") already contains this ", type_name(),
           ", directly or through its submodules: a module tree cannot have a cycle");
  children_.emplace_back(name, std::move(module));
}

bool Module::contains(const Module& other) const {
  // Depth first with a visited list: a module shared by several parents is walked once.
  std::vector<const Module*> pending{this}, visited;
  while (!pending.empty()) {
    const Module* m = pending.back();
    pending.pop_back();
    if (std::find(visited.begin(), visited.end(), m) != visited.end()) continue;
    visited.push_back(m);
    for (const auto& [name, child] : m->children_) {
      if (child.get() == &other) return true;
      pending.push_back(child.get());
    }
  }
  return false;
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers, StateDict& out,
                     std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) {
    if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
    seen.push_back(t.impl());
    out.emplace_back(prefix + name, t);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) {
    child->collect(prefix + name + ".", true, buffers, out, seen);
  }
}

StateDict Module::named_parameters(bool recurse) const {
  StateDict out;
  std::vector<const TensorImpl*> seen;
  collect("", recurse, false, out, seen);
  return out;
}

std::vector<std::pair<Tensor, ParamOptions>> Module::parameters_with_options() const {
  std::vector<std::pair<Tensor, ParamOptions>> out;
  std::vector<const TensorImpl*> seen;
  // Depth first in registration order, like collect(), so the order is parameters()'s.
  auto walk = [&](const Module& m, auto& self) -> void {
    for (const auto& [name, t] : m.parameters_) {
      if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
      seen.push_back(t.impl());
      auto it = m.param_options_.find(name);
      out.emplace_back(t, it == m.param_options_.end() ? ParamOptions{} : it->second);
    }
    for (const auto& [name, child] : m.children_) self(*child, self);
  };
  walk(*this, walk);
  return out;
}

StateDict Module::named_buffers(bool recurse) const {
  StateDict out;
  std::vector<const TensorImpl*> seen;
  collect("", recurse, true, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) raw::set_data(t, raw::to_device(t, device));
  for (auto& [name, t] : named_buffers()) raw::set_data(t, raw::to_device(t, device));
}

void Module::to(DType dtype) {
  TF_CHECK(is_floating(dtype), "Module::to: expected a floating dtype, got ", dtype);
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) {
    if (is_floating(t.dtype())) raw::set_data(t, raw::to_dtype(t, dtype));
  }
  for (auto& [name, t] : named_buffers()) {
    if (is_floating(t.dtype())) raw::set_data(t, raw::to_dtype(t, dtype));
  }
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad();
}

StateDict Module::state_dict() const {
  StateDict out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(entry);
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict own = state_dict();
  std::set<std::string> given;
  for (const auto& [name, t] : state) {
    TF_CHECK(given.insert(name).second, "load_state_dict: \"", name, "\" appears twice");
  }
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : own) {
    if (!given.count(name)) missing.push_back(name);
  }
  for (const auto& entry : state) {
    // Not a structured binding: clang 14 (the fuzzing build) cannot capture one in a lambda.
    const std::string& name = entry.first;
    const bool known =
        std::any_of(own.begin(), own.end(), [&](const auto& e) { return e.first == name; });
    if (!known) unexpected.push_back(name);
  }
  auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  TF_CHECK(!strict || missing.empty(), "load_state_dict: missing entries: ", join(missing));
  TF_CHECK(!strict || unexpected.empty(),
           "load_state_dict: unexpected entries: ", join(unexpected));
  for (const auto& [name, src] : state) {
    for (const auto& [own_name, dst] : own) {
      if (own_name != name) continue;
      TF_CHECK(src.defined() && src.shape() == dst.shape(), "load_state_dict: \"", name,
               "\" has shape ", src.defined() ? shape_str(src.shape()) : "undefined",
               ", the module expects ", shape_str(dst.shape()));
    }
  }
  NoGradGuard no_grad;
  for (const auto& [name, src] : state) {
    for (const auto& [own_name, dst] : own) {
      if (own_name == name) raw::copy(src, dst);
    }
  }
}

void Module::print(std::ostream& os, const std::string& name, int indent) const {
  os << std::string(indent * 2, ' ') << (name.empty() ? "" : "(" + name + "): ") << type_name();
  const std::string extra = extra_repr();
  os << "(" << extra << ")";
  const std::int64_t n = num_parameters();
  if (n > 0) os << "  # " << n << " parameters";
  os << "\n";
  for (const auto& [child_name, child] : children_) child->print(os, child_name, indent + 1);
}

std::string Module::to_string() const {
  std::ostringstream os;
  print(os, "", 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  return os << module.to_string();
}

}  // namespace tinyformer::nn
