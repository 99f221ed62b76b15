// train_listops: Long Range Arena's ListOps task (nested MIN/MAX/MED/SM expressions, classified
// into their value 0-9) with a Transformer or Linformer classifier.
//
//   train_listops                               # short expressions (100-400 tokens), minutes
//   train_listops --attention full              # the same with standard attention
//   train_listops --preset lra --device cuda    # LRA's lengths (500-2000) and split sizes
//
// The data is generated on first use (seeded, so every machine gets the same files) into
// --data-dir as LRA's TSV files, basic_{train,val,test}.tsv, and read from there afterwards.
#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "train_common.h"

using namespace tinyformer;
using nn::data::ListOpsExample;
using nn::data::ListOpsVocab;
using train::UsageError;
namespace fs = std::filesystem;

namespace {

constexpr const char* kProgram = "train_listops";

struct Preset {
  nn::data::ListOpsOptions options;
  std::int64_t train, validation, test;
};

Preset preset(const std::string& name) {
  // LRA: 96,000 / 2,000 / 2,000 expressions of 500-2000 tokens. "short" keeps the generator's
  // rules with shorter expressions and fewer of them, for a CPU run of minutes.
  if (name == "lra") return {nn::data::ListOpsOptions{}, 96'000, 2'000, 2'000};
  if (name == "short") return {nn::data::ListOpsOptions::short_sequences(), 20'000, 1'000, 1'000};
  throw UsageError("--preset: unknown preset '" + name + "'; use short or lra");
}

struct Splits {
  std::vector<ListOpsExample> train, validation, test;
  bool generated = false;
};

// Reads the three files, or generates and writes all three when any is missing. The files are
// written atomically, the training file last, so an interrupted generation never leaves a set
// that looks complete.
Splits load_or_generate(const fs::path& dir, const Preset& p, std::uint64_t data_seed) {
  const fs::path train = dir / "basic_train.tsv", val = dir / "basic_val.tsv",
                 test = dir / "basic_test.tsv";
  Splits s;
  if (!fs::exists(train) || !fs::exists(val) || !fs::exists(test)) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      throw UsageError("--data-dir " + dir.string() + ": cannot create it (" + ec.message() +
                       "); choose a writable directory");
    }
    std::printf("generating ListOps into %s (%lld/%lld/%lld expressions of %lld-%lld tokens)...\n",
                dir.string().c_str(), static_cast<long long>(p.train),
                static_cast<long long>(p.validation), static_cast<long long>(p.test),
                static_cast<long long>(p.options.min_len),
                static_cast<long long>(p.options.max_len));
    std::fflush(stdout);
    nn::data::ListOpsSplits g =
        nn::data::generate_listops_splits(p.train, p.validation, p.test, p.options, data_seed);
    nn::data::write_listops_tsv(val, g.validation);
    nn::data::write_listops_tsv(test, g.test);
    nn::data::write_listops_tsv(train, g.train);
    s.generated = true;
  }
  s.train = nn::data::read_listops_tsv(train);
  s.validation = nn::data::read_listops_tsv(val);
  s.test = nn::data::read_listops_tsv(test);
  for (const auto* split : {&s.train, &s.validation, &s.test}) {
    if (split->empty()) {
      throw UsageError("--data-dir " + dir.string() +
                       ": a split file holds no examples; delete the directory to regenerate");
    }
  }
  return s;
}

std::int64_t longest(const Splits& s) {
  std::size_t n = 0;
  for (const auto* split : {&s.train, &s.validation, &s.test}) {
    for (const ListOpsExample& e : *split) n = std::max(n, e.tokens.size());
  }
  return static_cast<std::int64_t>(n);
}

// FNV-1a over the training expressions and labels: a checkpoint is not resumed on other data.
std::string fingerprint(const std::vector<ListOpsExample>& examples) {
  std::uint32_t hash = 2166136261u;
  auto mix = [&](std::uint8_t byte) { hash = (hash ^ byte) * 16777619u; };
  for (const ListOpsExample& e : examples) {
    for (std::uint8_t t : e.tokens) mix(t);
    mix(static_cast<std::uint8_t>(100 + e.label));
  }
  char out[16];
  std::snprintf(out, sizeof out, "%08x", hash);
  return out;
}

struct Score {
  double loss = 0;
  double accuracy = 0;
};

// Mean loss and accuracy over a whole split, without dropout.
Score evaluate(nn::SequenceClassifier& model, const std::vector<ListOpsExample>& examples,
               std::int64_t batch, Device device, const train::DistributedRun& dist) {
  NoGradGuard no_grad;
  model.eval();
  double total_loss = 0;
  std::int64_t correct = 0;
  const auto n = static_cast<std::int64_t>(examples.size());
  // With --distributed each process takes every world_size-th batch, and the sums are added.
  for (std::int64_t first = 0; first < n; first += batch) {
    if (!dist.is_mine(first / batch)) continue;
    std::vector<std::int64_t> indices;
    for (std::int64_t i = first; i < std::min(first + batch, n); ++i) indices.push_back(i);
    const nn::data::ListOpsBatch b = nn::data::listops_batch(examples, indices);
    const Tensor logits = model.forward(b.tokens.to(device), b.padding_mask.to(device));  // [B, 10]
    total_loss += cross_entropy(logits, b.labels.to(device), -100, Reduction::sum).item<double>();
    const std::vector<float> scores = logits.to(Device::cpu()).to_vector<float>();
    const std::vector<std::int64_t> labels = b.labels.to_vector<std::int64_t>();
    for (std::size_t r = 0; r < labels.size(); ++r) {
      const float* row = scores.data() + r * ListOpsVocab::num_classes;
      const auto predicted = std::max_element(row, row + ListOpsVocab::num_classes) - row;
      correct += predicted == labels[r];
    }
  }
  model.train();
  return {dist.sum(total_loss) / static_cast<double>(n),
          dist.sum(static_cast<double>(correct)) / static_cast<double>(n)};
}

// The command line: the shared model and run flags plus the ListOps ones.
struct Options {
  train::ModelFlags model;
  train::RunFlags run;
  std::string preset = "short";
  std::string data_dir;
  std::uint64_t data_seed = 0;
  std::string pooling = "mean";
  std::int64_t train_examples = 0, val_examples = 0, test_examples = 0;
};

// Parses and checks the command line; nullopt when --help was printed.
std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  o.model.d_model = 64;
  o.model.d_ff = 128;
  // Measured: these defaults take about 1.5 minutes on 2 CPU cores and reach about 33% test
  // accuracy on the short preset, full attention 35% in twice the time (LRA reports 36.4% for
  // the Transformer and 35.7% for Linformer at full length and size).
  o.run.steps = 800;
  o.run.lr = 1e-3;
  o.run.checkpoint = "train_listops.safetensors";

