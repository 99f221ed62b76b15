// The fuzz entry point: any input must load or be refused with a tinyformer::Error; anything
// else (a crash, a sanitizer report, another exception, a hang) is a bug.
#include "fuzz/fuzz_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace fuzz {

using namespace tinyformer;

namespace {

Outcome outcome = Outcome::refused_by_safetensors;

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
  // A model description in the metadata is parsed strictly; never built, as its sizes are the
  // input's to choose.
  if (file.metadata.count(nn::kModelMetadataKey) != 0) {
    try {
      (void)nn::read_model_description(file.metadata, path);
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
