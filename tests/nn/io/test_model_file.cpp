// Model descriptions in checkpoints: every field's JSON round trip, the strict reader's errors,
// load_model on save_model's and TrainingRun's checkpoints, and resuming with another model.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("tinyformer_model_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

doctest::Contains has(const std::string& text) {
  return doctest::Contains(text.c_str());
}

// The number of members of an aggregate: the most initializers T{...} accepts. It holds the
// serializer to every field, so that a field added to a config struct and not to
// nn/io/model_file.cpp's lists fails here.
struct AnyField {
  template <typename T>
  operator T() const;  // NOLINT: converts to any member type, never called
};
template <typename T, typename... Fields>
constexpr std::size_t field_count() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return field_count<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}

// Block parts under names of their own (they build the standard parts): a description that
// names them reads back once they are registered.
void register_test_parts() {
  nn::register_attention("test_attention", [](const nn::AttentionSpec& s) {
    return nn::make_attention("standard", s);
  });
  nn::register_feed_forward("test_feed_forward", [](const nn::BlockPartSpec& s) {
    return nn::make_feed_forward("standard", s);
  });
  nn::register_norm("test_norm",
                    [](const nn::BlockPartSpec& s) { return nn::make_norm("layer_norm", s); });
}

// A description with every field away from its default.
nn::ModelDescription everything_set() {
  register_test_parts();
  nn::EncoderConfig encoder{.layers = 3,
                            .d_model = 48,
                            .heads = 6,
                            .d_ff = 96,
                            .max_seq_len = 40,
                            .dropout = 0.25,
                            .attention_dropout = 0.125,
                            .activation = nn::Activation::relu,
                            .pre_norm = false,
                            .attention_module = "test_attention",
                            .feed_forward = "test_feed_forward",
                            .norm = "test_norm",
                            .attention = nn::AttentionKind::linformer,
                            .linformer = {.k = 12,
                                          .k_per_layer = {12, 10, 8},
                                          .projection = nn::ProjectionKind::conv,
                                          .projection_name = "",
                                          .sharing = nn::Sharing::key_value,
                                          .projection_init = nn::ProjectionInit::normal,
                                          .projection_lr_scale = 0.3},
                            .per_layer = {},
                            .fused_attention = false};
  encoder.per_layer = {
      {.attention = nn::AttentionKind::full, .linformer = {}, .attention_module = "standard"},
      {.attention = nn::AttentionKind::linformer,
       .linformer = {.k = 9,
                     .k_per_layer = {20, 16, 12},
                     .projection = nn::ProjectionKind::mean,
                     .sharing = nn::Sharing::none,
                     .projection_lr_scale = 0.5}},
      {.attention = nn::AttentionKind::linformer,
       .linformer = {.k = 7,
                     .projection = nn::ProjectionKind::linear,
                     .projection_name = "max",
                     .sharing = nn::Sharing::layerwise,
                     .projection_init = nn::ProjectionInit::normal}},
  };
  return {.kind = nn::ModelKind::masked_lm,
          .encoder = encoder,
          .vocabulary = {.size = 300, .tokenizer = "words-v2"},
          .positions = nn::PositionEncoding::sinusoidal,
          .tie_weights = false};
}

void check_linformer(const nn::LinformerConfig& a, const nn::LinformerConfig& b) {
  CHECK(a.k == b.k);
  CHECK(a.k_per_layer == b.k_per_layer);
  CHECK(a.projection == b.projection);
  CHECK(a.projection_name == b.projection_name);
  CHECK(a.sharing == b.sharing);
  CHECK(a.projection_init == b.projection_init);
  CHECK(a.projection_lr_scale == b.projection_lr_scale);
}

