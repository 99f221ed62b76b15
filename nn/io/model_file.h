// Models that travel with their configuration: a checkpoint records its model's description
// (kind, encoder configuration, vocabulary, head options) as JSON in its metadata, and
// load_model rebuilds the model from the file alone.
//
//   nn::LoadedModel loaded = nn::load_model("run.safetensors");
//   std::shared_ptr<nn::MaskedLM> model = loaded.as<nn::MaskedLM>();
//   loaded.config().linformer.k, loaded.vocabulary().tokenizer, loaded.metadata["step"] ...
//
// The metadata key "tinyformer.model" holds one JSON object (docs/training.md lists every
// field):
//   {"version": 1, "kind": "MaskedLM", "vocabulary": {"size": 260, "tokenizer": "byte"},
//    "positions": "learned", "tie_weights": true,
//    "encoder": {"layers": 2, "d_model": 64, ..., "linformer": {"k": 32, ...}, "per_layer": []}}
// A SequenceClassifier has "classes" and "pooling" in place of "tie_weights". Reading is strict:
// a field missing, of the wrong JSON type, unknown, or an unknown name of a kind is an Error
// naming the file and the field ("encoder.per_layer[1].linformer.k"); a newer format version
// is refused.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "nn/io/safetensors.h"
#include "nn/models.h"
#include "nn/module.h"

namespace tinyformer::nn {

inline constexpr const char* kModelMetadataKey = "tinyformer.model";
// The version load_model reads (and every older one); save_model writes it.
inline constexpr int kModelFormatVersion = 1;

// The description as the JSON text stored under kModelMetadataKey.
std::string model_description_json(const ModelDescription& description);
// Parses and checks that text; `where` starts every error message (e.g. the file's path).
ModelDescription parse_model_description(const std::string& json, const std::string& where);
// The description in a checkpoint's metadata; an Error when it has none.
ModelDescription read_model_description(const Metadata& metadata, const std::string& where);

// What differs between two descriptions, one entry per field, e.g. "encoder.linformer.k: 8
// there, 16 now" (with the default names). Empty when they are equal.
std::vector<std::string> model_differences(const ModelDescription& first,
                                           const ModelDescription& second,
                                           const std::string& first_name = "there",
                                           const std::string& second_name = "now");

// save_checkpoint without an optimizer, with the description in the metadata: a file that
// load_model opens. Throws an Error when `model` is not of the described kind.
void save_model(const std::string& path, const Module& model, const ModelDescription& description,
                const Metadata& metadata = {});

// A model rebuilt from a file: the module, its description and the file's other metadata
// (a training run's "config.*" entries and step, for one).
struct LoadedModel {
  std::shared_ptr<Module> module;
  ModelDescription description;
  Metadata metadata;

  ModelKind kind() const { return description.kind; }
  const EncoderConfig& config() const { return description.encoder; }
  const Vocabulary& vocabulary() const { return description.vocabulary; }
  // The module as its concrete type: as<MaskedLM>(), as<SequenceClassifier>(); an Error naming
  // the model's kind when it is another.
  template <typename Model>
  std::shared_ptr<Model> as() const {
    auto model = std::dynamic_pointer_cast<Model>(module);
    TF_CHECK(model != nullptr, "LoadedModel::as: the model is a ", model_kind_name(kind()),
             ", not the type asked for");
    return model;
  }
};

// Reads `path` (any checkpoint written with a model description: save_model's, or a
// TrainingRun's with TrainingRunOptions::model), builds the model it describes, loads its
// weights (optimizer state in the file is ignored), moves it to `device` and leaves it in
// evaluation mode (call train() to fine-tune). Every problem is an Error naming the file.
// The file is untrusted, so the description is checked against its tensors before anything is
// built: the sizes that tensors pin (vocabulary.size and encoder.d_model by the token
// embedding, encoder.max_seq_len by the positions, classes by the classifier), encoder.layers
// against the layers the tensor names show and the tensors their built-in parts need, a
// feed-forward of one's own's d_ff against the
// file's elements over d_model, then every entry of model_shapes(description) by name and shape,
// and no other "model.*" entry outside the parts of one's own. The Error names the field or the
// tensor, what the description implies and what the file holds. A model whose layers hold no
// tensor at all (every part of one's own and parameter-free) is refused.
LoadedModel load_model(const std::string& path, Device device = Device::cpu());
// The same from a file already read (`path` names it in messages).
LoadedModel load_model(const SafetensorsFile& file, const std::string& path,
                       Device device = Device::cpu());

}  // namespace tinyformer::nn
