// The model description as JSON (one field list per struct, walked by the writer and the strict
// reader alike) and load_model, which rebuilds a model from a checkpoint.
#include "nn/io/model_file.h"

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/random.h"
#include "nn/block.h"
#include "nn/io/checkpoint.h"
#include "nn/model_shapes.h"

namespace tinyformer::nn {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// --- The fields of each struct, one line each. ---
// The writer and the reader both walk these lists, so a field added to one of the structs is
// one line here (and a line in docs/training.md). `v(name, member)`.

template <typename V, typename C>
requires std::same_as<std::remove_const_t<C>, LinformerConfig>
void fields(V& v, C& c) {
  v("k", c.k);
  v("k_per_layer", c.k_per_layer);
  v("projection", c.projection);
  v("projection_name", c.projection_name);
  v("sharing", c.sharing);
  v("projection_init", c.projection_init);
  v("projection_lr_scale", c.projection_lr_scale);
}

template <typename V, typename C>
requires std::same_as<std::remove_const_t<C>, LayerSpec>
void fields(V& v, C& c) {
  v("attention", c.attention);
  v("linformer", c.linformer);
  v("attention_module", c.attention_module);
}

template <typename V, typename C>
requires std::same_as<std::remove_const_t<C>, EncoderConfig>
void fields(V& v, C& c) {
  v("layers", c.layers);
  v("d_model", c.d_model);
  v("heads", c.heads);
  v("d_ff", c.d_ff);
  v("max_seq_len", c.max_seq_len);
  v("dropout", c.dropout);
  v("attention_dropout", c.attention_dropout);
  v("activation", c.activation);
  v("pre_norm", c.pre_norm);
  v("attention_module", c.attention_module);
  v("feed_forward", c.feed_forward);
  v("norm", c.norm);
  v("attention", c.attention);
  v("linformer", c.linformer);
  v("per_layer", c.per_layer);
  v("fused_attention", c.fused_attention);
}

template <typename V, typename C>
requires std::same_as<std::remove_const_t<C>, Vocabulary>
void fields(V& v, C& c) {
  v("size", c.size);
  v("tokenizer", c.tokenizer);
}

// The model's own fields; which head fields a file has depends on its kind.
template <typename V, typename C>
requires std::same_as<std::remove_const_t<C>, ModelDescription>
void fields(V& v, C& c) {
  v("kind", c.kind);
  v("vocabulary", c.vocabulary);
  v("positions", c.positions);
  if (c.kind == ModelKind::masked_lm) {
    v("tie_weights", c.tie_weights);
  } else if (c.kind == ModelKind::sequence_classifier) {
    v("classes", c.classes);
    v("pooling", c.pooling);
  }
  v("encoder", c.encoder);
}

template <typename T>
concept Described = requires(T& value, int& visitor) {
  fields(visitor, value);
};

// --- Enumerations by name. ---

template <typename E>
std::vector<std::pair<E, std::string>> names_of();

template <>
std::vector<std::pair<AttentionKind, std::string>> names_of() {
  return {{AttentionKind::full, "full"}, {AttentionKind::linformer, "linformer"}};
}
template <>
std::vector<std::pair<ProjectionKind, std::string>> names_of() {
  std::vector<std::pair<ProjectionKind, std::string>> names;
  for (ProjectionKind kind : {ProjectionKind::linear, ProjectionKind::mean, ProjectionKind::max,
                              ProjectionKind::conv, ProjectionKind::identity}) {
    names.emplace_back(kind, projection_name(kind));
  }
  return names;
}
template <>
std::vector<std::pair<Sharing, std::string>> names_of() {
  std::vector<std::pair<Sharing, std::string>> names;
  for (Sharing s : {Sharing::none, Sharing::headwise, Sharing::key_value, Sharing::layerwise}) {
    names.emplace_back(s, sharing_name(s));
  }
  return names;
}
template <>
std::vector<std::pair<ProjectionInit, std::string>> names_of() {
  return {{ProjectionInit::pooling, projection_init_name(ProjectionInit::pooling)},
          {ProjectionInit::normal, projection_init_name(ProjectionInit::normal)}};
}
template <>
std::vector<std::pair<Activation, std::string>> names_of() {
  std::vector<std::pair<Activation, std::string>> names;
  for (Activation a : unary_ops) names.emplace_back(a, activation_name(a));
  return names;
}
template <>
std::vector<std::pair<PositionEncoding, std::string>> names_of() {
  return {{PositionEncoding::learned, "learned"}, {PositionEncoding::sinusoidal, "sinusoidal"}};
}
template <>
std::vector<std::pair<Pooling, std::string>> names_of() {
  return {{Pooling::cls, "cls"}, {Pooling::mean, "mean"}};
}
template <>
std::vector<std::pair<ModelKind, std::string>> names_of() {
  return {{ModelKind::masked_lm, model_kind_name(ModelKind::masked_lm)},
          {ModelKind::sequence_classifier, model_kind_name(ModelKind::sequence_classifier)},
          {ModelKind::causal_lm, model_kind_name(ModelKind::causal_lm)}};
}

template <typename E>
std::string name_of(E value) {
  for (const auto& [e, name] : names_of<E>()) {
    if (e == value) return name;
  }
  fail("model description: an unnamed value ", static_cast<int>(value), " of an enumeration");
}

// --- Writing. ---

ordered_json write_value(std::int64_t value) {
  return value;
}
ordered_json write_value(double value) {
  TF_CHECK(std::isfinite(value), "model description: a value is not finite (", value, ")");
  return value;
}
ordered_json write_value(bool value) {
  return value;
}
ordered_json write_value(const std::string& value) {
  return value;
}
template <typename E>
requires std::is_enum_v<E> ordered_json write_value(E value) {
  return name_of(value);
}
template <typename T>
ordered_json write_value(const std::vector<T>& values);
template <Described T>
ordered_json write_value(const T& value);

struct Writer {
  ordered_json& out;
  template <typename T>
  void operator()(const char* name, const T& value) {
    out[name] = write_value(value);
  }
};

template <typename T>
ordered_json write_value(const std::vector<T>& values) {
  ordered_json out = ordered_json::array();
  for (const T& value : values) out.push_back(write_value(value));
  return out;
}
template <Described T>
ordered_json write_value(const T& value) {
  ordered_json out = ordered_json::object();
  Writer writer{out};
  fields(writer, value);
  return out;
}

// --- Reading, strictly. ---

// Where a value sits: the message prefix and the field's path ("encoder.linformer.k").
struct Place {
  const std::string& where;
  std::string path;
};

std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

[[noreturn]] void wrong(const Place& at, const char* expected, const json& value) {
  fail(at.where, ": ", at.path, ": expected ", expected, ", got ", shown(value));
}

void read_value(const json& in, std::int64_t& value, const Place& at) {
  if (in.is_number_unsigned()) {
    const auto u = in.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      wrong(at, "an integer that fits 64 bits", in);
    }
    value = static_cast<std::int64_t>(u);
  } else if (in.is_number_integer()) {
    value = in.get<std::int64_t>();
  } else {
    wrong(at, "an integer", in);
  }
}
void read_value(const json& in, double& value, const Place& at) {
  if (!in.is_number()) wrong(at, "a number", in);
  value = in.get<double>();
  if (!std::isfinite(value)) wrong(at, "a finite number", in);
}
void read_value(const json& in, bool& value, const Place& at) {
  if (!in.is_boolean()) wrong(at, "true or false", in);
  value = in.get<bool>();
}
void read_value(const json& in, std::string& value, const Place& at) {
  if (!in.is_string()) wrong(at, "a string", in);
  value = in.get<std::string>();
}
template <typename E>
requires std::is_enum_v<E>
void read_value(const json& in, E& value, const Place& at) {
  const auto names = names_of<E>();
  std::string known;
  for (const auto& [e, name] : names) known += (known.empty() ? "" : ", ") + name;
  if (!in.is_string()) wrong(at, ("one of the names " + known).c_str(), in);
  for (const auto& [e, name] : names) {
    if (name == in.get<std::string>()) {
      value = e;
      return;
    }
  }
  fail(at.where, ": ", at.path, ": unknown name ", shown(in), " (known: ", known, ")");
}
template <typename T>
void read_value(const json& in, std::vector<T>& values, const Place& at);
template <Described T>
void read_value(const json& in, T& value, const Place& at);