void check_same(const nn::ModelDescription& a, const nn::ModelDescription& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.vocabulary.size == b.vocabulary.size);
  CHECK(a.vocabulary.tokenizer == b.vocabulary.tokenizer);
  CHECK(a.positions == b.positions);
  CHECK(a.tie_weights == b.tie_weights);
  if (a.kind == nn::ModelKind::sequence_classifier) {
    CHECK(a.classes == b.classes);
    CHECK(a.pooling == b.pooling);
  }
  const nn::EncoderConfig &x = a.encoder, &y = b.encoder;
  CHECK(x.layers == y.layers);
  CHECK(x.d_model == y.d_model);
  CHECK(x.heads == y.heads);
  CHECK(x.d_ff == y.d_ff);
  CHECK(x.max_seq_len == y.max_seq_len);
  CHECK(x.dropout == y.dropout);
  CHECK(x.attention_dropout == y.attention_dropout);
  CHECK(x.activation == y.activation);
  CHECK(x.pre_norm == y.pre_norm);
  CHECK(x.attention_module == y.attention_module);
  CHECK(x.feed_forward == y.feed_forward);
  CHECK(x.norm == y.norm);
  CHECK(x.attention == y.attention);
  check_linformer(x.linformer, y.linformer);
  REQUIRE(x.per_layer.size() == y.per_layer.size());
  for (std::size_t l = 0; l < x.per_layer.size(); ++l) {
    CHECK(x.per_layer[l].attention == y.per_layer[l].attention);
    CHECK(x.per_layer[l].attention_module == y.per_layer[l].attention_module);
    check_linformer(x.per_layer[l].linformer, y.per_layer[l].linformer);
  }
  CHECK(x.fused_attention == y.fused_attention);
  CHECK(nn::model_differences(a, b).empty());
}

nn::ModelDescription round_trip(const nn::ModelDescription& d) {
  return nn::parse_model_description(nn::model_description_json(d), "test");
}

// The description's JSON with one change, as the text a file would hold.
std::string edited(const std::function<void(json&)>& edit,
                   const nn::ModelDescription& d = everything_set()) {
  json j = json::parse(nn::model_description_json(d));
  edit(j);
  return j.dump();
}

nn::ModelDescription small_mlm() {
  return {.kind = nn::ModelKind::masked_lm,
          .encoder = {.layers = 2,
                      .d_model = 16,
                      .heads = 2,
                      .d_ff = 32,
                      .max_seq_len = 12,
                      .dropout = 0.0,
                      .attention = nn::AttentionKind::linformer,
                      .linformer = {.k = 4, .k_per_layer = {6, 4}, .sharing = nn::Sharing::none}},
          .vocabulary = {.size = nn::data::ByteTokenizer::vocab_size, .tokenizer = "byte"}};
}

nn::ProgressOptions quiet() {
  static std::FILE* null = std::fopen("/dev/null", "w");
  return {.out = null, .terminal = false};
}

// A checkpoint of small_mlm's model whose description is edited: what an untrusted file may
// claim about the tensors it holds.
std::string claiming(const TempDir& dir, const std::string& name,
                     const std::function<void(json&)>& edit) {
  manual_seed(6);
  const nn::ModelDescription d = small_mlm();
  auto model = nn::make_model(d);
  const std::string path = dir.file(name);
  nn::save_checkpoint(path, *model, nullptr, {{nn::kModelMetadataKey, edited(edit, d)}});
  return path;
}

// A save_model file of small_mlm with its tensors edited.
std::string with_tensors(const TempDir& dir, const std::string& name,
                         const std::function<void(nn::StateDict&)>& edit) {
  manual_seed(6);
  const nn::ModelDescription d = small_mlm();
  const std::string path = dir.file(name);
  nn::save_model(path, *nn::make_model(d), d);
  nn::SafetensorsFile file = nn::load_safetensors(path);
  edit(file.tensors);
  nn::save_safetensors(path, file.tensors, file.metadata);
  return path;
}

Tensor some_tokens() {
  return from(std::vector<std::int64_t>{5, 9, 40, 100, 7, 1, 33, 12, 250, 4, 8, 60}, {2, 6});
}

}  // namespace

