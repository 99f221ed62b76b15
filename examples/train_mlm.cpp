// train_mlm: masked-language-model pretraining (the Linformer paper's task, in miniature) on
// English text, byte by byte, with full or Linformer attention.
//
//   train_mlm                                   # the fortunes corpus, Linformer k=32, minutes
//   train_mlm --attention full --log full.csv   # the same with standard attention
//   train_mlm --data book.txt --seq-len 256 --projection linear --k 64 --sharing layerwise
//   train_mlm --checkpoint run.safetensors --resume      # continues exactly where it stopped
//   train_mlm --checkpoint run.safetensors --overwrite   # starts over, replacing it
//   train_mlm --stop-at 1000 ...; train_mlm --resume ... # the same run in two sittings
//   train_mlm --plot curves.png --compare full.csv linformer.csv
//
// The default corpus is Debian's `fortunes` package (apt-get install fortunes): about 2.5 MB
// of English quotations, jokes and definitions under /usr/share/games/fortunes.
//
// The defaults (2 layers, d_model 64, n = 128, batch 32, 4000 steps, Linformer k = 32 with mean
// pooling) take a few minutes on 2 CPU cores and end well below the unigram baseline's
// perplexity of 28. A batch of 32 rather than 16 makes runs that differ only in their seed end
// close together (docs/linformer.md, "Stable pretraining at this scale"). Mean pooling is the
// default for its speed: the paper's learned linear projection (--projection linear) starts as
// the same pooling and learns from there (the library's recipe, docs/linformer.md, "Learning
// E"), at about 1.5x the time per step; d_model 128 costs 3.5x the time per step for little
// gain within minutes.
#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "train_common.h"

using namespace tinyformer;
using nn::data::ByteTokenizer;
using train::UsageError;
namespace fs = std::filesystem;

namespace {

constexpr const char* kProgram = "train_mlm";
constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";
constexpr std::int64_t kIgnore = -100;  // label of the positions that are not predicted

// The cross-entropy (nats per byte) of `text` under the byte distribution of `reference`: with
// text == reference, its entropy. It is the loss of the best model that ignores context, since
// a masked position holds each byte with its frequency in the text. Bytes never seen in the
// reference count as seen half a time.
double unigram_cross_entropy(const std::string& reference, const std::string& text) {
  std::vector<double> counts(256, 0.0);
  for (unsigned char c : reference) counts[c] += 1;
  const double total = static_cast<double>(reference.size());
  double loss = 0;
  for (unsigned char c : text) loss -= std::log(std::max(counts[c], 0.5) / total);
  return loss / static_cast<double>(text.size());
}

// The masked positions of a batch's labels (the others are kIgnore).
std::int64_t masked_count(const Tensor& labels) {
  const std::vector<std::int64_t> v = labels.to_vector<std::int64_t>();
  return static_cast<std::int64_t>(
      v.size() - static_cast<std::size_t>(std::count(v.begin(), v.end(), kIgnore)));
}

// The command line: the shared model and run flags plus the masked-LM ones.
struct Options {
  train::ModelFlags model;
  train::RunFlags run;
  std::string data = kDefaultCorpus;
  std::int64_t seq_len = 128;
  std::int64_t eval_sequences = 256;
  double val_fraction = 0.05;
  std::string positions = "learned";
  nn::data::MlmConfig mlm;  // BERT's recipe: 15% of the bytes picked, 80/10/10
};

// Parses and checks the command line; nullopt when --help was printed.
std::optional<Options> parse_options(int argc, char** argv) {
  // The defaults, chosen by measurement, train for a few minutes on 2 CPU cores and reach less
  // than half the unigram perplexity (see the file comment).
  Options o;
  o.model = train::mlm_model_flags();
  o.run.steps = 4000;
  o.run.batch = 32;
  o.run.lr = 3e-3;
  o.run.eval_every = 500;
  o.run.checkpoint = "train_mlm.safetensors";

  CLI::App app{"Masked-LM pretraining on text with full or Linformer attention", kProgram};
  app.add_option("--data", o.data, "A text file, or a directory of text files")
      ->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "Tokens (bytes) per training sequence: n")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--eval-sequences", o.eval_sequences, "Validation sequences per evaluation")
      ->check(train::integer(1))
      ->capture_default_str();
  app.add_option("--val-fraction", o.val_fraction, "Share of the text held out for validation")
      ->check(train::in_range(0.001, 0.5))
      ->capture_default_str();
  app.add_option("--mask-prob", o.mlm.mask_prob, "Share of the bytes picked as masked-LM targets")
      ->check(train::in_range(0.01, 0.9))
      ->capture_default_str();
  app.add_option("--positions", o.positions, "Position encoding: learned or sinusoidal")
      ->check(CLI::IsMember({"learned", "sinusoidal"}))
      ->capture_default_str();
  train::add_model_flags(app, o.model);
  train::add_run_flags(app, o.run);
  train::add_precision_flag(app, o.run);
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
  if (o.run.compare.empty() && o.run.warmup >= o.run.steps) {
    std::printf("note: --warmup %lld is not below --steps %lld; warming up over %lld steps\n",
                static_cast<long long>(o.run.warmup), static_cast<long long>(o.run.steps),
                static_cast<long long>(o.run.steps / 10));
    o.run.warmup = o.run.steps / 10;
  }
  return o;
}

