// fuzz_replay: runs the fuzz entry point on files, as the libFuzzer program would, in a build
// without libFuzzer (ctest runs the committed corpus in the normal and the sanitizer build).
//   fuzz_replay DIR_OR_FILE...      every file; one whose name starts with "refuse-" must be
//                                   refused (it holds a defect the loaders must catch), one
//                                   starting with "resume-" must resume
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
  // A model description for the strict reader (parsed, never built).
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
    nn::save_checkpoint((dir / "model-description.safetensors").string(), *t.model, nullptr,
                        {{nn::kModelMetadataKey, nn::model_description_json(description)}});
  }
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
  int failures = 0, resumed = 0;
  for (const fs::path& file : files) {
    const std::string bytes = read_file(file);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    const bool resumes = fuzz::last_outcome() == fuzz::Outcome::resumed;
    resumed += resumes;
    const std::string name = file.filename().string();
    if ((name.starts_with("refuse-") && resumes) || (name.starts_with("resume-") && !resumes)) {
      std::fprintf(stderr, "fuzz_replay: %s %s\n", file.c_str(),
                   resumes ? "resumed but must be refused" : "was refused but must resume");
      ++failures;
    }
  }
  std::printf("fuzz_replay: %zu inputs, %d resumed, %d unexpected\n", files.size(), resumed,
              failures);
  return failures == 0 && !files.empty() ? 0 : 1;
}