struct Reader {
  const json& in;
  const Place& at;
  std::set<std::string> seen;
  template <typename T>
  void operator()(const char* name, T& value) {
    const Place field{at.where, at.path.empty() ? std::string(name) : at.path + "." + name};
    const auto it = in.find(name);
    if (it == in.end()) fail(at.where, ": ", field.path, " is missing");
    read_value(*it, value, field);
    seen.insert(name);
  }
};

template <typename T>
void read_value(const json& in, std::vector<T>& values, const Place& at) {
  if (!in.is_array()) wrong(at, "an array", in);
  values.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    T value{};
    read_value(in[i], value, {at.where, at.path + "[" + std::to_string(i) + "]"});
    values.push_back(std::move(value));
  }
}
template <Described T>
void read_value(const json& in, T& value, const Place& at) {
  if (!in.is_object()) wrong(at, "an object", in);
  value = T{};
  Reader reader{in, at, {}};
  fields(reader, value);
  for (const auto& [name, unused] : in.items()) {
    if (reader.seen.count(name) == 0) {
      fail(at.where, ": ", at.path.empty() ? "" : at.path + ".", name,
           ": unknown field (this tinyformer reads model format version ", kModelFormatVersion,
           ")");
    }
  }
}

// Parses untrusted text: no key twice (a plain parse would keep the last silently), and no
// nesting deeper than a description has.
json parse_json(const std::string& text, const std::string& where) {
  std::vector<std::set<std::string>> open_objects;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        TF_CHECK(depth <= 8, where, ": the JSON nests deeper than a model description does");
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        TF_CHECK(open_objects.back().insert(parsed.get<std::string>()).second, where,
                 ": the field \"", parsed.get<std::string>(), "\" appears twice in one object");
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, callback);
  } catch (const json::exception& e) {
    fail(where, ": not valid JSON (", e.what(), ")");
  }
}