TEST_CASE("model description: every field of every struct round-trips through the JSON") {
  const nn::ModelDescription d = everything_set();
  check_same(round_trip(d), d);

  // The writer visits every member: a field added to a struct must be added to the lists.
  const json j = json::parse(nn::model_description_json(d));
  CHECK(j["encoder"].size() == field_count<nn::EncoderConfig>());
  CHECK(j["encoder"]["linformer"].size() == field_count<nn::LinformerConfig>());
  CHECK(j["encoder"]["per_layer"][0].size() == field_count<nn::LayerSpec>());
  CHECK(j["vocabulary"].size() == field_count<nn::Vocabulary>());
  CHECK(j["version"] == nn::kModelFormatVersion);
  CHECK(j["kind"] == "MaskedLM");
  CHECK(j["encoder"]["per_layer"][1]["linformer"]["sharing"] == "none");
  CHECK(j["encoder"]["linformer"]["sharing"] == "key-value");
  CHECK(j["encoder"]["activation"] == "relu");
  CHECK(j["encoder"]["feed_forward"] == "test_feed_forward");
  CHECK(j["encoder"]["per_layer"][0]["attention_module"] == "standard");

  // Each kind of sharing, projection, start, activation, position encoding and pooling.
  for (nn::Sharing sharing :
       {nn::Sharing::none, nn::Sharing::headwise, nn::Sharing::key_value, nn::Sharing::layerwise}) {
    for (nn::ProjectionKind kind :
         {nn::ProjectionKind::linear, nn::ProjectionKind::mean, nn::ProjectionKind::max,
          nn::ProjectionKind::conv, nn::ProjectionKind::identity}) {
      nn::ModelDescription c = small_mlm();
      c.encoder.linformer = {.k = 6, .projection = kind, .sharing = sharing};
      check_same(round_trip(c), c);
    }
  }
  for (nn::Activation a : {nn::Activation::gelu, nn::Activation::gelu_tanh, nn::Activation::tanh,
                           nn::Activation::relu}) {
    nn::ModelDescription c = small_mlm();
    c.encoder.activation = a;
    c.encoder.linformer.projection_init = nn::ProjectionInit::normal;
    c.positions = nn::PositionEncoding::learned;
    check_same(round_trip(c), c);
  }
  for (nn::Pooling pooling : {nn::Pooling::cls, nn::Pooling::mean}) {
    nn::ModelDescription c = small_mlm();
    c.kind = nn::ModelKind::sequence_classifier;
    c.classes = 7;
    c.pooling = pooling;
    c.vocabulary = {.size = 17, .tokenizer = "listops"};
    check_same(round_trip(c), c);
    const json cj = json::parse(nn::model_description_json(c));
    CHECK(cj["kind"] == "SequenceClassifier");
    CHECK(cj.contains("classes"));
    CHECK_FALSE(cj.contains("tie_weights"));
  }
  // A full-attention description with no Linformer settings of its own.
  nn::ModelDescription full = small_mlm();
  full.encoder.attention = nn::AttentionKind::full;
  full.encoder.linformer = {};
  check_same(round_trip(full), full);
}