  CLI::App app{"ListOps classification with full or Linformer attention", kProgram};
  app.add_option("--preset", o.preset,
                 "Data: short (100-400 tokens, 20k/1k/1k examples) or lra (500-2000 tokens, "
                 "96k/2k/2k, as Long Range Arena)")
      ->check(CLI::IsMember({"short", "lra"}))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir,
                 "Where the TSV splits are read, or generated when missing "
                 "(default: listops_data/<preset>); the sizes below apply when generating");
  app.add_option("--data-seed", o.data_seed, "Seed of the generated expressions")
      ->check(train::integer(0, UINT64_MAX))
      ->capture_default_str();
  app.add_option("--train-examples", o.train_examples,
                 "Expressions to generate for training (0: the preset's count)")
      ->check(train::integer(0));
  app.add_option("--val-examples", o.val_examples,
                 "Expressions to generate for validation (0: the preset's count)")
      ->check(train::integer(0));
  app.add_option("--test-examples", o.test_examples,
                 "Expressions to generate for the test set (0: the preset's count)")
      ->check(train::integer(0));
  app.add_option("--pooling", o.pooling, "Sequence summary fed to the classifier")
      ->check(CLI::IsMember({"mean", "cls"}))
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
  if (o.data_dir.empty()) o.data_dir = "listops_data/" + o.preset;
  return o;
}

// What the checkpoint records about the run. A run resumes only when the keys of kMustMatch
// agree: the model's shape and the data it sees.
nn::Metadata run_metadata(const Options& o, const nn::EncoderConfig& config, const Splits& data) {
  train::Metadata meta = train::model_metadata(o.model);
  train::put(meta, "config.max-seq-len", config.max_seq_len);
  train::put(meta, "config.pooling", o.pooling);
  train::put(meta, "config.batch", o.run.batch);
  train::put(meta, "config.seed", static_cast<std::int64_t>(o.run.seed));
  train::put(meta, "config.steps", o.run.steps);
  train::put(meta, "config.lr", o.run.lr);
  train::put(meta, "config.warmup", o.run.warmup);
  train::put(meta, "config.weight-decay", o.run.weight_decay);
  train::put(meta, "config.clip", o.run.clip);
  train::put(meta, "data.examples", static_cast<std::int64_t>(data.train.size()));
  train::put(meta, "data.fingerprint", fingerprint(data.train));
  return meta;
}
const std::vector<std::string> kMustMatch = {"config.attention",
                                             "config.k",
                                             "config.projection",
                                             "config.sharing",
                                             "config.layers",
                                             "config.projection-init",
                                             "config.projection-lr-scale",
                                             "config.d-model",
                                             "config.heads",
                                             "config.d-ff",
                                             "config.max-seq-len",
                                             "config.pooling",
                                             "config.batch",
                                             "config.seed",
                                             "data.examples",
                                             "data.fingerprint"};

