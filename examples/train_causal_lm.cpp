// train_causal_lm: a GPT-style byte-level language model (nn::CausalLM, causal full attention)
// trained to predict the next byte of English text, then asked to write some.
//
//   train_causal_lm                           # the fortunes corpus, a few minutes on 2 cores
//   train_causal_lm --prompt "Love is " --temperature 0.8 --generate 400
//   train_causal_lm --data book.txt --d-model 128 --layers 4 --steps 8000
//   train_causal_lm --checkpoint lm.safetensors --resume   # continues where it stopped
//   train_causal_lm --overwrite            # starts over, replacing train_causal_lm.safetensors
//
// The default corpus is Debian's `fortunes` package (apt-get install fortunes). Validation
// perplexity is exp of the mean next-byte loss over fixed held-out sequences; the unigram
// baseline (byte frequencies, no context) is printed next to it.
#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "train_common.h"

using namespace tinyformer;
using nn::data::ByteTokenizer;
using train::UsageError;
namespace fs = std::filesystem;

namespace {

constexpr const char* kProgram = "train_causal_lm";
constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

// The text of `path` (a file, or the text files below a directory: nn::data::load_split_corpus),
// the last `val_fraction` of each file held out for validation.
nn::data::TextSplit load_corpus(const std::string& path, double val_fraction) {
  if (path == kDefaultCorpus && !fs::exists(path)) {
    throw UsageError(std::string("the default corpus ") + kDefaultCorpus +
                     " is missing: install it with 'apt-get install fortunes', or pass --data "
                     "FILE with any text file or directory");
  }
  return nn::data::load_split_corpus(path, val_fraction).split;
}

// The next-byte loss (nats) of the best model without context: byte frequencies of `reference`
// evaluated on `text`. Bytes never seen in the reference count as seen half a time.
double unigram_cross_entropy(const std::string& reference, const std::string& text) {
  std::vector<double> counts(256, 0.0);
  for (unsigned char c : reference) counts[c] += 1;
  double loss = 0;
  for (unsigned char c : text)
    loss -= std::log(std::max(counts[c], 0.5) / static_cast<double>(reference.size()));
  return loss / static_cast<double>(text.size());
}

// Sequences of n + 1 bytes: the model reads the first n and predicts the last n.
struct NextToken {
  Tensor inputs;   // [B, n]
  Tensor targets;  // [B, n]
};
NextToken next_token_batch(const nn::data::TokenChunks& chunks,
                           const std::vector<std::int64_t>& indices) {
  const Tensor both = chunks.batch(indices);  // [B, n + 1]
  const std::int64_t n = both.size(1) - 1;
  return {both.narrow(1, 0, n).contiguous(), both.narrow(1, 1, n).contiguous()};
}

struct Options {
  train::RunFlags run;
  std::string data = kDefaultCorpus;
  std::int64_t layers = 2, d_model = 96, heads = 4, d_ff = 384, seq_len = 128;
  double dropout = 0.0;
  double val_fraction = 0.05;
  std::int64_t eval_sequences = 128;
  std::string prompt = "The ";
  std::int64_t generate = 300;
  double temperature = 0.8;
  std::int64_t top_k = 0;
};

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  o.run.steps = 3000;
  o.run.batch = 16;
  o.run.lr = 3e-3;
  o.run.eval_every = 500;
  o.run.checkpoint = "train_causal_lm.safetensors";
  CLI::App app{"A byte-level GPT-style language model: training and generation", kProgram};
  app.add_option("--data", o.data, "A text file, or a directory of text files")
      ->capture_default_str();
  app.add_option("--layers", o.layers, "Decoder layers")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--d-model", o.d_model, "Model width")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--heads", o.heads, "Attention heads (must divide --d-model)")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--d-ff", o.d_ff, "Feed-forward width")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--dropout", o.dropout, "Dropout on residual branches and embeddings")
      ->check(train::in_range(0, 0.9))
      ->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "Context length in bytes (the model's max_seq_len)")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--val-fraction", o.val_fraction, "Share of each file held out for validation")
      ->check(train::in_range(0.001, 0.5))
      ->capture_default_str();
  app.add_option("--eval-sequences", o.eval_sequences, "Validation sequences per evaluation")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--prompt", o.prompt, "Text the sample starts from")->capture_default_str();
  app.add_option("--generate", o.generate, "Bytes to generate after training (0: none)")
      ->check(train::integer(0))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "Sampling temperature (0: greedy)")
      ->check(train::non_negative())
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "Sample among the k most likely bytes only (0: all)")
      ->check(train::integer(0, ByteTokenizer::vocab_size))
      ->capture_default_str();
  train::add_run_flags(app, o.run);
  train::add_profile_flag(app, o.run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + "; run with --help for the options");
  }
  if (o.run.checkpoint == "none") o.run.checkpoint.clear();
  train::check_run_flags(o.run);
  if (!o.run.compare.empty()) throw UsageError("--compare is not supported by this program");
  if (o.run.warmup >= o.run.steps) o.run.warmup = o.run.steps / 10;
  if (o.d_model % o.heads != 0) {
    throw UsageError("--heads " + std::to_string(o.heads) + " does not divide --d-model " +
                     std::to_string(o.d_model));
  }
  if (o.prompt.empty() || static_cast<std::int64_t>(o.prompt.size()) > o.seq_len) {
    throw UsageError("--prompt must hold 1 to --seq-len (" + std::to_string(o.seq_len) +
                     ") bytes, got " + std::to_string(o.prompt.size()));
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<Options> parsed = parse_options(argc, argv);
    if (!parsed) return 0;  // --help
    const Options& o = *parsed;

    // --- Configuration, device, data. ---
    const nn::EncoderConfig config{.layers = o.layers,
                                   .d_model = o.d_model,
                                   .heads = o.heads,
                                   .d_ff = o.d_ff,
                                   .max_seq_len = o.seq_len,
                                   .dropout = o.dropout};
    const Device device = train::setup_device(o.run);
    train::check_writable(o.run.checkpoint, "--checkpoint");
    train::check_writable(o.run.log, "--log");
    train::check_writable(o.run.plot, "--plot");
    // No output may be the data or another output, nor replace a checkpoint unasked.
    nn::TrainingRunOptions run_options =
        train::run_options(o.run, kProgram, device, {"val_loss", "val_ppl"}, {{"--data", o.data}});
    nn::check_run_paths(run_options);
    const nn::data::TextSplit text = load_corpus(o.data, o.val_fraction);
    const nn::data::TokenChunks train_chunks(ByteTokenizer::encode(text.train), o.seq_len + 1);
    const nn::data::TokenChunks val_chunks(ByteTokenizer::encode(text.validation), o.seq_len + 1);
    if (train_chunks.size() < o.run.batch || val_chunks.size() == 0) {
      throw UsageError("--data " + o.data + ": " + std::to_string(train_chunks.size()) +
                       " training and " + std::to_string(val_chunks.size()) +
                       " validation sequences are too few for --batch " +
                       std::to_string(o.run.batch) + "; pass a longer text or lower --seq-len");
    }
    const double val_baseline = unigram_cross_entropy(text.train, text.validation);

    // --- Model, optimizer, schedule, data order; the run resumes from --checkpoint. ---
    // The description travels in every checkpoint: nn::load_model rebuilds the model from it.
    const nn::ModelDescription description{
        .kind = nn::ModelKind::causal_lm,
        .encoder = config,
        .vocabulary = {.size = ByteTokenizer::vocab_size, .tokenizer = ByteTokenizer::name}};
    manual_seed(o.run.seed);
    // Positions at five times the token scale, as for masked-LM pretraining (nn::InitConfig).
    auto model = nn::make_model<nn::CausalLM>(description, nn::InitConfig::language_model());
    model->to(device);
    nn::optim::AdamW optimizer(nn::optim::decay_groups(*model, o.run.weight_decay),
                               {.lr = o.run.lr, .weight_decay = o.run.weight_decay});
    const nn::optim::WarmupCosine schedule(o.run.lr, o.run.warmup, o.run.steps, o.run.lr / 10);
    nn::data::Loader loader(
        train_chunks.size(),
        {.batch_size = o.run.batch, .shuffle = true, .drop_last = true, .seed = o.run.seed});
    nn::Metadata meta;
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, std::int64_t>>{{"config.layers", o.layers},
                                                           {"config.d-model", o.d_model},
                                                           {"config.heads", o.heads},
                                                           {"config.d-ff", o.d_ff},
                                                           {"config.seq-len", o.seq_len},
                                                           {"config.batch", o.run.batch},
                                                           {"config.steps", o.run.steps}})
      train::put(meta, key, value);
    train::put(meta, "config.seed", static_cast<std::int64_t>(o.run.seed));
    train::put(meta, "config.eval-sequences", o.eval_sequences);
    train::put(meta, "config.val-fraction", o.val_fraction);
    train::put(meta, "config.data", o.data);
    train::put(meta, "data.bytes", static_cast<std::int64_t>(text.train.size()));
    train::put(meta, "data.fingerprint", nn::data::text_fingerprint(text.train));
    run_options.model = description;
    nn::TrainingRun run(run_options, *model, optimizer, &loader, meta,
                        {"config.layers", "config.d-model", "config.heads", "config.d-ff",
                         "config.seq-len", "config.batch", "config.seed", "data.bytes"});
    std::printf("corpus: %s: %zu bytes for training, %zu for validation\n", o.data.c_str(),
                text.train.size(), text.validation.size());
    std::printf(
        "model: CausalLM, %lld layers, d_model %lld, %lld heads, context %lld bytes, "
        "%lld parameters, on %s\n",
        static_cast<long long>(o.layers), static_cast<long long>(o.d_model),
        static_cast<long long>(o.heads), static_cast<long long>(o.seq_len),
        static_cast<long long>(model->num_parameters()), device.str().c_str());
    std::printf("unigram baseline (no context): perplexity %.2f on the validation text\n",
                std::exp(val_baseline));

    // --- The training loop: batch -> forward -> next-token loss -> backward -> clip -> step. ---
    const std::vector<Tensor> params = model->parameters();
    train::StepProfile profile(o.run.profile);  // --profile N
    while (run.running()) {
      const nn::data::LoaderBatch order = loader.next();
      const NextToken batch = next_token_batch(train_chunks, order.indices);
      const Tensor inputs = batch.inputs.to(device), targets = batch.targets.to(device);
      run.start_step();
      profile.step_started(run);
      const double lr = schedule.lr_at(run.step());
      optimizer.set_lr(lr);
      const Tensor logits = model->forward(inputs);  // [B, n, V]: position i predicts i + 1
      const Tensor loss =
          cross_entropy(logits.reshape({-1, ByteTokenizer::vocab_size}), targets.reshape({-1}));
      optimizer.zero_grad();
      loss.backward();
      std::optional<double> grad_norm;
      if (o.run.clip > 0) grad_norm = nn::optim::clip_grad_norm(params, o.run.clip);
      optimizer.step();
      run.end_step({.loss = loss.item<double>(),
                    .lr = lr,
                    .grad_norm = grad_norm,
                    .tokens = inputs.numel(),
                    .epoch = order.epoch});
      profile.step_ended(run);
      if (run.evaluation_due()) {
        run.pause();
        const double val_loss =
            nn::next_token_loss(*model, val_chunks, o.eval_sequences, o.run.batch, device);
        char line[160];
        std::snprintf(line, sizeof line, "step %lld: validation perplexity %.3f (loss %.4f)",
                      static_cast<long long>(run.step()), std::exp(val_loss), val_loss);
        run.report_evaluation({val_loss, std::exp(val_loss)}, line);
      }
      run.log_and_checkpoint();
    }
    profile.finish(run);
    run.finish();
    if (run.interrupted()) return run.exit_status();
    if (run.stopped_early()) {
      std::printf("stopped after step %lld (--stop-at); continue with --resume\n",
                  static_cast<long long>(run.step()));
      return 0;
    }

    // --- The final evaluation, and a sample. ---
    const double val_loss =
        nn::next_token_loss(*model, val_chunks, o.eval_sequences, o.run.batch, device);
    run.log_final({val_loss, std::exp(val_loss)});
    std::printf(
        "final validation perplexity %.3f (loss %.4f nats per byte; unigram baseline "
        "perplexity %.2f)\n",
        std::exp(val_loss), val_loss, std::exp(val_baseline));
    if (run.steps_this_run() > 0) {
      std::printf("training: %lld steps in %.1f s (%.0f tokens/s)\n",
                  static_cast<long long>(run.steps_this_run()), run.compute_seconds(),
                  static_cast<double>(run.tokens_this_run()) / run.compute_seconds());
    }
    if (o.generate > 0) {
      const std::vector<std::int64_t> out =
          model->generate(ByteTokenizer::encode(o.prompt), o.generate,
                          {.temperature = o.temperature, .top_k = o.top_k, .seed = o.run.seed});
      std::printf("sample (temperature %g%s):\n%s%s\n", o.temperature,
                  o.top_k > 0 ? (", top-k " + std::to_string(o.top_k)).c_str() : "",
                  o.prompt.c_str(), ByteTokenizer::decode(out).c_str());
    }
    if (!o.run.plot.empty()) {
      nn::plot_logs(o.run.plot, {o.run.log}, "val_ppl", "validation perplexity");
      std::printf("plot: %s\n", o.run.plot.c_str());
    }
    return 0;
  } catch (...) {
    return train::report_error(kProgram, std::current_exception());
  }
}
