// Model and optimizer checkpoints: what is saved (the module's state dict, the optimizer's
// state and its type, string metadata) and the checks that a file fits before it is loaded.
// The file itself is safetensors (nn/io/safetensors.h), written atomically.
#pragma once

#include <string>

#include "nn/io/safetensors.h"
#include "nn/module.h"

namespace tinyformer::nn {

namespace optim {
class Optimizer;
}

// The module's state dict under "model.<name>" and, when given, the optimizer's under
// "optim.<name>", with the optimizer's type recorded in the metadata key
// "tinyformer.optimizer". `metadata` is stored as given (e.g. {"step": "1200"}).
void save_checkpoint(const std::string& path, const Module& module,
                     const optim::Optimizer* optimizer = nullptr, const Metadata& metadata = {});

// Loads what save_checkpoint wrote into `module` (and `optimizer`, when given) and returns the
// metadata. Every entry must match the module exactly: same names, shapes and dtypes. On any
// mismatch (a checkpoint of another configuration, another optimizer, a corrupted file) it
// throws one Error naming the entry, and neither the module nor the optimizer changes.
Metadata load_checkpoint(const std::string& path, Module& module,
                         optim::Optimizer* optimizer = nullptr);
// The same from a file already read with load_safetensors (`path` names it in messages), so
// that a caller can check its metadata first and load exactly the bytes it checked.
Metadata load_checkpoint(const SafetensorsFile& file, const std::string& path, Module& module,
                         optim::Optimizer* optimizer = nullptr);

}  // namespace tinyformer::nn