// Building a model draws its initial weights from the default generator; load_model restores
// the generator's position afterwards, so loading a model never changes what a program draws.
class GeneratorGuard {
 public:
  GeneratorGuard() : seed_(default_generator().seed()), offset_(default_generator().offset()) {}
  ~GeneratorGuard() {
    default_generator().manual_seed(seed_);
    default_generator().set_offset(offset_);
  }
  GeneratorGuard(const GeneratorGuard&) = delete;
  GeneratorGuard& operator=(const GeneratorGuard&) = delete;

 private:
  std::uint64_t seed_, offset_;
};

// --- The description against the file's tensors, before anything is built. ---

// The file's "model.*" entries by their state-dict names (without "model.").
using Entries = std::map<std::string, const Tensor*>;

// A size field against the dimension of a tensor that pins it.
void check_pinned(const Entries& entries, const std::string& where, const char* field,
                  std::int64_t value, const std::string& name, std::int64_t dim, const char* what) {
  const auto it = entries.find(name);
  TF_CHECK(it != entries.end(), where, ": the file has no \"model.", name, "\" (", what,
           "), which every model of the described kind has");
  const Shape& shape = it->second->shape();
  TF_CHECK(static_cast<std::int64_t>(shape.size()) > dim, where, ": \"model.", name, "\" is ",
           shape_str(shape), ", expected ", dim + 1, " or more dimensions (", what, ")");
  TF_CHECK(shape[static_cast<std::size_t>(dim)] == value, where, ": ", field,
           ": the description says ", value, ", the file's \"model.", name, "\" (", what, ") is ",
           shape_str(shape));
}