// What the run trains and validates on.
struct Data {
  nn::data::SplitCorpus corpus;
  nn::data::TokenChunks train;
  nn::MlmValidationSet validation;
  double baseline = 0;      // the unigram model's loss on the training text
  double val_baseline = 0;  // and on the validation text
};

// Reads the corpus and cuts it into sequences; a UsageError when it is too short.
Data load_data(const Options& o) {
  if (o.data == kDefaultCorpus && !fs::exists(o.data)) {
    throw UsageError(std::string("the default corpus ") + kDefaultCorpus +
                     " is missing: install it with 'apt-get install fortunes', or pass --data "
                     "FILE with any text file or directory");
  }
  nn::data::SplitCorpus corpus = nn::data::load_split_corpus(o.data, o.val_fraction);
  if (corpus.bytes < 4 * static_cast<std::size_t>(o.seq_len)) {
    throw UsageError("--data " + o.data + " holds " + std::to_string(corpus.bytes) +
                     " bytes, too little for sequences of " + std::to_string(o.seq_len) +
                     " bytes; pass a longer text or a smaller --seq-len");
  }
  const nn::data::TextSplit& split = corpus.split;
  nn::data::TokenChunks train_chunks(ByteTokenizer::encode(split.train), o.seq_len);
  const nn::data::TokenChunks val_chunks(ByteTokenizer::encode(split.validation), o.seq_len);
  if (train_chunks.size() < o.run.batch || val_chunks.size() == 0) {
    throw UsageError("--data " + o.data + ": " + std::to_string(train_chunks.size()) +
                     " training and " + std::to_string(val_chunks.size()) +
                     " validation sequences of " + std::to_string(o.seq_len) +
                     " bytes are too few for --batch " + std::to_string(o.run.batch) +
                     "; pass a longer text, or lower --seq-len or --batch");
  }
  nn::MlmValidationSet validation =
      nn::mlm_validation_set(val_chunks, o.eval_sequences, o.run.batch, o.mlm, o.run.seed);
  const double baseline = unigram_cross_entropy(split.train, split.train);
  const double val_baseline = unigram_cross_entropy(split.train, split.validation);
  return {std::move(corpus), std::move(train_chunks), std::move(validation), baseline,
          val_baseline};
}

// What the checkpoint records about the run. A run resumes only when the keys of kMustMatch
// agree: the model's shape and the data it sees.
nn::Metadata run_metadata(const Options& o, const nn::EncoderConfig& config, const Data& data) {
  train::Metadata meta = train::model_metadata(o.model);
  train::put(meta, "config.positions", o.positions);
  train::put(meta, "config.mask-prob", o.mlm.mask_prob);
  train::put(meta, "config.seq-len", o.seq_len);
  train::put(meta, "config.max-seq-len", config.max_seq_len);
  train::put(meta, "config.batch", o.run.batch);
  train::put(meta, "config.seed", static_cast<std::int64_t>(o.run.seed));
  train::put(meta, "config.val-fraction", o.val_fraction);
  train::put(meta, "config.steps", o.run.steps);
  train::put(meta, "config.lr", o.run.lr);
  train::put(meta, "config.warmup", o.run.warmup);
  train::put(meta, "config.weight-decay", o.run.weight_decay);
  train::put(meta, "config.clip", o.run.clip);
  train::put(meta, "data.bytes", static_cast<std::int64_t>(data.corpus.split.train.size()));
  train::put(meta, "data.fingerprint", nn::data::text_fingerprint(data.corpus.split.train));
  // Not needed to resume; a program that evaluates the checkpoint reads them.
  train::put(meta, "config.data", o.data);
  train::put(meta, "config.eval-sequences", o.eval_sequences);
  return meta;
}
const std::vector<std::string> kMustMatch = {"config.attention",       "config.k",
                                             "config.projection",      "config.sharing",
                                             "config.projection-init", "config.projection-lr-scale",
                                             "config.layers",          "config.d-model",
                                             "config.heads",           "config.d-ff",
                                             "config.positions",       "config.mask-prob",
                                             "config.seq-len",         "config.max-seq-len",
                                             "config.batch",           "config.seed",
                                             "config.val-fraction",    "data.bytes",
                                             "data.fingerprint"};