TEST_CASE("model description: the reader names the field of every bad value") {
  auto fails_with = [](const std::string& text, const std::string& expected) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(nn::parse_model_description(text, "model.safetensors"), has(expected),
                         Error);
    CHECK_THROWS_WITH_AS(nn::parse_model_description(text, "model.safetensors"),
                         has("model.safetensors: "), Error);
  };
  // Missing fields, at any depth.
  fails_with(edited([](json& j) { j["encoder"]["linformer"].erase("k"); }),
             "encoder.linformer.k is missing");
  fails_with(edited([](json& j) { j["encoder"]["per_layer"][2]["linformer"].erase("sharing"); }),
             "encoder.per_layer[2].linformer.sharing is missing");
  fails_with(edited([](json& j) { j.erase("version"); }), "version is missing");
  fails_with(edited([](json& j) { j.erase("kind"); }), "kind is missing");
  fails_with(edited([](json& j) { j.erase("tie_weights"); }), "tie_weights is missing");
  fails_with(edited([](json& j) { j["vocabulary"].erase("tokenizer"); }),
             "vocabulary.tokenizer is missing");
  // Wrong types.
  fails_with(edited([](json& j) { j["encoder"]["linformer"]["k"] = "12"; }),
             "encoder.linformer.k: expected an integer, got \"12\"");
  fails_with(edited([](json& j) { j["encoder"]["layers"] = 2.5; }),
             "encoder.layers: expected an integer, got 2.5");
  fails_with(edited([](json& j) { j["encoder"]["layers"] = 18446744073709551615ULL; }),
             "encoder.layers: expected an integer that fits 64 bits");
  fails_with(edited([](json& j) { j["encoder"]["dropout"] = true; }),
             "encoder.dropout: expected a number, got true");
  fails_with(edited([](json& j) { j["encoder"]["pre_norm"] = 1; }),
             "encoder.pre_norm: expected true or false, got 1");
  fails_with(edited([](json& j) { j["encoder"]["per_layer"] = json::object(); }),
             "encoder.per_layer: expected an array");
  fails_with(edited([](json& j) { j["encoder"]["linformer"]["k_per_layer"][1] = "x"; }),
             "encoder.linformer.k_per_layer[1]: expected an integer");
  fails_with(edited([](json& j) { j["encoder"]["linformer"] = 5; }),
             "encoder.linformer: expected an object, got 5");
  fails_with(edited([](json& j) { j["vocabulary"]["tokenizer"] = 3; }),
             "vocabulary.tokenizer: expected a string, got 3");
  // Unknown names of kinds.
  fails_with(edited([](json& j) { j["kind"] = "GPT"; }),
             "kind: unknown name \"GPT\" (known: MaskedLM, SequenceClassifier, CausalLM)");
  fails_with(edited([](json& j) { j["encoder"]["per_layer"][1]["linformer"]["sharing"] = "all"; }),
             "encoder.per_layer[1].linformer.sharing: unknown name \"all\"");
  fails_with(edited([](json& j) { j["encoder"]["attention"] = "sparse"; }),
             "encoder.attention: unknown name \"sparse\" (known: full, linformer)");
  fails_with(edited([](json& j) { j["positions"] = "rotary"; }), "positions: unknown name");
  fails_with(edited([](json& j) { j["encoder"]["activation"] = "swish"; }),
             "encoder.activation: unknown name \"swish\"");
  fails_with(edited([](json& j) { j["encoder"]["linformer"]["projection"] = 2; }),
             "encoder.linformer.projection: expected one of the names linear, mean, max, conv, "
             "identity, got 2");
  // Unknown fields, and the other kind's head fields.
  fails_with(edited([](json& j) { j["encoder"]["linformer"]["rank"] = 3; }),
             "encoder.linformer.rank: unknown field");
  fails_with(edited([](json& j) { j["classes"] = 3; }), "classes: unknown field for a MaskedLM");
  // Format versions.
  fails_with(edited([](json& j) { j["version"] = nn::kModelFormatVersion + 1; }),
             "format version 2 is not one this tinyformer reads");
  fails_with(edited([](json& j) { j["version"] = 0; }), "format version 0");
  // Not JSON, not an object, a field twice, nesting no description has.
  fails_with("{\"version\": 1, ", "not valid JSON");
  fails_with("[1, 2]", "expected a JSON object");
  fails_with("{\"version\": 1, \"version\": 1}", "the field \"version\" appears twice");
  fails_with(std::string(100, '[') + std::string(100, ']'), "nests deeper");
  // Values of the right types that do not fit together.
  fails_with(edited([](json& j) { j["encoder"]["heads"] = 5; }),
             "encoder: EncoderConfig: d_model (48) must be divisible by heads (5)");
  fails_with(edited([](json& j) { j["vocabulary"]["size"] = 0; }),
             "vocabulary.size: expected a positive size");
  nn::ModelDescription classifier = small_mlm();
  classifier.kind = nn::ModelKind::sequence_classifier;
  classifier.classes = 4;
  fails_with(edited([](json& j) { j["classes"] = 1; }, classifier),
             "classes: expected at least 2, got 1");
  fails_with(edited([](json& j) { j.erase("pooling"); }, classifier), "pooling is missing");
}

TEST_CASE("model_differences lists each differing field") {
  const nn::ModelDescription a = everything_set();
  nn::ModelDescription b = a;
  b.encoder.per_layer[1].linformer.k_per_layer[2] = 11;
  b.vocabulary.tokenizer = "byte";
  const std::vector<std::string> d = nn::model_differences(a, b);
  REQUIRE(d.size() == 2);
  CHECK(d[0] == "encoder.per_layer[1].linformer.k_per_layer[2]: 12 there, 11 now");
  CHECK(d[1] == "vocabulary.tokenizer: \"words-v2\" there, \"byte\" now");
}