void print_setup(const Options& o, const nn::EncoderConfig& config, const Splits& data,
                 const nn::SequenceClassifier& model, Device device, const nn::TrainingRun& run) {
  std::vector<std::int64_t> class_counts(ListOpsVocab::num_classes, 0);
  for (const ListOpsExample& e : data.train) ++class_counts[e.label];
  const std::int64_t majority = *std::max_element(class_counts.begin(), class_counts.end());
  std::printf(
      "data: %s%s: %zu training, %zu validation, %zu test expressions, up to %lld "
      "tokens\n",
      o.data_dir.c_str(), data.generated ? " (generated)" : "", data.train.size(),
      data.validation.size(), data.test.size(), static_cast<long long>(longest(data)));
  std::printf("majority class: %.1f%% of the training set (the accuracy of always guessing it)\n",
              100.0 * static_cast<double>(majority) / static_cast<double>(data.train.size()));
  std::printf("model: SequenceClassifier (%s pooling), %s, %lld parameters, on %s%s\n",
              o.pooling.c_str(), train::describe(config).c_str(),
              static_cast<long long>(model.num_parameters()), device.str().c_str(),
              o.run.precision == "bf16" ? ", mixed precision (bfloat16 products)" : "");
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
      train::plot_compared(o.run, "val_acc", "validation accuracy");
      return 0;
    }

    // --- With --distributed, this process's part in the job (mpirun -np N). ---
    train::DistributedRun dist(o.run);

    // --- Configuration, device, data: checked before any checkpoint or log is written. ---
    Preset p = preset(o.preset);
    if (o.train_examples > 0) p.train = o.train_examples;
    if (o.val_examples > 0) p.validation = o.val_examples;
    if (o.test_examples > 0) p.test = o.test_examples;
    // [CLS] + the longest expression the preset can generate.
    const nn::EncoderConfig config = train::encoder_config(o.model, p.options.max_len + 1);
    const Device device = train::setup_device(o.run);
    train::check_writable(o.run.checkpoint, "--checkpoint");
    train::check_writable(o.run.log, "--log");
    train::check_writable(o.run.plot, "--plot");
    // No output may be a data file (read, or generated now) or another output, nor replace a
    // checkpoint unasked.
    std::vector<nn::NamedPath> inputs;
    for (const char* split : {"basic_train.tsv", "basic_val.tsv", "basic_test.tsv"}) {
      inputs.push_back({"--data-dir", (fs::path(o.data_dir) / split).string()});
    }
    nn::TrainingRunOptions run_options =
        train::run_options(o.run, kProgram, device, {"val_loss", "val_acc"}, inputs);
    nn::check_run_paths(run_options);
    // Rank 0 generates and writes the data files when they are missing; the others read them.
    if (dist.rank() != 0) dist.barrier();
    const Splits data = load_or_generate(o.data_dir, p, o.data_seed);
    if (dist.rank() == 0) dist.barrier();
    if (longest(data) + 1 > config.max_seq_len) {
      throw UsageError("--data-dir " + o.data_dir + " holds an expression of " +
                       std::to_string(longest(data)) + " tokens, above the model's maximum " +
                       std::to_string(config.max_seq_len) +
                       " with [CLS] (--max-seq-len); raise --max-seq-len or use other data");
    }
    if (static_cast<std::int64_t>(data.train.size()) < o.run.batch) {
      throw UsageError("--data-dir " + o.data_dir + ": " + std::to_string(data.train.size()) +
                       " training examples are fewer than --batch " + std::to_string(o.run.batch) +
                       "; lower --batch");
    }

    // --- Model, optimizer, schedule, data order; the run resumes from --checkpoint. ---
    // The description travels in every checkpoint: nn::load_model rebuilds the model from it.
    const nn::ModelDescription description{
        .kind = nn::ModelKind::sequence_classifier,
        .encoder = config,
        .vocabulary = {.size = ListOpsVocab::vocab_size, .tokenizer = ListOpsVocab::name},
        .classes = ListOpsVocab::num_classes,
        .pooling = o.pooling == "cls" ? nn::Pooling::cls : nn::Pooling::mean};
    manual_seed(o.run.seed);
    auto model = nn::make_model<nn::SequenceClassifier>(description, train::init_config(o.model));
    model->to(device);
    dist.wrap(model);  // --distributed: rank 0's weights everywhere, gradients averaged
    nn::optim::AdamW optimizer(nn::optim::decay_groups(*model, o.run.weight_decay),
                               {.lr = o.run.lr, .weight_decay = o.run.weight_decay});
    const nn::optim::WarmupCosine schedule(o.run.lr, o.run.warmup, o.run.steps, o.run.lr / 10);
    nn::data::Loader loader(
        static_cast<std::int64_t>(data.train.size()),
        {.batch_size = o.run.batch,  // the global batch; each process takes its share
         .shuffle = true,
         .drop_last = true,
         .seed = o.run.seed,
         .rank = dist.rank(),
         .world_size = dist.world_size()});
    run_options.model = description;
    nn::TrainingRun run(run_options, *model, optimizer, &loader, run_metadata(o, config, data),
                        kMustMatch);
    print_setup(o, config, data, *model, device, run);

    // --- The training loop: batch -> forward -> loss -> backward -> clip -> step. ---
    const std::vector<Tensor> params = model->parameters();
    // --precision bf16: bfloat16 copies of the (resumed) float32 weights, refreshed every step.
    std::optional<nn::MixedPrecision> mixed;
    if (o.run.precision == "bf16") mixed.emplace(*model);
    train::StepProfile profile(o.run.profile);  // --profile N
    while (run.running()) {
      const nn::data::LoaderBatch order = loader.next();
      // Padded to the longest expression of the batch, with [CLS] first.
      const nn::data::ListOpsBatch batch = nn::data::listops_batch(data.train, order.indices);
      const Tensor tokens = batch.tokens.to(device);                  // [B, L]
      const Tensor key_padding_mask = batch.padding_mask.to(device);  // [B, L], true = padding
      const Tensor labels = batch.labels.to(device);                  // [B]

      run.start_step();
      profile.step_started(run);
      const double lr = schedule.lr_at(run.step());
      optimizer.set_lr(lr);
      Tensor loss;
      {
        // --precision bf16: the forward's products in bfloat16 (the backward's follow).
        const AutocastGuard autocast = mixed ? mixed->autocast() : AutocastGuard(DType::float32);
        const Tensor logits = model->forward(tokens, key_padding_mask);  // [B, 10]
        loss = cross_entropy(logits, labels);
      }
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
        const Score val = evaluate(*model, data.validation, 2 * o.run.batch, device, dist);
        char line[160];
        std::snprintf(line, sizeof line,
                      "step %lld: validation accuracy %.2f%%, loss %.4f (training loss %.4f)",
                      static_cast<long long>(run.step()), 100 * val.accuracy, val.loss,
                      run.smoothed_loss());
        run.report_evaluation({val.loss, val.accuracy}, line);
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
    const Score val = evaluate(*model, data.validation, 2 * o.run.batch, device, dist);
    const Score test = evaluate(*model, data.test, 2 * o.run.batch, device, dist);
    run.log_final({val.loss, val.accuracy});
    std::printf("final validation accuracy %.2f%% (loss %.4f)\n", 100 * val.accuracy, val.loss);
    std::printf("final test accuracy %.2f%% (loss %.4f)\n", 100 * test.accuracy, test.loss);
    if (run.steps_this_run() > 0) {
      std::printf(
          "throughput: %.0f tokens/s (padded positions) in forward + backward + optimizer "
          "step (%lld steps in %.1f s; %.1f s in all)\n",
          static_cast<double>(run.tokens_this_run()) / run.compute_seconds(),
          static_cast<long long>(run.steps_this_run()), run.compute_seconds(),
          run.elapsed_seconds());
    }
    if (!o.run.checkpoint.empty()) std::printf("checkpoint: %s\n", o.run.checkpoint.c_str());
    if (!o.run.plot.empty() && dist.rank() == 0) {
      nn::plot_logs(o.run.plot, {o.run.log}, "val_acc", "validation accuracy");
      std::printf("plot: %s\n", o.run.plot.c_str());
    }
    return 0;
  } catch (...) {
    return train::report_error(kProgram, std::current_exception());
  }
}
