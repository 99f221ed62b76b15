// Containers: Sequential (modules applied in order) and ModuleList (indexed, registered list).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "nn/module.h"

namespace tinyformer::nn {

// Holds any modules with a `Tensor forward(const Tensor&)`:
//   auto mlp = std::make_shared<Sequential>();
//   mlp->push_back(std::make_shared<Linear>(4, 8));
//   mlp->push_back(std::make_shared<ReLU>());
class Sequential : public Module {
 public:
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(steps_.size()), module);
    steps_.push_back([m = module.get()](const Tensor& x) { return m->forward(x); });
    return module;
  }
  Tensor forward(const Tensor& x) const {
    Tensor y = x;
    for (const auto& step : steps_) y = step(y);
    return y;
  }
  std::size_t size() const { return steps_.size(); }
  std::string type_name() const override { return "Sequential"; }

 private:
  std::vector<std::function<Tensor(const Tensor&)>> steps_;
};

class ModuleList : public Module {
 public:
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(items_.size()), module);
    items_.push_back(module);
    return module;
  }
  std::size_t size() const { return items_.size(); }
  // The i-th module as type M; throws Error for an index out of range or another type.
  template <typename M = Module>
  std::shared_ptr<M> at(std::size_t i) const {
    TF_CHECK(i < items_.size(), "ModuleList::at: index ", i, " out of range for ", items_.size(),
             " modules");
    auto m = std::dynamic_pointer_cast<M>(items_[i]);
    TF_CHECK(m != nullptr, "ModuleList::at: module ", i, " is a ", items_[i]->type_name());
    return m;
  }
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

}  // namespace tinyformer::nn