TEST_CASE("save_model and load_model: the same model from the file alone") {
  TempDir dir;
  const std::string path = dir.file("mlm.safetensors");
  manual_seed(3);
  const nn::ModelDescription description = small_mlm();
  auto model = nn::make_model<nn::MaskedLM>(description);
  model->eval();
  nn::save_model(path, *model, description, {{"note", "hello"}});

  const std::uint64_t offset = default_generator().offset();
  const nn::LoadedModel loaded = nn::load_model(path);
  CHECK(default_generator().offset() == offset);  // building the model drew nothing for good
  CHECK(loaded.kind() == nn::ModelKind::masked_lm);
  CHECK(loaded.config().linformer.k_per_layer == std::vector<std::int64_t>{6, 4});
  CHECK(loaded.vocabulary().tokenizer == "byte");
  CHECK(loaded.metadata.at("note") == "hello");
  CHECK(loaded.metadata.count(nn::kModelMetadataKey) == 0);
  CHECK_FALSE(loaded.module->is_training());
  const auto again = loaded.as<nn::MaskedLM>();
  const std::vector<float> expected = model->forward(some_tokens()).to_vector<float>();
  CHECK(again->forward(some_tokens()).to_vector<float>() == expected);
  CHECK_THROWS_WITH_AS(loaded.as<nn::SequenceClassifier>(),
                       "LoadedModel::as: the model is a MaskedLM, not the type asked for", Error);

  // A classifier, through the same calls.
  nn::ModelDescription classifier = small_mlm();
  classifier.kind = nn::ModelKind::sequence_classifier;
  classifier.classes = 3;
  classifier.pooling = nn::Pooling::cls;
  auto c = nn::make_model<nn::SequenceClassifier>(classifier);
  c->eval();
  nn::save_model(dir.file("cls.safetensors"), *c, classifier);
  const auto c2 = nn::load_model(dir.file("cls.safetensors")).as<nn::SequenceClassifier>();
  CHECK(c2->forward(some_tokens()).to_vector<float>() ==
        c->forward(some_tokens()).to_vector<float>());

  // A decoder (full attention, learned positions), through the same calls.
  nn::ModelDescription decoder = small_mlm();
  decoder.kind = nn::ModelKind::causal_lm;
  decoder.encoder.attention = nn::AttentionKind::full;
  decoder.encoder.linformer = {};
  auto lm = nn::make_model<nn::CausalLM>(decoder);
  lm->eval();
  nn::save_model(dir.file("lm.safetensors"), *lm, decoder);
  const nn::LoadedModel lm_loaded = nn::load_model(dir.file("lm.safetensors"));
  CHECK(lm_loaded.kind() == nn::ModelKind::causal_lm);
  CHECK(nn::describe(lm_loaded.description).find("CausalLM over the \"byte\" vocabulary") == 0);
  CHECK(lm_loaded.as<nn::CausalLM>()->forward(some_tokens()).to_vector<float>() ==
        lm->forward(some_tokens()).to_vector<float>());
  // Its state dict has no "body.": a file renamed as a MaskedLM's is refused by name.
  CHECK(lm->state_dict().front().first == "token_embedding.weight");

  // save_model refuses a description of another kind.
  CHECK_THROWS_WITH_AS(nn::save_model(dir.file("x.safetensors"), *c, description),
                       has("the model is a SequenceClassifier, the description "
                           "says MaskedLM"),
                       Error);
}

TEST_CASE("load_model: files without a description or with one that does not fit") {
  TempDir dir;
  manual_seed(4);
  const nn::ModelDescription description = small_mlm();
  auto model = nn::make_model<nn::MaskedLM>(description);

  const std::string plain = dir.file("plain.safetensors");
  nn::save_checkpoint(plain, *model);
  CHECK_THROWS_WITH_AS(nn::load_model(plain),
                       has("load_model: " + plain +
                           ": the file holds no model "
                           "description (metadata key \"tinyformer.model\")"),
                       Error);

  // Weights of another size than the description: the tensor, both shapes and the fields.
  nn::ModelDescription wider = description;
  wider.encoder.d_ff = 48;
  const std::string lying = dir.file("lying.safetensors");
  nn::save_checkpoint(lying, *model, nullptr,
                      {{nn::kModelMetadataKey, nn::model_description_json(wider)}});
  CHECK_THROWS_WITH_AS(nn::load_model(lying),
                       ("load_model: " + lying +
                        ": \"model.body.encoder.layers.0.feed_forward.fc1.weight\" is [32, 16] "
                        "in the file, the description implies [48, 16] (from encoder.d_ff, "
                        "encoder.d_model)")
                           .c_str(),
                       Error);

  // A bad field in the file: the path, the key and the field.
  const std::string bad = dir.file("bad.safetensors");
  nn::save_checkpoint(
      bad, *model, nullptr,
      {{nn::kModelMetadataKey,
        edited([](json& j) { j["encoder"]["linformer"]["k_per_layer"][0] = -1; }, description)}});
  CHECK_THROWS_WITH_AS(nn::load_model(bad),
                       has("load_model: " + bad +
                           ": \"tinyformer.model\": encoder: EncoderConfig: layer 0 has k=-1"),
                       Error);

  // A registered projection kind that this program does not have.
  nn::ModelDescription custom = description;
  custom.encoder.linformer.projection_name = "no-such-kind";
  const std::string unknown = dir.file("unknown.safetensors");
  nn::save_checkpoint(unknown, *model, nullptr,
                      {{nn::kModelMetadataKey, nn::model_description_json(custom)}});
  CHECK_THROWS_WITH_AS(nn::load_model(unknown),
                       has("load_model: " + unknown +
                           ": \"tinyformer.model\": encoder: EncoderConfig: layer 0's "
                           "projection_name \"no-such-kind\" is not registered"),
                       Error);

  // A block part by a name this program has not registered.
  nn::ModelDescription custom_part = description;
  custom_part.encoder.feed_forward = "no-such-part";
  const std::string part = dir.file("part.safetensors");
  nn::save_checkpoint(part, *model, nullptr,
                      {{nn::kModelMetadataKey, nn::model_description_json(custom_part)}});
  CHECK_THROWS_WITH_AS(nn::load_model(part), has("feed_forward \"no-such-part\" is not registered"),
                       Error);
}

