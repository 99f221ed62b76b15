// The fuzz entry point: any input must load or be refused with a tinyformer::Error; anything
// else (a crash, a sanitizer report, another exception, a hang) is a bug.
#include "fuzz/fuzz_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace fuzz {

using namespace tinyformer;

namespace {

Outcome outcome = Outcome::refused_by_safetensors;
ModelOutcome model_outcome = ModelOutcome::no_description;

// One file per process, rewritten for every input (the readers take a path), removed at exit.
struct InputFile {
  std::string path;
  InputFile() {
    const char* dir = std::getenv("TMPDIR");
    path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/tinyformer_fuzz_" +
           std::to_string(::getpid()) + ".safetensors";
  }
  ~InputFile() { ::unlink(path.c_str()); }
};

const std::string& input_path() {
  static const InputFile file;
  return file.path;
}

void write_input(const std::uint8_t* data, std::size_t size) {
  const int fd = ::open(input_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

std::FILE* null_output() {
  static std::FILE* null = std::fopen("/dev/null", "w");
  return null;
}

}  // namespace

Outcome last_outcome() {
  return outcome;
}

ModelOutcome last_model_outcome() {
  return model_outcome;
}

void run_loaded_model(const tinyformer::nn::LoadedModel& loaded) {
  using namespace tinyformer;
  // A few tokens that the vocabulary and the positions admit.
  const std::int64_t n = std::min<std::int64_t>(loaded.config().max_seq_len, 8);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    ids[static_cast<std::size_t>(i)] = i % loaded.vocabulary().size;
  const Tensor tokens = from(ids, {1, n});
  NoGradGuard no_grad;
  if (loaded.kind() == nn::ModelKind::masked_lm) {
    (void)loaded.as<nn::MaskedLM>()->forward(tokens);
  } else if (loaded.kind() == nn::ModelKind::causal_lm) {
    (void)loaded.as<nn::CausalLM>()->forward(tokens);
  } else {
    (void)loaded.as<nn::SequenceClassifier>()->forward(tokens);
  }
}

Target::Target() {
  manual_seed(1);
  model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(3, 4));
  model->push_back(std::make_shared<nn::LayerNorm>(4));
  model->push_back(std::make_shared<nn::Linear>(4, 2));
  optimizer = std::make_unique<nn::optim::AdamW>(nn::optim::decay_groups(*model, 0.1),
                                                 nn::optim::AdamWOptions{.lr = 1e-2});
  loader = std::make_unique<nn::data::Loader>(
      10, nn::data::LoaderOptions{.batch_size = 2, .shuffle = true, .seed = 5});
}

}  // namespace fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tinyformer;
  using fuzz::Outcome;
  fuzz::outcome = Outcome::refused_by_safetensors;
  fuzz::write_input(data, size);
  const std::string& path = fuzz::input_path();
  nn::SafetensorsFile file;
  try {
    file = nn::load_safetensors(path);
  } catch (const Error&) {
    return 0;
  }
  // A file with a model description opens as a model: the description is checked against the
  // file's tensors before the model is built, so its sizes are bounded by the input's; a model
  // that loads runs a forward pass.
  fuzz::model_outcome = fuzz::ModelOutcome::no_description;
  if (file.metadata.count(nn::kModelMetadataKey) != 0) {
    fuzz::model_outcome = fuzz::ModelOutcome::refused;
    try {
      const nn::LoadedModel loaded = nn::load_model(file, path);
      fuzz::model_outcome = fuzz::ModelOutcome::loaded;
      fuzz::run_loaded_model(loaded);
    } catch (const Error&) {
    }
  }
  fuzz::outcome = Outcome::refused_by_checkpoint;
  try {
    fuzz::Target target;
    nn::load_checkpoint(file, path, *target.model, target.optimizer.get());
  } catch (const Error&) {
    return 0;
  }
  fuzz::outcome = Outcome::refused_by_run;
  try {
    fuzz::Target target;
    nn::TrainingRun run({.program = fuzz::kProgram,
                         .steps = fuzz::kSteps,
                         .checkpoint = path,
                         .resume = true,
                         .progress = {.out = fuzz::null_output(), .terminal = false},
                         .handle_interrupts = false},
                        *target.model, *target.optimizer, target.loader.get(), {});
    // A resumed run must be able to take its next step.
    if (run.running()) {
      (void)target.loader->next();
      target.optimizer->zero_grad();
      sum(target.model->forward(ones({2, 3}))).backward();
      target.optimizer->step();
    }
  } catch (const Error&) {
    return 0;
  }
  fuzz::outcome = Outcome::resumed;
  return 0;
}