// The number of distinct layers the names "<body>encoder.layers.<i>.*" show.
std::int64_t layers_named(const Entries& entries, const std::string& body) {
  const std::string prefix = body + "encoder.layers.";
  std::set<std::string> indices;
  for (auto it = entries.lower_bound(prefix); it != entries.end(); ++it) {
    const std::string& name = it->first;
    if (name.compare(0, prefix.size(), prefix) != 0) break;
    const std::size_t dot = name.find('.', prefix.size());
    if (dot == std::string::npos || dot == prefix.size()) continue;
    const std::string index = name.substr(prefix.size(), dot - prefix.size());
    if (index.find_first_not_of("0123456789") == std::string::npos) indices.insert(index);
  }
  return static_cast<std::int64_t>(indices.size());
}

// Every size the description gives against the tensors present, then every entry the
// description implies (nn/model_shapes.h) against the file's: what building the model would
// allocate is then what the file holds, plus the parts of one's own, whose sizes are bounded by
// the same checks. Each refusal names the field or the tensor, what was expected and what came.
void check_tensors(const ModelDescription& d, const SafetensorsFile& file,
                   const std::string& where) {
  Entries entries;
  std::int64_t largest_dim = 1, elements = 0;
  for (const auto& [name, t] : file.tensors) {
    if (name.rfind("model.", 0) != 0) continue;
    entries.emplace(name.substr(6), &t);
    // A tensor without elements holds no bytes, so its dimensions bound nothing.
    if (t.numel() == 0) continue;
    elements += t.numel();  // the file holds every element: no overflow
    for (std::int64_t size : t.shape()) largest_dim = std::max(largest_dim, size);
  }
  const EncoderConfig& c = d.encoder;
  // The sizes that tensors pin, first: the vocabulary, the width, the positions, the classes.
  const std::string body = model_body_prefix(d.kind);
  const std::string embedding = body + "token_embedding.weight";
  check_pinned(entries, where, "vocabulary.size", d.vocabulary.size, embedding, 0,
               "the token embedding [vocabulary.size, encoder.d_model]");
  check_pinned(entries, where, "encoder.d_model", c.d_model, embedding, 1,
               "the token embedding [vocabulary.size, encoder.d_model]");
  const bool learned = d.positions == PositionEncoding::learned;
  check_pinned(entries, where, "encoder.max_seq_len", c.max_seq_len,
               body + (learned ? "positions.weight" : "positions.table"), 0,
               learned ? "the learned positions [encoder.max_seq_len, encoder.d_model]"
                       : "the sinusoidal positions [encoder.max_seq_len, encoder.d_model]");
  if (d.kind == ModelKind::sequence_classifier) {
    check_pinned(entries, where, "classes", d.classes, "classifier.weight", 0,
                 "the classifier [classes, encoder.d_model]");
  }
  // Every layer holds tensors (a built-in attention, feed-forward or norm has some).
  const std::int64_t named = layers_named(entries, body);
  TF_CHECK(c.layers <= named, where, ": encoder.layers: the description says ", c.layers,
           ", the file's tensors name ", named, " (\"model.", body, "encoder.layers.<i>.*\")");
  // A feed-forward of one's own gets d_ff, which no built-in tensor then pins, and which it may
  // use in its own way (a gated block's hidden width is 2 d_ff / 3). A part that mixes d_model
  // features through d_ff channels holds some d_ff x d_model weights, so d_ff is bounded by the
  // file's elements over d_model (or by its largest dimension, when larger).
  const std::int64_t d_ff_bound =
      std::max(largest_dim, elements / std::max<std::int64_t>(c.d_model, 1));
  TF_CHECK(is_builtin_feed_forward(c.feed_forward) || c.d_ff <= d_ff_bound, where,
           ": encoder.d_ff: the description says ", c.d_ff, " for the feed-forward \"",
           c.feed_forward, "\", expected at most ", d_ff_bound,
           " (the file's tensor elements over encoder.d_model, or its largest dimension)");

  // The built-in parts hold some tensors in every layer (an attention 8, a feed-forward 4, the
  // two norms 4): the file must have as many before they are listed one by one, so that the
  // list costs no more than reading the file did.
  std::int64_t attention_tensors = 8;
  for (const LayerSpec& spec : c.per_layer) {
    const std::string& module =
        spec.attention_module.empty() ? c.attention_module : spec.attention_module;
    if (!is_builtin_attention(module)) attention_tensors = 0;
  }
  if (c.per_layer.empty() && !is_builtin_attention(c.attention_module)) attention_tensors = 0;
  const std::int64_t per_layer = attention_tensors +
                                 (is_builtin_feed_forward(c.feed_forward) ? 4 : 0) +
                                 (is_builtin_norm(c.norm) ? 4 : 0);
  TF_CHECK(c.layers * per_layer <= static_cast<std::int64_t>(entries.size()), where,
           ": encoder.layers: the description's ", c.layers, " layers hold at least ",
           c.layers * per_layer, " tensors, the file has ", entries.size(), " model tensors");

  // The sizes hold: the entries, one by one.
  ModelShapes shapes;
  try {
    shapes = model_shapes(d);
  } catch (const OutOfMemory&) {
    throw;
  } catch (const Error& e) {
    fail(where, ": the model description does not build a model: ", e.what());
  }
  const std::set<std::string> own(shapes.own_parts.begin(), shapes.own_parts.end());
  auto is_own = [&](const std::string& name) {
    auto it = own.upper_bound(name);
    return it != own.begin() && name.rfind(*std::prev(it), 0) == 0;
  };
  std::set<std::string> expected;
  for (const ExpectedTensor& e : shapes.tensors) {
    const auto it = entries.find(e.name);
    TF_CHECK(it != entries.end(), where, ": the file has no \"model.", e.name,
             "\", which the description implies (", shape_str(e.shape), " from ", e.from,
             "; it implies ", shapes.tensors.size(), " model tensors, the file has ",
             entries.size(), ")");
    TF_CHECK(it->second->shape() == e.shape, where, ": \"model.", e.name, "\" is ",
             shape_str(it->second->shape()), " in the file, the description implies ",
             shape_str(e.shape), " (from ", e.from, ")");
    expected.insert(e.name);
  }
  for (const auto& [name, t] : entries) {
    TF_CHECK(expected.count(name) != 0 || is_own(name), where, ": the file has \"model.", name,
             "\" (", shape_str(t->shape()), "), which the description does not imply (it implies ",
             shapes.tensors.size(), " model tensors",
             own.empty() ? std::string() : " besides the parts of one's own", "; the file has ",
             entries.size(), ")");
  }
}

}  // namespace

