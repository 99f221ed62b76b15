// fuzz_replay: runs the fuzz entry point on files, as the libFuzzer program would, in a build
// without libFuzzer (ctest runs the committed corpus in the normal and the sanitizer build).
//   fuzz_replay DIR_OR_FILE...      every file; one whose name starts with "refuse-" must be
//                                   refused (it holds a defect the loaders must catch), one
//                                   starting with "resume-" must resume, one starting with
//                                   "loads-" must open with load_model and one starting with
//                                   "refuse-model-" must be refused by load_model
//   fuzz_replay --make-corpus DIR   writes the seed corpus with the library's own save functions
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "fuzz/fuzz_checkpoint.h"

using namespace tinyformer;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The file's header as JSON, edited by `edit`, written back with the same data section: what
// another tool (or a corruption) could produce from a file this library wrote.
template <typename Edit>
void rewrite_header(const fs::path& path, Edit edit) {
  const std::string bytes = read_file(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  write_file(path, length + text + bytes.substr(8 + n));
}

void drop_checksums(nlohmann::ordered_json& header) {
  auto& meta = header["__metadata__"];
  for (auto it = meta.begin(); it != meta.end();) {
    it = it.key().starts_with("tinyformer.fnv1a64.") ? meta.erase(it) : std::next(it);
  }
}

// A checkpoint as a training run of the fuzz target writes it after `steps` steps.
void save_run(const fs::path& path, int steps, nn::Metadata changes = {}) {
  fuzz::Target t;
  for (int i = 0; i < steps; ++i) {
    (void)t.loader->next();
    t.optimizer->zero_grad();
    sum(t.model->forward(ones({2, 3}))).backward();
    t.optimizer->step();
  }
  nn::Metadata meta = {{"program", fuzz::kProgram},
                       {"step", std::to_string(steps)},
                       {"generator", nn::generator_state()},
                       {"loader", t.loader->state().to_string()}};
  for (const auto& [key, value] : changes) meta[key] = value;
  nn::save_checkpoint(path.string(), *t.model, t.optimizer.get(), meta);
}

// A small model of every kind, attention and projection kind that a description holds, saved
// with save_model: each must open with load_model.
nn::ModelDescription small_model(nn::AttentionKind attention, nn::LinformerConfig linformer = {}) {
  return {.kind = nn::ModelKind::masked_lm,
          .encoder = {.layers = 2,
                      .d_model = 4,
                      .heads = 2,
                      .d_ff = 8,
                      .max_seq_len = 8,
                      .dropout = 0.0,
                      .attention = attention,
                      .linformer = linformer},
          .vocabulary = {.size = 12, .tokenizer = "fuzz"}};
}

void save_model_seed(const fs::path& path, const nn::ModelDescription& description) {
  manual_seed(7);
  nn::save_model(path.string(), *nn::make_model(description), description);
}

// The file at `path` with its tensors changed by `edit` (a name -> tensor list) and saved again
// with the same metadata.
template <typename Edit>
void edit_tensors(const fs::path& path, Edit edit) {
  nn::SafetensorsFile file = nn::load_safetensors(path.string());
  edit(file.tensors);
  nn::save_safetensors(path.string(), file.tensors, file.metadata);
}

// The file at `path` with its model description's JSON changed by `edit`.
template <typename Edit>
void edit_description(const fs::path& path, Edit edit) {
  nn::SafetensorsFile file = nn::load_safetensors(path.string());
  nlohmann::ordered_json description =
      nlohmann::ordered_json::parse(file.metadata.at(nn::kModelMetadataKey));
  edit(description);
  file.metadata[nn::kModelMetadataKey] = description.dump();
  nn::save_safetensors(path.string(), file.tensors, file.metadata);
}

void make_model_seeds(const fs::path& dir) {
  using nn::AttentionKind;
  using nn::ProjectionKind;
  using nn::Sharing;
  save_model_seed(dir / "loads-mlm-full.safetensors", small_model(AttentionKind::full));
  {
    nn::ModelDescription d = small_model(AttentionKind::full);
    d.tie_weights = false;
    d.positions = nn::PositionEncoding::sinusoidal;
    d.encoder.pre_norm = false;
    save_model_seed(dir / "loads-mlm-untied-sinusoidal-post-norm.safetensors", d);
  }
  {
    nn::ModelDescription d = small_model(AttentionKind::full);
    d.kind = nn::ModelKind::sequence_classifier;
    d.classes = 3;
    d.pooling = nn::Pooling::cls;
    save_model_seed(dir / "loads-classifier-cls.safetensors", d);
    d.pooling = nn::Pooling::mean;
    d.encoder.attention = AttentionKind::linformer;
    d.encoder.linformer = {.k = 4, .projection = ProjectionKind::mean};
    save_model_seed(dir / "loads-classifier-mean-linformer.safetensors", d);
  }
  {
    nn::ModelDescription d = small_model(AttentionKind::full);
    d.kind = nn::ModelKind::causal_lm;
    save_model_seed(dir / "loads-causal-lm.safetensors", d);
  }
  const std::pair<Sharing, const char*> sharings[] = {{Sharing::none, "none"},
                                                      {Sharing::headwise, "headwise"},
                                                      {Sharing::key_value, "key-value"},
                                                      {Sharing::layerwise, "layerwise"}};
  for (const auto& [sharing, name] : sharings) {
    save_model_seed(
        dir / (std::string("loads-linformer-linear-") + name + ".safetensors"),
        small_model(AttentionKind::linformer,
                    {.k = 4, .projection = ProjectionKind::linear, .sharing = sharing}));
  }
  save_model_seed(
      dir / "loads-linformer-conv-none.safetensors",
      small_model(AttentionKind::linformer,
                  {.k = 4, .projection = ProjectionKind::conv, .sharing = Sharing::none}));
  save_model_seed(
      dir / "loads-linformer-conv-key-value.safetensors",
      small_model(AttentionKind::linformer,
                  {.k = 3, .projection = ProjectionKind::conv, .sharing = Sharing::key_value}));
  save_model_seed(dir / "loads-linformer-mean.safetensors",
                  small_model(AttentionKind::linformer,
                              {.k = 4, .k_per_layer = {4, 2}, .projection = ProjectionKind::mean}));
  save_model_seed(
      dir / "loads-linformer-max.safetensors",
      small_model(AttentionKind::linformer, {.k = 4, .projection = ProjectionKind::max}));
  save_model_seed(
      dir / "loads-linformer-identity.safetensors",
      small_model(AttentionKind::linformer, {.k = 8, .projection = ProjectionKind::identity}));
  {
    nn::ModelDescription d = small_model(AttentionKind::full);
    d.encoder.per_layer = {
        {.attention = AttentionKind::full},
        {.attention = AttentionKind::linformer,
         .linformer = {.k = 2, .projection = ProjectionKind::linear, .sharing = Sharing::none}}};
    save_model_seed(dir / "loads-per-layer.safetensors", d);
    // Without checksums, a mutation of the tensors' bytes reaches load_model and the forward pass.
    save_model_seed(dir / "loads-per-layer-no-checksums.safetensors", d);
    rewrite_header(dir / "loads-per-layer-no-checksums.safetensors", drop_checksums);
  }
  // The defects load_model must refuse before it builds anything: sizes beyond the tensors...
  const nn::ModelDescription mlm = small_model(AttentionKind::full);
  save_model_seed(dir / "refuse-model-layers-100000.safetensors", mlm);
  edit_description(dir / "refuse-model-layers-100000.safetensors",
                   [](auto& d) { d["encoder"]["layers"] = 100000; });
  save_model_seed(dir / "refuse-model-layers-1e15.safetensors", mlm);
  edit_description(dir / "refuse-model-layers-1e15.safetensors",
                   [](auto& d) { d["encoder"]["layers"] = 1000000000000000; });
  save_model_seed(dir / "refuse-model-vocabulary-3e7.safetensors", mlm);
  edit_description(dir / "refuse-model-vocabulary-3e7.safetensors",
                   [](auto& d) { d["vocabulary"]["size"] = 30000000; });
  save_model_seed(dir / "refuse-model-d-ff.safetensors", mlm);
  edit_description(dir / "refuse-model-d-ff.safetensors",
                   [](auto& d) { d["encoder"]["d_ff"] = 1000000000; });
  // ... and a tensor missing, one too many, one of another shape.
  save_model_seed(dir / "refuse-model-missing-tensor.safetensors", mlm);
  edit_tensors(dir / "refuse-model-missing-tensor.safetensors", [](nn::StateDict& tensors) {
    std::erase_if(tensors, [](const auto& e) {
      return e.first == "model.body.encoder.layers.1.feed_forward.fc2.bias";
    });
  });
  save_model_seed(dir / "refuse-model-extra-tensor.safetensors", mlm);
  edit_tensors(dir / "refuse-model-extra-tensor.safetensors", [](nn::StateDict& tensors) {
    tensors.emplace_back("model.body.encoder.layers.2.norm1.weight", ones({4}));
  });
  save_model_seed(dir / "refuse-model-misshapen-tensor.safetensors", mlm);
  edit_tensors(dir / "refuse-model-misshapen-tensor.safetensors", [](nn::StateDict& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "model.body.encoder.layers.0.attention.q_proj.weight") t = zeros({4, 3});
    }
  });
}