TEST_CASE("load_model refuses sizes the file's tensors do not hold, before it builds anything") {
  TempDir dir;
  struct Claim {
    std::string name;
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::string embedding =
      "the file's \"model.body.token_embedding.weight\" (the token embedding [vocabulary.size, "
      "encoder.d_model]) is [260, 16]";
  const Claim claims[] = {
      {"layers-100000",
       [](json& j) {
         j["encoder"]["layers"] = 100000;
         j["encoder"]["linformer"]["k_per_layer"] = json::array();
       },
       "encoder.layers: the description says 100000, the file's tensors name 2 "
       "(\"model.body.encoder.layers.<i>.*\")"},
      // Validating it alone must not walk 10^15 layers either.
      {"layers-1e15",
       [](json& j) {
         j["encoder"]["layers"] = 1000000000000000;
         j["encoder"]["linformer"]["k_per_layer"] = json::array();
       },
       "encoder.layers: the description says 1000000000000000, the file's tensors name 2 "
       "(\"model.body.encoder.layers.<i>.*\")"},
      {"vocabulary-3e7", [](json& j) { j["vocabulary"]["size"] = 30000000; },
       "vocabulary.size: the description says 30000000, " + embedding},
      {"d_model", [](json& j) { j["encoder"]["d_model"] = 32; },
       "encoder.d_model: the description says 32, " + embedding},
      {"max_seq_len", [](json& j) { j["encoder"]["max_seq_len"] = 1 << 30; },
       "encoder.max_seq_len: the description says 1073741824, the file's "
       "\"model.body.positions.weight\" (the learned positions [encoder.max_seq_len, "
       "encoder.d_model]) is [12, 16]"},
      {"sinusoidal", [](json& j) { j["positions"] = "sinusoidal"; },
       "the file has no \"model.body.positions.table\" (the sinusoidal positions "
       "[encoder.max_seq_len, encoder.d_model]), which every model of the described kind has"},
      {"classes",
       [](json& j) {
         j.erase("tie_weights");
         j["kind"] = "SequenceClassifier";
         j["classes"] = 1000000;
         j["pooling"] = "mean";
       },
       "the file has no \"model.classifier.weight\" (the classifier [classes, encoder.d_model]), "
       "which every model of the described kind has"},
      {"d_ff", [](json& j) { j["encoder"]["d_ff"] = 1000000000; },
       "\"model.body.encoder.layers.0.feed_forward.fc1.weight\" is [32, 16] in the file, the "
       "description implies [1000000000, 16] (from encoder.d_ff, encoder.d_model)"},
      {"k", [](json& j) { j["encoder"]["linformer"]["k_per_layer"][1] = 12; },
       "\"model.body.encoder.layers.1.attention.key_projection.weight\" is [2, 4, 12] in the "
       "file, the description implies [2, 12, 12] (from encoder.linformer.k_per_layer[1], "
       "encoder.max_seq_len, encoder.heads)"},
  };
  for (const Claim& claim : claims) {
    CAPTURE(claim.name);
    const std::string path = claiming(dir, claim.name, claim.edit);
    const std::int64_t live = memory_stats().current_bytes;
    reset_peak_memory();
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(nn::load_model(path),
                         ("load_model: " + path + ": " + claim.message).c_str(), Error);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The file's own tensors (about 40 KB) are all that is allocated.
    CHECK(memory_stats().peak_bytes - live < (std::int64_t{1} << 20));
    CHECK(seconds < 5.0);
  }
}

TEST_CASE("load_model names a tensor missing, one too many and one misshapen") {
  TempDir dir;
  const std::size_t implied = nn::model_shapes(small_mlm()).tensors.size();
  const std::string missing = with_tensors(dir, "missing.safetensors", [](nn::StateDict& t) {
    std::erase_if(t, [](const auto& e) {
      return e.first == "model.body.encoder.layers.1.feed_forward.fc2.bias";
    });
  });
  CHECK_THROWS_WITH_AS(nn::load_model(missing),
                       ("load_model: " + missing +
                        ": the file has no \"model.body.encoder.layers.1.feed_forward.fc2.bias\", "
                        "which the description implies ([16] from encoder.d_model; it implies " +
                        std::to_string(implied) + " model tensors, the file has " +
                        std::to_string(implied - 1) + ")")
                           .c_str(),
                       Error);
  const std::string extra = with_tensors(dir, "extra.safetensors", [](nn::StateDict& t) {
    t.emplace_back("model.body.encoder.layers.0.attention.extra", zeros({3}));
  });
  CHECK_THROWS_WITH_AS(nn::load_model(extra),
                       ("load_model: " + extra +
                        ": the file has \"model.body.encoder.layers.0.attention.extra\" ([3]), "
                        "which the description does not imply (it implies " +
                        std::to_string(implied) + " model tensors; the file has " +
                        std::to_string(implied + 1) + ")")
                           .c_str(),
                       Error);
  const std::string misshapen = with_tensors(dir, "misshapen.safetensors", [](nn::StateDict& t) {
    for (auto& [name, tensor] : t) {
      if (name == "model.norm.bias") tensor = zeros({15});
    }
  });
  CHECK_THROWS_WITH_AS(nn::load_model(misshapen),
                       ("load_model: " + misshapen +
                        ": \"model.norm.bias\" is [15] in the file, the description implies [16] "
                        "(from encoder.d_model)")
                           .c_str(),
                       Error);
  // Layers that the names show but the tensors do not fill: refused by their count before the
  // description's entries are listed (the list costs no more than the file's header).
  const std::string sparse = with_tensors(dir, "sparse.safetensors", [](nn::StateDict& t) {
    for (int l = 2; l < 200; ++l) {
      t.emplace_back("model.body.encoder.layers." + std::to_string(l) + ".norm1.bias", zeros({1}));
    }
  });
  {
    nn::SafetensorsFile file = nn::load_safetensors(sparse);
    json d = json::parse(file.metadata.at(nn::kModelMetadataKey));
    d["encoder"]["layers"] = 200;
    d["encoder"]["linformer"]["k_per_layer"] = json::array();
    file.metadata[nn::kModelMetadataKey] = d.dump();
    nn::save_safetensors(sparse, file.tensors, file.metadata);
  }
  CHECK_THROWS_WITH_AS(nn::load_model(sparse),
                       ("load_model: " + sparse +
                        ": encoder.layers: the description's 200 layers hold at least 3200 "
                        "tensors, the file has " +
                        std::to_string(implied + 198) + " model tensors")
                           .c_str(),
                       Error);
  // A layer named beyond the description's is one too many as well.
  const std::string layer = with_tensors(dir, "layer.safetensors", [](nn::StateDict& t) {
    t.emplace_back("model.body.encoder.layers.2.norm1.weight", ones({16}));
  });
  CHECK_THROWS_WITH_AS(nn::load_model(layer),
                       has("the file has \"model.body.encoder.layers.2.norm1.weight\" ([16]), "
                           "which the description does not imply"),
                       Error);
}

TEST_CASE("load_model: parts of one's own load, their sizes bounded by the file's") {
  TempDir dir;
  manual_seed(8);
  const nn::ModelDescription description = everything_set();
  auto model = nn::make_model<nn::MaskedLM>(description);
  model->eval();
  const std::string path = dir.file("own.safetensors");
  nn::save_model(path, *model, description);
  const auto loaded = nn::load_model(path).as<nn::MaskedLM>();
  CHECK(loaded->forward(some_tokens()).to_vector<float>() ==
        model->forward(some_tokens()).to_vector<float>());

  // A feed-forward of one's own gets d_ff unchecked by any built-in tensor: it is bounded by the
  // file's elements over d_model.
  nn::ModelDescription wide = description;
  wide.encoder.d_ff = 1000000000;
  const std::string lying = dir.file("wide.safetensors");
  nn::save_checkpoint(lying, *model, nullptr,
                      {{nn::kModelMetadataKey, nn::model_description_json(wide)}});
  // A tensor without elements under the part's name bounds nothing, however long its shape.
  {
    nn::SafetensorsFile file = nn::load_safetensors(lying);
    file.tensors.emplace_back("model.body.encoder.layers.0.feed_forward.unused",
                              zeros({1000000000, 0}));
    nn::save_safetensors(lying, file.tensors, file.metadata);
  }
  const std::string refusal = "load_model: " + lying +
                              ": encoder.d_ff: the description says 1000000000 for the "
                              "feed-forward \"test_feed_forward\", expected at most ";
  CHECK_THROWS_WITH_AS(nn::load_model(lying), doctest::Contains(refusal.c_str()), Error);
}

TEST_CASE("TrainingRun saves the model description; load_model opens its checkpoint") {
  TempDir dir;
  const std::string path = dir.file("run.safetensors");
  const nn::ModelDescription description = small_mlm();
  auto train = [&](const nn::ModelDescription& d, bool resume, std::int64_t steps) {
    manual_seed(5);
    auto model = nn::make_model<nn::MaskedLM>(d);
    nn::optim::AdamW optimizer(model->parameters(), {.lr = 1e-2});
    nn::TrainingRunOptions options{.program = "test",
                                   .steps = steps,
                                   .checkpoint = path,
                                   .resume = resume,
                                   .progress = quiet(),
                                   .handle_interrupts = false,
                                   .model = d};
    nn::TrainingRun run(options, *model, optimizer, nullptr, {});
    const Tensor tokens = some_tokens();
    while (run.running()) {
      run.start_step();
      const Tensor logits = model->forward(tokens);
      const Tensor loss =
          cross_entropy(logits.reshape({-1, d.vocabulary.size}), tokens.reshape({-1}));
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      run.end_step({.loss = loss.item<double>(), .lr = 1e-2, .tokens = tokens.numel()});
      run.log_and_checkpoint();
    }
    run.finish();
    return model;
  };
  auto trained = train(description, false, 2);
  trained->eval();
  const nn::LoadedModel loaded = nn::load_model(path);
  CHECK(loaded.metadata.at("step") == "2");
  CHECK(loaded.as<nn::MaskedLM>()->forward(some_tokens()).to_vector<float>() ==
        trained->forward(some_tokens()).to_vector<float>());

  // Resuming with another model names the fields that differ.
  nn::ModelDescription other = description;
  other.encoder.linformer.sharing = nn::Sharing::headwise;
  CHECK_THROWS_WITH_AS(train(other, true, 4),
                       has("holds a model of another configuration "
                           "(encoder.linformer.sharing: \"none\" there, "
                           "\"headwise\" now)"),
                       Error);
  train(description, true, 4);
  CHECK(nn::load_model(path).metadata.at("step") == "4");

  // The model must be of the described kind.
  nn::ModelDescription classifier = description;
  classifier.kind = nn::ModelKind::sequence_classifier;
  classifier.classes = 2;
  auto model = nn::make_model<nn::MaskedLM>(description);
  nn::optim::AdamW optimizer(model->parameters(), {.lr = 1e-2});
  CHECK_THROWS_WITH_AS(nn::TrainingRun({.program = "test", .steps = 1, .model = classifier}, *model,
                                       optimizer, nullptr, {}),
                       has("the model is a MaskedLM but TrainingRunOptions::model describes a "
                           "SequenceClassifier"),
                       Error);
}

TEST_CASE("describe: one line per model") {
  CHECK(nn::describe(small_mlm()) ==
        "MaskedLM over the \"byte\" vocabulary (260 tokens), learned positions, tied output; 2 "
        "layers, d_model 16, 2 heads, d_ff 32, Linformer k=6,4 (linear projection, none "
        "sharing, pooling start, lr x0.1)");
  nn::ModelDescription c = small_mlm();
  c.kind = nn::ModelKind::sequence_classifier;
  c.classes = 10;
  c.pooling = nn::Pooling::cls;
  c.vocabulary = {.size = 17, .tokenizer = ""};
  c.positions = nn::PositionEncoding::sinusoidal;
  c.encoder.attention = nn::AttentionKind::full;
  CHECK(nn::describe(c) ==
        "SequenceClassifier (10 classes, cls pooling) over an unnamed vocabulary (17 tokens), "
        "sinusoidal positions; 2 layers, d_model 16, 2 heads, d_ff 32, full attention");
  CHECK(nn::describe(everything_set().encoder) ==
        "3 layers, d_model 48, 6 heads, d_ff 96, per layer: full attention; Linformer k=20,16,12 "
        "(mean projection); Linformer k=7 (max projection)");
}
