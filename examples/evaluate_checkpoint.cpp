// evaluate_checkpoint: opens a train_mlm or train_causal_lm checkpoint with one call
// (nn::load_model rebuilds the model from the description the checkpoint carries) and computes
// its validation loss exactly as the training program does: train_mlm's on the same sequences
// with the same masks, train_causal_lm's next-byte loss on the same held-out sequences.
//
//   train_mlm --data book.txt --checkpoint run.safetensors
//   evaluate_checkpoint --checkpoint run.safetensors        # the corpus train_mlm was given
//   evaluate_checkpoint --checkpoint run.safetensors --eval-sequences 1024 --device cuda
//
// What the validation set depends on (the sequence length, the held-out share, the batch, the
// seed, the masking rate) is read from the checkpoint's run metadata; the training text must be
// the one the model was trained on (its fingerprint is checked).
#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "train_common.h"

using namespace tinyformer;
using nn::data::ByteTokenizer;
using train::UsageError;

namespace {

constexpr const char* kProgram = "evaluate_checkpoint";

struct Options {
  std::string checkpoint = "train_mlm.safetensors";
  std::string data;                 // empty: the corpus recorded in the checkpoint
  std::int64_t eval_sequences = 0;  // 0: as many as the training run evaluated
  std::string device = "cpu";
  int threads = 0;
};

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Validation loss of a train_mlm or train_causal_lm checkpoint, as the program computes it",
      kProgram};
  app.add_option("--checkpoint", o.checkpoint, "The checkpoint train_mlm or train_causal_lm wrote")
      ->capture_default_str();
  app.add_option("--data", o.data, "The training corpus (default: the one the run recorded)");
  app.add_option("--eval-sequences", o.eval_sequences,
                 "Validation sequences (0: as many as the training run evaluated)")
      ->check(train::integer(0));
  app.add_option("--device", o.device, "cpu or cuda (cuda:1 for a second GPU)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads (0: OMP_NUM_THREADS or every core)")
      ->check(train::integer(0, INT_MAX));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + "; run with --help for the options");
  }
  return o;
}

// The run metadata train_mlm records ("config.seq-len" for its --seq-len), read strictly.
class RunSettings {
 public:
  RunSettings(const nn::Metadata& metadata, std::string path)
      : metadata_(metadata), path_(std::move(path)) {}

  const std::string& text(const std::string& key) const {
    const auto it = metadata_.find(key);
    if (it == metadata_.end()) {
      throw UsageError("--checkpoint " + path_ + " has no \"" + key +
                       "\" entry: it was not written by train_mlm");
    }
    return it->second;
  }
  std::int64_t integer(const std::string& key) const {
    std::int64_t value = 0;
    if (!nn::parse_integer(text(key), 0, INT64_MAX, value)) bad(key);
    return value;
  }
  double number(const std::string& key) const {
    const std::string& t = text(key);
    char* end = nullptr;
    const double value = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(value)) bad(key);
    return value;
  }

 private:
  [[noreturn]] void bad(const std::string& key) const {
    throw UsageError("--checkpoint " + path_ + ": unreadable \"" + key + "\" entry '" + text(key) +
                     "'; the file is corrupted");
  }
  const nn::Metadata& metadata_;
  std::string path_;
};