void make_corpus(const fs::path& dir) {
  fs::create_directories(dir);
  // Inputs that resume.
  save_run(dir / "resume-run-step2.safetensors", 2);
  save_run(dir / "resume-run-no-checksums.safetensors", 3);
  rewrite_header(dir / "resume-run-no-checksums.safetensors", drop_checksums);
  // Inputs that load as safetensors or checkpoints but cannot resume.
  {
    fuzz::Target t;
    nn::save_checkpoint((dir / "model-only.safetensors").string(), *t.model);
  }
  // A model description that the file's tensors (the fuzz target's model) do not fit.
  {
    fuzz::Target t;
    const nn::ModelDescription description{
        .encoder = {.layers = 2,
                    .d_model = 8,
                    .heads = 2,
                    .d_ff = 16,
                    .max_seq_len = 8,
                    .attention = nn::AttentionKind::linformer,
                    .linformer = {.k = 4, .k_per_layer = {4, 2}, .sharing = nn::Sharing::none},
                    .per_layer = {}},
        .vocabulary = {.size = 260, .tokenizer = "byte"}};
    nn::save_checkpoint((dir / "refuse-model-description-mismatch.safetensors").string(), *t.model,
                        nullptr,
                        {{nn::kModelMetadataKey, nn::model_description_json(description)}});
  }
  make_model_seeds(dir);
  nn::save_safetensors((dir / "dtypes.safetensors").string(),
                       {{"f32", from<float>({1.5f, -2.0f}, {2})},
                        {"f64", from<double>({0.25}, {1, 1})},
                        {"i64", from<std::int64_t>({-3, 4}, {2})},
                        {"bool", from<bool>({true, false, true}, {3})},
                        {"bf16", from<float>({1.0f, 2.0f}, {2}).to(DType::bfloat16)},
                        {"scalar", scalar_tensor(2.0)},
                        {"empty", zeros({0, 3})}},
                       {{"format", "pt"}});
  write_file(dir / "empty-header.safetensors", std::string("\x02\0\0\0\0\0\0\0{}", 10));
  // The defects the loaders must refuse: run metadata...
  save_run(dir / "refuse-step-abc.safetensors", 2, {{"step", "abc"}});
  save_run(dir / "refuse-step-exponent.safetensors", 2, {{"step", "1e3"}});
  save_run(dir / "refuse-step-negative.safetensors", 2, {{"step", "-5"}});
  save_run(dir / "refuse-step-beyond-steps.safetensors", 2, {{"step", "99999999999"}});
  save_run(dir / "refuse-step-inconsistent.safetensors", 2, {{"step", "1"}});
  save_run(dir / "refuse-generator-negative.safetensors", 2, {{"generator", "-1 -1"}});
  save_run(dir / "refuse-loader-garbage.safetensors", 2, {{"loader", "epoch=1 epoch=x"}});
  // ... the optimizer's step count at INT64_MAX (it would overflow at the next step) ...
  save_run(dir / "refuse-optimizer-step-max.safetensors", 2);
  {
    const fs::path path = dir / "refuse-optimizer-step-max.safetensors";
    nn::SafetensorsFile file = nn::load_safetensors(path.string());
    for (auto& [name, t] : file.tensors) {
      if (name.ends_with(".step")) t = from<std::int64_t>({INT64_MAX}, {});
    }
    nn::save_safetensors(path.string(), file.tensors, file.metadata);
  }
  // ... and a flipped bit in tensor data.
  save_run(dir / "refuse-flipped-data-bit.safetensors", 2);
  {
    const fs::path path = dir / "refuse-flipped-data-bit.safetensors";
    std::string bytes = read_file(path);
    bytes[bytes.size() - 5] = static_cast<char>(bytes[bytes.size() - 5] ^ 0x10);
    write_file(path, bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--make-corpus") {
    make_corpus(argv[2]);
    return 0;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_replay DIR_OR_FILE... | --make-corpus DIR\n");
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::directory_iterator(argv[i])) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.push_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  int failures = 0, resumed = 0, models = 0;
  for (const fs::path& file : files) {
    const std::string bytes = read_file(file);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    const bool resumes = fuzz::last_outcome() == fuzz::Outcome::resumed;
    const bool loads = fuzz::last_model_outcome() == fuzz::ModelOutcome::loaded;
    resumed += resumes;
    models += loads;
    const std::string name = file.filename().string();
    if ((name.starts_with("refuse-") && resumes) || (name.starts_with("resume-") && !resumes)) {
      std::fprintf(stderr, "fuzz_replay: %s %s\n", file.c_str(),
                   resumes ? "resumed but must be refused" : "was refused but must resume");
      ++failures;
    }
    if (name.starts_with("loads-") && !loads) {
      std::fprintf(stderr, "fuzz_replay: %s did not open with load_model\n", file.c_str());
      ++failures;
    }
    if (name.starts_with("refuse-model-") &&
        fuzz::last_model_outcome() != fuzz::ModelOutcome::refused) {
      std::fprintf(
          stderr, "fuzz_replay: %s %s\n", file.c_str(),
          loads ? "opened with load_model but must be refused" : "holds no model description");
      ++failures;
    }
  }
  std::printf("fuzz_replay: %zu inputs, %d resumed, %d opened as models, %d unexpected\n",
              files.size(), resumed, models, failures);
  return failures == 0 && !files.empty() ? 0 : 1;
}
