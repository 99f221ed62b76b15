// nn::Module: parameters, buffers and submodules under dotted names, train/eval, devices and
// state dicts. Users hold modules by std::shared_ptr and register their parts in the
// constructor:
//
//   struct Mlp : nn::Module {
//     std::shared_ptr<nn::Linear> fc1, fc2;
//     Mlp() { fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 8));
//             fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 1)); }
//     Tensor forward(const Tensor& x) { return fc2->forward(relu(fc1->forward(x))); }
//   };
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tinyformer::nn {

// Name -> tensor, in registration order (sorted by name would scramble layer order).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// How a module asks the optimizer to treat one of its parameters by default; optim::decay_groups
// reads it. lr_scale multiplies the learning rate; decay, when set, overrides the rule that
// matrices are decayed and vectors are not.
struct ParamOptions {
  double lr_scale = 1.0;
  std::optional<bool> decay;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;

  // The returned handle shares the registered tensor: updating one updates the other.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  // Sets the options of this module's parameter `name` (registered already).
  void set_param_options(const std::string& name, const ParamOptions& options);
  // Refuses a module that contains this one (a cycle would make every walk of the tree endless).
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // Parameters of this module and (recursively) its children; a tensor shared by two modules
  // (tied weights, shared projections) is listed once, under its first name.
  std::vector<Tensor> parameters(bool recurse = true) const;
  StateDict named_parameters(bool recurse = true) const;
  // parameters() with each one's options (the defaults where none were set).
  std::vector<std::pair<Tensor, ParamOptions>> parameters_with_options() const;
  StateDict named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // Whether `other` is one of this module's submodules, at any depth.
  bool contains(const Module& other) const;
  std::int64_t num_parameters() const;

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves every parameter and buffer to `device` in place: handles held by members and by an
  // optimizer stay valid.
  void to(Device device);
  void to(DType dtype);  // floating parameters and buffers only
  void zero_grad();

  // Parameters and buffers under their dotted names.
  StateDict state_dict() const;
  // Copies values into the registered tensors. With strict, missing and unexpected names are
  // errors; a shape mismatch always is. Every problem is checked before anything is copied.
  void load_state_dict(const StateDict& state, bool strict = true);

  // The class name shown when the module is printed.
  virtual std::string type_name() const { return "Module"; }
  // Extra text shown after the type name, e.g. "in=4, out=8".
  virtual std::string extra_repr() const { return ""; }
  // The tree of modules with parameter counts.
  std::string to_string() const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  void collect(const std::string& prefix, bool recurse, bool buffers, StateDict& out,
               std::vector<const TensorImpl*>& seen) const;
  void print(std::ostream& os, const std::string& name, int indent) const;

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::map<std::string, ParamOptions> param_options_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace tinyformer::nn
