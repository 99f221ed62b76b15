// Model + optimizer checkpoints on top of safetensors: entries "model.<name>" and
// "optim.<name>", everything checked against the module before anything is copied.
#include "nn/io/checkpoint.h"

#include <algorithm>

#include "nn/optim.h"

namespace tinyformer::nn {

namespace {

constexpr const char* kOptimizerKey = "tinyformer.optimizer";

std::string describe(const Tensor& t) {
  return detail::concat(t.dtype(), " ", shape_str(t.shape()));
}

}  // namespace

void save_checkpoint(const std::string& path, const Module& module,
                     const optim::Optimizer* optimizer, const Metadata& metadata) {
  StateDict all;
  for (const auto& [name, t] : module.state_dict()) all.emplace_back("model." + name, t);
  Metadata meta = metadata;
  meta.erase(kOptimizerKey);
  if (optimizer != nullptr) {
    for (const auto& [name, t] : optimizer->state_dict()) all.emplace_back("optim." + name, t);
    meta[kOptimizerKey] = optimizer->type_name();
  }
  save_safetensors(path, all, meta);
}

Metadata load_checkpoint(const std::string& path, Module& module, optim::Optimizer* optimizer) {
  return load_checkpoint(load_safetensors(path), path, module, optimizer);
}

Metadata load_checkpoint(const SafetensorsFile& file, const std::string& path, Module& module,
                         optim::Optimizer* optimizer) {
  const std::string where = "load_checkpoint: " + path;
  StateDict model_state, optim_state;
  for (const auto& [name, t] : file.tensors) {
    if (name.rfind("model.", 0) == 0) {
      model_state.emplace_back(name.substr(6), t);
    } else if (name.rfind("optim.", 0) == 0) {
      optim_state.emplace_back(name.substr(6), t);
    } else {
      fail(where, ": unexpected entry \"", name,
           "\" (a checkpoint holds only model.* and optim.* entries)");
    }
  }

  // Everything is checked before anything is copied, so a mismatch leaves the module and the
  // optimizer as they were.
  const StateDict own = module.state_dict();
  auto find = [](const StateDict& state, const std::string& name) {
    return std::find_if(state.begin(), state.end(), [&](const auto& e) { return e.first == name; });
  };
  const std::string hint = " (was it saved from a model of another configuration?)";
  for (const auto& [name, mine] : own) {
    const auto it = find(model_state, name);
    TF_CHECK(it != model_state.end(), where, ": the module has \"", name, "\" (", describe(mine),
             ") but the checkpoint has no \"model.", name, "\"", hint);
    TF_CHECK(it->second.shape() == mine.shape() && it->second.dtype() == mine.dtype(), where,
             ": \"model.", name, "\" is ", describe(it->second),
             " in the checkpoint, the module's \"", name, "\" is ", describe(mine), hint);
  }
  for (const auto& [name, theirs] : model_state) {
    TF_CHECK(find(own, name) != own.end(), where, ": the checkpoint has \"model.", name, "\" (",
             describe(theirs), ") which the module does not have", hint);
  }
  if (optimizer != nullptr) {
    const auto it = file.metadata.find(kOptimizerKey);
    TF_CHECK(it != file.metadata.end() && !optim_state.empty(), where,
             ": the checkpoint holds no optimizer state (it was saved without an optimizer)");
    TF_CHECK(it->second == optimizer->type_name(), where, ": the checkpoint holds ", it->second,
             " state, the optimizer is ", optimizer->type_name());
    try {
      optimizer->check_state_dict(optim_state);
    } catch (const Error& e) {
      fail(where, ": optimizer state does not fit: ", e.what());
    }
  }
  module.load_state_dict(model_state, /*strict=*/true);
  if (optimizer != nullptr) optimizer->load_state_dict(optim_state);
  return file.metadata;
}

}  // namespace tinyformer::nn