std::string model_description_json(const ModelDescription& description) {
  ordered_json out = ordered_json::object();
  out["version"] = kModelFormatVersion;
  Writer writer{out};
  fields(writer, description);
  return out.dump();
}

ModelDescription parse_model_description(const std::string& text, const std::string& where) {
  const json in = parse_json(text, where);
  if (!in.is_object()) fail(where, ": expected a JSON object, got ", shown(in));
  const Place root{where, ""};
  const auto version = in.find("version");
  if (version == in.end()) fail(where, ": version is missing");
  std::int64_t v = 0;
  read_value(*version, v, {where, "version"});
  TF_CHECK(v >= 1 && v <= kModelFormatVersion, where, ": version: format version ", v,
           " is not one this tinyformer reads (1 to ", kModelFormatVersion,
           "); a newer tinyformer wrote it");
  // The kind first: it decides which head fields the object has.
  ModelDescription description;
  const auto kind = in.find("kind");
  if (kind == in.end()) fail(where, ": kind is missing");
  read_value(*kind, description.kind, {where, "kind"});
  Reader reader{in, root, {"version"}};
  fields(reader, description);
  for (const auto& [name, unused] : in.items()) {
    if (reader.seen.count(name) == 0) {
      fail(where, ": ", name, ": unknown field for a ", model_kind_name(description.kind),
           " (this tinyformer reads model format version ", kModelFormatVersion, ")");
    }
  }
  try {
    validate(description.encoder);
  } catch (const Error& e) {
    fail(where, ": encoder: ", e.what());
  }
  TF_CHECK(description.vocabulary.size > 0, where,
           ": vocabulary.size: expected a positive size, got ", description.vocabulary.size);
  if (description.kind == ModelKind::sequence_classifier) {
    TF_CHECK(description.classes > 1, where, ": classes: expected at least 2, got ",
             description.classes);
  }
  return description;
}