void print_setup(const Options& o, const nn::EncoderConfig& config, const Data& data,
                 const nn::MaskedLM& model, Device device, const nn::data::Loader& loader,
                 const nn::TrainingRun& run) {
  const nn::data::SplitCorpus& corpus = data.corpus;
  std::printf("corpus: %s (%lld file%s, %zu bytes): %zu for training, %zu for validation\n",
              o.data.c_str(), static_cast<long long>(corpus.files), corpus.files == 1 ? "" : "s",
              corpus.bytes, corpus.split.train.size(), corpus.split.validation.size());
  std::printf("model: MaskedLM, %s, %lld parameters, on %s%s\n", train::describe(config).c_str(),
              static_cast<long long>(model.num_parameters()), device.str().c_str(),
              o.run.precision == "bf16" ? ", mixed precision (bfloat16 products)" : "");
  std::printf(
      "data: %lld sequences of %lld bytes, batch %lld (%lld steps per epoch); "
      "validation: %lld sequences, %lld masked bytes\n",
      static_cast<long long>(data.train.size()), static_cast<long long>(o.seq_len),
      static_cast<long long>(o.run.batch), static_cast<long long>(loader.batches_per_epoch()),
      static_cast<long long>(data.validation.sequences),
      static_cast<long long>(data.validation.targets));
  std::printf(
      "unigram baseline (a model that ignores context): %.4f nats per byte = perplexity "
      "%.2f on the training text, %.4f = perplexity %.2f on the validation text\n",
      data.baseline, std::exp(data.baseline), data.val_baseline, std::exp(data.val_baseline));
  if (run.resumed()) {
    std::printf("resumed from %s at step %lld\n", o.run.checkpoint.c_str(),
                static_cast<long long>(run.step()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<Options> parsed = parse_options(argc, argv);
    if (!parsed) return 0;  // --help
    const Options& o = *parsed;
    if (!o.run.compare.empty()) {  // --plot with --compare only draws logs of earlier runs
      train::plot_compared(o.run, "val_ppl", "validation perplexity");
      return 0;
    }

    // --- With --distributed, this process's part in the job (mpirun -np N). ---
    train::DistributedRun dist(o.run);

    // --- Configuration, device, data: everything is checked before anything is written. ---
    const nn::EncoderConfig config = train::encoder_config(o.model, o.seq_len);
    const Device device = train::setup_device(o.run);
    train::check_writable(o.run.checkpoint, "--checkpoint");
    train::check_writable(o.run.log, "--log");
    train::check_writable(o.run.plot, "--plot");
    // No output may be the data or another output, nor replace a checkpoint unasked.
    nn::TrainingRunOptions run_options =
        train::run_options(o.run, kProgram, device, {"val_loss", "val_ppl"}, {{"--data", o.data}});
    nn::check_run_paths(run_options);
    const Data data = load_data(o);

    // --- Model, optimizer, schedule, data order; the run resumes from --checkpoint. ---
    // The description travels in every checkpoint: nn::load_model rebuilds the model from it.
    const nn::ModelDescription description{
        .kind = nn::ModelKind::masked_lm,
        .encoder = config,
        .vocabulary = {.size = ByteTokenizer::vocab_size, .tokenizer = ByteTokenizer::name},
        .positions = o.positions == "learned" ? nn::PositionEncoding::learned
                                              : nn::PositionEncoding::sinusoidal,
        .tie_weights = true};
    manual_seed(o.run.seed);
    auto model = nn::make_model<nn::MaskedLM>(description, train::init_config(o.model));
    model->to(device);
    dist.wrap(model);  // --distributed: rank 0's weights everywhere, gradients averaged
    nn::optim::AdamW optimizer(nn::optim::decay_groups(*model, o.run.weight_decay),
                               {.lr = o.run.lr, .weight_decay = o.run.weight_decay});
    const nn::optim::WarmupCosine schedule(o.run.lr, o.run.warmup, o.run.steps, o.run.lr / 10);
    nn::data::Loader loader(
        data.train.size(),
        {.batch_size = o.run.batch,  // the global batch; each process takes its share
         .shuffle = true,
         .drop_last = true,
         .seed = o.run.seed,
         .rank = dist.rank(),
         .world_size = dist.world_size()});
    run_options.model = description;
    nn::TrainingRun run(run_options, *model, optimizer, &loader, run_metadata(o, config, data),
                        kMustMatch);
    print_setup(o, config, data, *model, device, loader, run);

    // --- The training loop: batch -> forward -> loss -> backward -> clip -> step. ---
    const std::vector<Tensor> params = model->parameters();
    // --precision bf16: bfloat16 copies of the (resumed) float32 weights, refreshed every step.
    std::optional<nn::MixedPrecision> mixed;
    if (o.run.precision == "bf16") mixed.emplace(*model);
    train::StepProfile profile(o.run.profile);  // --profile N
    while (run.running()) {
      const nn::data::LoaderBatch order = loader.next();
      // Masks are drawn from (seed, epoch, example): a resumed run redraws them exactly.
      const nn::data::MlmBatch batch =
          nn::data::mlm_batch(data.train, order.indices, o.mlm, o.run.seed, order.epoch);
      const Tensor tokens = batch.tokens.to(device);  // [B, n]
      const Tensor labels = batch.labels.to(device);  // [B, n], kIgnore where not masked

      run.start_step();
      profile.step_started(run);
      const double lr = schedule.lr_at(run.step());
      optimizer.set_lr(lr);
      Tensor loss;
      {
        // --precision bf16: the forward's products in bfloat16 (the backward's follow).
        const AutocastGuard autocast = mixed ? mixed->autocast() : AutocastGuard(DType::float32);
        const Tensor logits = model->forward(tokens);  // [B, n, V]
        loss = cross_entropy(logits.reshape({-1, ByteTokenizer::vocab_size}), labels.reshape({-1}),
                             kIgnore);
      }
      // --distributed: processes mask different numbers of bytes; weighting each one's mean by
      // its share makes their averaged gradient the whole batch's.
      if (dist.enabled()) loss = loss * dist.loss_weight(masked_count(batch.labels));
      optimizer.zero_grad();
      loss.backward();
      std::optional<double> grad_norm;
      if (o.run.clip > 0) grad_norm = nn::optim::clip_grad_norm(params, o.run.clip);
      optimizer.step();
      if (mixed) mixed->refresh();
      run.end_step({.loss = loss.item<double>(),
                    .lr = lr,
                    .grad_norm = grad_norm,
                    .tokens = tokens.numel(),
                    .epoch = order.epoch});
      profile.step_ended(run);

      if (run.evaluation_due()) {
        run.pause();
        const double val_loss =
            nn::mlm_validation_loss(*model, data.validation, device, dist.enabled());
        char line[160];
        std::snprintf(line, sizeof line,
                      "step %lld: validation loss %.4f, perplexity %.3f (training loss %.4f)",
                      static_cast<long long>(run.step()), val_loss, std::exp(val_loss),
                      run.smoothed_loss());
        run.report_evaluation({val_loss, std::exp(val_loss)}, line);
      }
      run.log_and_checkpoint();  // the CSV row (--log-every) and the checkpoint when due
    }
    profile.finish(run);
    run.finish();  // saves the checkpoint
    // Ctrl-C or SIGTERM ended the loop after a step: saved; exit with 130 or 143.
    if (run.interrupted()) return run.exit_status();

    if (run.stopped_early()) {
      std::printf("stopped after step %lld (--stop-at); saved %s, continue with --resume\n",
                  static_cast<long long>(run.step()), o.run.checkpoint.c_str());
      return 0;
    }

    // --- The final evaluation and the summary. ---
    const double val_loss =
        nn::mlm_validation_loss(*model, data.validation, device, dist.enabled());
    run.log_final({val_loss, std::exp(val_loss)});
    if (run.steps_this_run() > 0) {
      std::printf(
          "training loss: %.4f at the first step, %.4f at the end (smoothed); unigram "
          "baseline %.4f\n",
          run.first_loss(), run.smoothed_loss(), data.baseline);
    }
    std::printf(
        "final validation perplexity %.3f (loss %.4f nats per masked byte; unigram "
        "baseline perplexity %.2f)\n",
        std::exp(val_loss), val_loss, std::exp(data.val_baseline));
    if (run.steps_this_run() > 0) {
      std::printf(
          "throughput: %.0f tokens/s in forward + backward + optimizer step (%lld steps "
          "of %lldx%lld tokens in %.1f s; %.1f s in all)\n",
          static_cast<double>(run.tokens_this_run()) / run.compute_seconds(),
          static_cast<long long>(run.steps_this_run()), static_cast<long long>(o.run.batch),
          static_cast<long long>(o.seq_len), run.compute_seconds(), run.elapsed_seconds());
    }
    if (!o.run.checkpoint.empty()) std::printf("checkpoint: %s\n", o.run.checkpoint.c_str());
    if (!o.run.plot.empty() && dist.rank() == 0) {
      nn::plot_logs(o.run.plot, {o.run.log}, "val_ppl", "validation perplexity");
      std::printf("plot: %s\n", o.run.plot.c_str());
    }
    return 0;
  } catch (...) {
    return train::report_error(kProgram, std::current_exception());
  }
}
