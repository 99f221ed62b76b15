// The fuzz target of the checkpoint reader: one input is the bytes of a file, loaded as
// safetensors, as the model its description describes (load_model, when the metadata holds
// one, then a forward pass), as a checkpoint into a small model and optimizer, and as the
// checkpoint a training run resumes from. Built into
// the libFuzzer program (TINYFORMER_FUZZ) and into fuzz_replay, which runs the committed corpus in
// every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <tinyformer/tinyformer.h>

namespace fuzz {

// How far the last input got: refused with an Error by load_safetensors, by load_checkpoint, by
// the training run's resume, or resumed.
enum class Outcome { refused_by_safetensors, refused_by_checkpoint, refused_by_run, resumed };
Outcome last_outcome();
// What load_model made of the last input: no description in it, refused with an Error, loaded.
enum class ModelOutcome { no_description, refused, loaded };
ModelOutcome last_model_outcome();
// A forward pass of a loaded model over a few tokens.
void run_loaded_model(const tinyformer::nn::LoadedModel& loaded);

// The model, optimizer and data loader every input is loaded into, made afresh for each input
// from a fixed seed, so that a result depends on the input alone.
struct Target {
  std::shared_ptr<tinyformer::nn::Sequential> model;
  std::unique_ptr<tinyformer::nn::optim::AdamW> optimizer;
  std::unique_ptr<tinyformer::nn::data::Loader> loader;
  Target();
};
inline constexpr const char* kProgram = "fuzz";
inline constexpr std::int64_t kSteps = 100;

}  // namespace fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