// A train_causal_lm checkpoint: the next-byte loss on the sequences train_causal_lm evaluated
// (the held-out tail of each file, in sequences of --seq-len + 1 bytes).
int evaluate_causal(const nn::LoadedModel& loaded, const RunSettings& run, const std::string& data,
                    const Options& o, Device device) {
  const std::shared_ptr<nn::CausalLM> model = loaded.as<nn::CausalLM>();
  const std::int64_t seq_len = run.integer("config.seq-len");
  const std::int64_t batch = run.integer("config.batch");
  const std::int64_t eval_sequences =
      o.eval_sequences > 0 ? o.eval_sequences : run.integer("config.eval-sequences");
  const nn::data::SplitCorpus corpus =
      nn::data::load_split_corpus(data, run.number("config.val-fraction"));
  if (nn::data::text_fingerprint(corpus.split.train) != run.text("data.fingerprint")) {
    throw UsageError("--data " + data +
                     ": not the text the model was trained on (its fingerprint differs from the "
                     "checkpoint's); pass the corpus given to train_causal_lm");
  }
  const nn::data::TokenChunks chunks(ByteTokenizer::encode(corpus.split.validation), seq_len + 1);
  if (chunks.size() == 0) {
    throw UsageError("--data " + data + ": no validation sequence of " +
                     std::to_string(seq_len + 1) + " bytes");
  }
  const double loss = nn::next_token_loss(*model, chunks, eval_sequences, batch, device);
  std::printf("model: %s; %lld parameters, trained for %s steps (%s)\n",
              nn::describe(loaded.description).c_str(),
              static_cast<long long>(model->num_parameters()), run.text("step").c_str(),
              o.checkpoint.c_str());
  std::printf("validation: %lld sequences of %lld bytes, from %s\n",
              static_cast<long long>(std::min(chunks.size(), eval_sequences)),
              static_cast<long long>(seq_len), data.c_str());
  // The perplexity as train_causal_lm prints it.
  std::printf("validation loss %.9g nats per byte, perplexity %.3f\n", loss, std::exp(loss));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<Options> parsed = parse_options(argc, argv);
    if (!parsed) return 0;  // --help
    const Options& o = *parsed;
    train::RunFlags device_flags;
    device_flags.device = o.device;
    device_flags.threads = o.threads;
    const Device device = train::setup_device(device_flags);

    // --- The model, from the checkpoint alone. ---
    const nn::LoadedModel loaded = nn::load_model(o.checkpoint, device);
    const bool causal = loaded.kind() == nn::ModelKind::causal_lm;
    if ((loaded.kind() != nn::ModelKind::masked_lm && !causal) ||
        loaded.vocabulary().tokenizer != ByteTokenizer::name) {
      throw UsageError("--checkpoint " + o.checkpoint + " holds a " +
                       nn::model_kind_name(loaded.kind()) + " over the \"" +
                       loaded.vocabulary().tokenizer +
                       "\" vocabulary; this program evaluates byte-level language models "
                       "(train_mlm's MaskedLM, train_causal_lm's CausalLM)");
    }
    const RunSettings run(loaded.metadata, o.checkpoint);
    const std::string data = o.data.empty() ? run.text("config.data") : o.data;
    if (causal) return evaluate_causal(loaded, run, data, o, device);
    const std::shared_ptr<nn::MaskedLM> model = loaded.as<nn::MaskedLM>();

    // --- The validation set train_mlm evaluated on. ---
    const std::int64_t seq_len = run.integer("config.seq-len");
    const std::int64_t batch = run.integer("config.batch");
    const std::int64_t eval_sequences =
        o.eval_sequences > 0 ? o.eval_sequences : run.integer("config.eval-sequences");
    nn::data::MlmConfig mlm;
    mlm.mask_prob = run.number("config.mask-prob");
    const nn::data::SplitCorpus corpus =
        nn::data::load_split_corpus(data, run.number("config.val-fraction"));
    if (nn::data::text_fingerprint(corpus.split.train) != run.text("data.fingerprint")) {
      throw UsageError("--data " + data +
                       ": not the text the model was trained on (its fingerprint differs from "
                       "the checkpoint's); pass the corpus given to train_mlm");
    }
    const nn::data::TokenChunks chunks(ByteTokenizer::encode(corpus.split.validation), seq_len);
    if (chunks.size() == 0) {
      throw UsageError("--data " + data + ": no validation sequence of " + std::to_string(seq_len) +
                       " bytes");
    }
    const nn::MlmValidationSet validation = nn::mlm_validation_set(
        chunks, eval_sequences, batch, mlm, static_cast<std::uint64_t>(run.integer("config.seed")));

    // --- The loss. ---
    const double loss = nn::mlm_validation_loss(*model, validation, device);
    std::printf("model: %s; %lld parameters, trained for %s steps (%s)\n",
                nn::describe(loaded.description).c_str(),
                static_cast<long long>(model->num_parameters()), run.text("step").c_str(),
                o.checkpoint.c_str());
    std::printf("validation: %lld sequences of %lld bytes, %lld masked bytes, from %s\n",
                static_cast<long long>(validation.sequences), static_cast<long long>(seq_len),
                static_cast<long long>(validation.targets), data.c_str());
    std::printf("validation loss %.9g nats per masked byte, perplexity %.4f\n", loss,
                std::exp(loss));
    return 0;
  } catch (...) {
    return train::report_error(kProgram, std::current_exception());
  }
}