std::vector<std::string> model_differences(const ModelDescription& first,
                                           const ModelDescription& second,
                                           const std::string& first_name,
                                           const std::string& second_name) {
  // Flattened, each field is a JSON pointer ("/encoder/linformer/k") with its value; shown as
  // the dotted paths of the error messages.
  const json a = json::parse(model_description_json(first)).flatten();
  const json b = json::parse(model_description_json(second)).flatten();
  auto field = [](std::string pointer) {
    std::string path;
    for (std::size_t i = 1; i <= pointer.size(); ++i) {
      const std::size_t next = std::min(pointer.find('/', i), pointer.size());
      const std::string part = pointer.substr(i, next - i);
      const bool index = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
      path += index ? "[" + part + "]" : (path.empty() ? "" : ".") + part;
      i = next;
    }
    return path;
  };
  std::vector<std::string> differences;
  for (const auto& [pointer, value] : a.items()) {
    const auto other = b.find(pointer);
    if (other == b.end()) {
      differences.push_back(field(pointer) + ": " + shown(value) + " " + first_name + ", none " +
                            second_name);
    } else if (*other != value) {
      differences.push_back(field(pointer) + ": " + shown(value) + " " + first_name + ", " +
                            shown(*other) + " " + second_name);
    }
  }
  for (const auto& [pointer, value] : b.items()) {
    if (a.find(pointer) == a.end()) {
      differences.push_back(field(pointer) + ": none " + first_name + ", " + shown(value) + " " +
                            second_name);
    }
  }
  return differences;
}

ModelDescription read_model_description(const Metadata& metadata, const std::string& where) {
  const auto it = metadata.find(kModelMetadataKey);
  TF_CHECK(it != metadata.end(), where, ": the file holds no model description (metadata key \"",
           kModelMetadataKey,
           "\"): it was saved without one (save_checkpoint, or a TrainingRun without "
           "TrainingRunOptions::model); build the model yourself and use load_checkpoint");
  return parse_model_description(it->second, where + ": \"" + kModelMetadataKey + "\"");
}

void save_model(const std::string& path, const Module& model, const ModelDescription& description,
                const Metadata& metadata) {
  TF_CHECK(model.type_name() == model_kind_name(description.kind), "save_model: ", path,
           ": the model is a ", model.type_name(), ", the description says ",
           model_kind_name(description.kind));
  Metadata meta = metadata;
  meta[kModelMetadataKey] = model_description_json(description);
  save_checkpoint(path, model, nullptr, meta);
}

LoadedModel load_model(const std::string& path, Device device) {
  return load_model(load_safetensors(path), path, device);
}

LoadedModel load_model(const SafetensorsFile& file, const std::string& path, Device device) {
  const std::string where = "load_model: " + path;
  LoadedModel loaded;
  loaded.description = read_model_description(file.metadata, where);
  check_tensors(loaded.description, file, where);
  {
    GeneratorGuard keep_generator;
    try {
      loaded.module = make_model(loaded.description);
    } catch (const OutOfMemory&) {
      throw;
    } catch (const Error& e) {
      fail(where, ": the model description does not build a model: ", e.what());
    }
  }
  loaded.metadata = load_checkpoint(file, path, *loaded.module);
  loaded.metadata.erase(kModelMetadataKey);
  loaded.module->to(device);
  loaded.module->eval();
  return loaded;
}

}  // namespace tinyformer::nn
