// train_mlm: masked-language-model pretraining (the Linformer paper's task, in miniature) on
// English text, byte by byte, with full or Linformer attention.
//
//   train_mlm                                   # the fortunes corpus, Linformer k=32, minutes
//   train_mlm --attention full --log full.csv   # the same with standard attention
//   train_mlm --data book.txt --seq-len 256 --projection linear --k 64 --sharing layerwise
//   train_mlm --checkpoint run.safetensors --resume      # continues exactly where it stopped
//   train_mlm --stop-at 1000 ...; train_mlm --resume ... # the same run in two sittings
//   train_mlm --plot curves.png --compare full.csv linformer.csv
//
// The default corpus is Debian's `fortunes` package (apt-get install fortunes): about 2.5 MB
// of English quotations, jokes and definitions under /usr/share/games/fortunes.
//
// The defaults (2 layers, d_model 64, n = 128, batch 16, 4000 steps, Linformer k = 32 with mean
// pooling) take about 1.5 minutes on 2 idle CPU cores (3.5 on a busy one) and end near
// validation perplexity 12.5, against 28 for the unigram baseline. They were measured: a learned
// linear projection (the paper's main kind,
// --projection linear) stays near the unigram baseline for thousands of steps on bytes, since
// its compressed rows must first learn to keep apart the neighbouring bytes that masked-byte
// prediction needs most, while pooling keeps that locality from the start; d_model 128 costs
// 3.5x the time per step for little gain within minutes.
#include <tinyformer/tinyformer.h>

#include <algorithm>
#include <chrono>
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

// The text split into a training and a validation part.
struct Corpus {
  nn::data::TextSplit split;
  std::int64_t files = 0;
  std::size_t bytes = 0;
};

// Whether a file holds text: no NUL byte in its first 4 KiB.
bool is_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4096];
  in.read(head, sizeof head);
  return std::find(head, head + in.gcount(), '\0') == head + in.gcount();
}

// Adds `text` to `part`, starting on a new line.
void append(std::string& part, const std::string& text) {
  if (!part.empty() && part.back() != '\n') part += '\n';
  part += text;
}

// A text file, or the plain-text files below a directory, with the last `val_fraction` of each
// file held out for validation: the validation text then mixes the files as the training text
// does (the tail of the whole fortunes corpus would be one file of capitalised Zippy quotes).
// fortune's directory also shows why a directory is filtered: next to each text file lie a
// binary index (.dat) and a link to the same text (.u8), which would add noise and read every
// text twice. So links, binary, hidden and empty files are left out, the rest read in sorted
// path order.
Corpus load_corpus(const std::string& path, double val_fraction) {
  if (path == kDefaultCorpus && !fs::exists(path)) {
    throw UsageError(std::string("the default corpus ") + kDefaultCorpus +
                     " is missing: install it with 'apt-get install fortunes', or pass --data "
                     "FILE with any text file or directory");
  }
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (auto it = fs::recursive_directory_iterator(path); it != fs::recursive_directory_iterator();
         ++it) {
      const std::string name = it->path().filename().string();
      if (name.starts_with('.')) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_symlink() || !it->is_regular_file() || it->file_size() == 0) continue;
      if (is_text_file(it->path())) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      throw UsageError("--data " + path +
                       ": the directory holds no non-empty text files; pass a text file or a "
                       "directory with some");
    }
  } else {
    files.push_back(path);  // load_text reports a missing or empty file
  }
  Corpus corpus;
  for (const fs::path& file : files) {
    const std::string text = nn::data::load_text(file);
    corpus.bytes += text.size();
    ++corpus.files;
    if (text.size() < 2) continue;
    const nn::data::TextSplit part = nn::data::split_text(text, val_fraction);
    append(corpus.split.train, part.train);
    append(corpus.split.validation, part.validation);
  }
  return corpus;
}

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

// 32-bit FNV-1a: a fingerprint of the training text, so a checkpoint is not resumed on
// another corpus.
std::string fingerprint(const std::string& text) {
  std::uint32_t hash = 2166136261u;
  for (unsigned char c : text) hash = (hash ^ c) * 16777619u;
  char out[16];
  std::snprintf(out, sizeof out, "%08x", hash);
  return out;
}

// A fixed validation set: the same sequences with the same masks at every evaluation.
struct ValidationSet {
  std::vector<nn::data::MlmBatch> batches;
  std::int64_t sequences = 0;
  std::int64_t targets = 0;  // masked positions, the denominator of the mean loss
};

ValidationSet make_validation(const nn::data::TokenChunks& chunks, std::int64_t max_sequences,
                              std::int64_t batch, const nn::data::MlmConfig& mlm,
                              std::uint64_t seed) {
  ValidationSet set;
  set.sequences = std::min(chunks.size(), max_sequences);
  // Evenly spread over the validation text rather than only its beginning.
  std::vector<std::int64_t> indices;
  for (std::int64_t i = 0; i < set.sequences; ++i)
    indices.push_back(i * chunks.size() / set.sequences);
  for (std::int64_t first = 0; first < set.sequences; first += batch) {
    const std::vector<std::int64_t> part(indices.begin() + first,
                                         indices.begin() + std::min(first + batch, set.sequences));
    nn::data::MlmBatch b = nn::data::mlm_batch(chunks, part, mlm, nn::data::mix_seed(seed, 7), 0);
    for (std::int64_t label : b.labels.to_vector<std::int64_t>()) set.targets += label != kIgnore;
    set.batches.push_back(std::move(b));
  }
  return set;
}

// The mean loss over the masked positions of the validation set (its exp is the perplexity).
double evaluate(nn::MaskedLM& model, const ValidationSet& set, Device device) {
  NoGradGuard no_grad;
  model.eval();  // no dropout
  double total = 0;
  for (const nn::data::MlmBatch& b : set.batches) {
    const Tensor logits = model.forward(b.tokens.to(device));  // [B, n, V]
    const Tensor loss = cross_entropy(logits.reshape({-1, ByteTokenizer::vocab_size}),
                                      b.labels.to(device).reshape({-1}), kIgnore, Reduction::sum);
    total += loss.item<double>();
  }
  model.train();
  return total / static_cast<double>(set.targets);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run(int argc, char** argv) {
  // The defaults, chosen by measurement, train for a few minutes on 2 CPU cores and reach less
  // than half the unigram perplexity (see the file comment).
  train::ModelFlags model_flags;
  model_flags.projection = "mean";
  model_flags.d_model = 64;
  model_flags.d_ff = 256;
  model_flags.dropout = 0.0;  // a few passes over the corpus at most: no overfitting to fight
  train::RunFlags run_flags;
  run_flags.steps = 4000;
  run_flags.batch = 16;
  run_flags.lr = 3e-3;
  run_flags.eval_every = 500;
  run_flags.checkpoint = "train_mlm.safetensors";
  std::string data = kDefaultCorpus;
  std::int64_t seq_len = 128;
  std::int64_t eval_sequences = 256;
  double val_fraction = 0.05;
  std::string positions = "learned";
  nn::data::MlmConfig mlm;  // BERT's recipe: 15% of the bytes picked, 80/10/10

  CLI::App app{"Masked-LM pretraining on text with full or Linformer attention", kProgram};
  app.add_option("--data", data, "A text file, or a directory of text files")
      ->capture_default_str();
  app.add_option("--seq-len", seq_len, "Tokens (bytes) per training sequence: n")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--eval-sequences", eval_sequences, "Validation sequences per evaluation")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--val-fraction", val_fraction, "Share of the text held out for validation")
      ->check(CLI::Range(0.001, 0.5))
      ->capture_default_str();
  app.add_option("--mask-prob", mlm.mask_prob, "Share of the bytes picked as masked-LM targets")
      ->check(CLI::Range(0.01, 0.9))
      ->capture_default_str();
  app.add_option("--positions", positions, "Position encoding: learned or sinusoidal")
      ->check(CLI::IsMember({"learned", "sinusoidal"}))
      ->capture_default_str();
  train::add_model_flags(app, model_flags);
  train::add_run_flags(app, run_flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + "; run with --help for the options");
  }
  if (run_flags.checkpoint == "none") run_flags.checkpoint.clear();
  train::check_run_flags(run_flags);

  // --plot with --compare only draws logs of earlier runs.
  if (!run_flags.compare.empty()) {
    train::plot_logs(run_flags.plot, run_flags.compare, "val_ppl", "validation perplexity");
    std::printf("wrote %s (%zu runs)\n", run_flags.plot.c_str(), run_flags.compare.size());
    return 0;
  }
  if (run_flags.warmup >= run_flags.steps) {
    std::printf("note: --warmup %lld is not below --steps %lld; warming up over %lld steps\n",
                static_cast<long long>(run_flags.warmup), static_cast<long long>(run_flags.steps),
                static_cast<long long>(run_flags.steps / 10));
    run_flags.warmup = run_flags.steps / 10;
  }

  // --- Configuration, device, data: everything is checked before anything is written. ---
  const nn::EncoderConfig config = train::encoder_config(model_flags, seq_len);
  const Device device = train::setup_device(run_flags);
  train::check_writable(run_flags.checkpoint, "--checkpoint");
  train::check_writable(run_flags.log, "--log");

  const Corpus corpus = load_corpus(data, val_fraction);
  if (corpus.bytes < 4 * static_cast<std::size_t>(seq_len)) {
    throw UsageError("--data " + data + " holds " + std::to_string(corpus.bytes) +
                     " bytes, too little for sequences of " + std::to_string(seq_len) +
                     " bytes; pass a longer text or a smaller --seq-len");
  }
  const nn::data::TextSplit& split = corpus.split;
  const nn::data::TokenChunks train_data(ByteTokenizer::encode(split.train), seq_len);
  const nn::data::TokenChunks val_data(ByteTokenizer::encode(split.validation), seq_len);
  if (train_data.size() < run_flags.batch || val_data.size() == 0) {
    throw UsageError("--data " + data + ": " + std::to_string(train_data.size()) +
                     " training and " + std::to_string(val_data.size()) +
                     " validation sequences of " + std::to_string(seq_len) +
                     " bytes are too few for --batch " + std::to_string(run_flags.batch) +
                     "; pass a longer text, or lower --seq-len or --batch");
  }
  const ValidationSet validation =
      make_validation(val_data, eval_sequences, run_flags.batch, mlm, run_flags.seed);
  const double baseline = unigram_cross_entropy(split.train, split.train);
  const double val_baseline = unigram_cross_entropy(split.train, split.validation);

  // --- Model, optimizer, schedule, data order. ---
  manual_seed(run_flags.seed);
  auto model = std::make_shared<nn::MaskedLM>(
      config, ByteTokenizer::vocab_size, /*tie_weights=*/true,
      positions == "learned" ? nn::PositionEncoding::learned : nn::PositionEncoding::sinusoidal);
  model->to(device);
  nn::optim::AdamW optimizer(nn::optim::decay_groups(*model, run_flags.weight_decay),
                             {.lr = run_flags.lr, .weight_decay = run_flags.weight_decay});
  const nn::optim::WarmupCosine schedule(run_flags.lr, run_flags.warmup, run_flags.steps,
                                         run_flags.lr / 10);
  nn::data::Loader loader(
      train_data.size(),
      {.batch_size = run_flags.batch, .shuffle = true, .drop_last = true, .seed = run_flags.seed});

  // What the checkpoint records; the keys in must_match decide whether it can be resumed.
  train::Metadata meta = train::model_metadata(model_flags);
  train::put(meta, "program", std::string(kProgram));
  train::put(meta, "config.positions", positions);
  train::put(meta, "config.mask-prob", mlm.mask_prob);
  train::put(meta, "config.seq-len", seq_len);
  train::put(meta, "config.max-seq-len", config.max_seq_len);
  train::put(meta, "config.batch", run_flags.batch);
  train::put(meta, "config.seed", static_cast<std::int64_t>(run_flags.seed));
  train::put(meta, "config.val-fraction", val_fraction);
  train::put(meta, "config.steps", run_flags.steps);
  train::put(meta, "config.lr", run_flags.lr);
  train::put(meta, "config.warmup", run_flags.warmup);
  train::put(meta, "config.weight-decay", run_flags.weight_decay);
  train::put(meta, "config.clip", run_flags.clip);
  train::put(meta, "data.bytes", static_cast<std::int64_t>(split.train.size()));
  train::put(meta, "data.fingerprint", fingerprint(split.train));
  const std::vector<std::string> must_match = {
      "config.attention", "config.k",         "config.projection",   "config.sharing",
      "config.layers",    "config.d-model",   "config.heads",        "config.d-ff",
      "config.positions", "config.mask-prob", "config.seq-len",      "config.max-seq-len",
      "config.batch",     "config.seed",      "config.val-fraction", "data.bytes",
      "data.fingerprint"};

  std::int64_t step = 0;  // optimizer steps taken
  if (run_flags.resume) {
    if (!fs::exists(run_flags.checkpoint)) {
      throw UsageError("--resume: no checkpoint at " + run_flags.checkpoint +
                       "; run without --resume to start training");
    }
    const nn::Metadata saved = nn::load_safetensors(run_flags.checkpoint).metadata;
    train::check_resume(saved, meta, must_match, run_flags.checkpoint, kProgram);
    nn::load_checkpoint(run_flags.checkpoint, *model, &optimizer);
    step = std::stoll(train::get(saved, "step", run_flags.checkpoint));
    loader.load_state(
        nn::data::LoaderState::parse(train::get(saved, "loader", run_flags.checkpoint)));
    train::restore_generator(train::get(saved, "generator", run_flags.checkpoint),
                             run_flags.checkpoint);
  }

  std::printf("corpus: %s (%lld file%s, %zu bytes): %zu for training, %zu for validation\n",
              data.c_str(), static_cast<long long>(corpus.files), corpus.files == 1 ? "" : "s",
              corpus.bytes, split.train.size(), split.validation.size());
  std::printf("model: MaskedLM, %s, %lld parameters, on %s\n", train::describe(config).c_str(),
              static_cast<long long>(model->num_parameters()), device.str().c_str());
  std::printf(
      "data: %lld sequences of %lld bytes, batch %lld (%lld steps per epoch); "
      "validation: %lld sequences, %lld masked bytes\n",
      static_cast<long long>(train_data.size()), static_cast<long long>(seq_len),
      static_cast<long long>(run_flags.batch), static_cast<long long>(loader.batches_per_epoch()),
      static_cast<long long>(validation.sequences), static_cast<long long>(validation.targets));
  std::printf(
      "unigram baseline (a model that ignores context): %.4f nats per byte = perplexity "
      "%.2f on the training text, %.4f = perplexity %.2f on the validation text\n",
      baseline, std::exp(baseline), val_baseline, std::exp(val_baseline));
  if (run_flags.resume) {
    std::printf("resumed from %s at step %lld\n", run_flags.checkpoint.c_str(),
                static_cast<long long>(step));
  }

  std::optional<nn::CsvLogger> log;
  const std::vector<std::string> columns = {
      "step", "epoch", "loss", "lr", "grad_norm", "val_loss", "val_ppl", "tokens_per_s", "seconds"};
  if (!run_flags.log.empty()) {
    log = run_flags.resume
              ? nn::CsvLogger::resume(run_flags.log, columns, static_cast<double>(step))
              : nn::CsvLogger(run_flags.log, columns);
  }

  auto save = [&](std::int64_t at_step) {
    train::Metadata m = meta;
    train::put(m, "step", at_step);
    train::put(m, "loader", loader.state().to_string());
    train::put(m, "generator", train::generator_state());
    nn::save_checkpoint(run_flags.checkpoint, *model, &optimizer, m);
  };

  // --- The training loop. ---
  const std::int64_t last_step = run_flags.stop_at > 0 ? run_flags.stop_at : run_flags.steps;
  const std::int64_t checkpoint_every =
      run_flags.checkpoint_every > 0 ? run_flags.checkpoint_every : run_flags.eval_every;
  const std::int64_t tokens_per_step = run_flags.batch * seq_len;
  const std::vector<Tensor> params = model->parameters();
  const auto start = std::chrono::steady_clock::now();
  nn::ProgressBar progress(run_flags.steps, std::min(step, run_flags.steps));
  double compute_seconds = 0;  // forward + backward + optimizer step only
  double window_loss = 0, smoothed_loss = NAN, first_loss = NAN, grad_norm = 0;
  std::int64_t window_steps = 0, steps_this_run = 0, epoch = 0;

  while (step < last_step) {
    const nn::data::LoaderBatch order = loader.next();
    epoch = order.epoch;
    // Masks are drawn from (seed, epoch, example): a resumed run redraws them exactly.
    const nn::data::MlmBatch batch =
        nn::data::mlm_batch(train_data, order.indices, mlm, run_flags.seed, order.epoch);
    const Tensor tokens = batch.tokens.to(device);  // [B, n]
    const Tensor labels = batch.labels.to(device);  // [B, n], kIgnore where not masked

    const auto t0 = std::chrono::steady_clock::now();
    const double lr = schedule.lr_at(step);
    optimizer.set_lr(lr);
    const Tensor logits = model->forward(tokens);  // [B, n, V]
    const Tensor loss = cross_entropy(logits.reshape({-1, ByteTokenizer::vocab_size}),
                                      labels.reshape({-1}), kIgnore);
    optimizer.zero_grad();
    loss.backward();
    grad_norm = run_flags.clip > 0 ? nn::optim::clip_grad_norm(params, run_flags.clip) : NAN;
    const double loss_value = loss.item<double>();
    if (!std::isfinite(loss_value) || (run_flags.clip > 0 && !std::isfinite(grad_norm))) {
      progress.finish();
      throw UsageError("the loss became " + std::to_string(loss_value) + " at step " +
                       std::to_string(step + 1) + "; lower --lr or keep --clip on");
    }
    optimizer.step();
    backend(device).synchronize();
    compute_seconds += seconds_since(t0);
    ++step;
    ++steps_this_run;

    if (std::isnan(first_loss)) first_loss = loss_value;
    smoothed_loss =
        std::isnan(smoothed_loss) ? loss_value : 0.95 * smoothed_loss + 0.05 * loss_value;
    window_loss += loss_value;
    ++window_steps;
    progress.update(step, smoothed_loss, lr, tokens_per_step);

    const bool evaluate_now =
        run_flags.eval_every > 0 && step % run_flags.eval_every == 0 && step < run_flags.steps;
    double val_loss = NAN;
    if (evaluate_now) {
      progress.pause();
      val_loss = evaluate(*model, validation, device);
      char line[160];
      std::snprintf(line, sizeof line,
                    "step %lld: validation loss %.4f, perplexity %.3f (training loss %.4f)",
                    static_cast<long long>(step), val_loss, std::exp(val_loss), smoothed_loss);
      progress.print(line);
      progress.resume();
    }
    // The last step's row comes after the final evaluation, below.
    if (log && (step % run_flags.log_every == 0 || evaluate_now) && step < run_flags.steps) {
      log->row({static_cast<double>(step), static_cast<double>(epoch),
                window_loss / static_cast<double>(window_steps), lr, grad_norm, val_loss,
                std::exp(val_loss), progress.tokens_per_second(), seconds_since(start)});
      window_loss = 0;
      window_steps = 0;
    }
    if (!run_flags.checkpoint.empty() && checkpoint_every > 0 && step % checkpoint_every == 0 &&
        step < last_step) {
      progress.pause();
      save(step);
      progress.resume();
    }
  }
  progress.finish();

  if (!run_flags.checkpoint.empty() && steps_this_run > 0) save(step);
  if (step < run_flags.steps) {
    std::printf("stopped after step %lld (--stop-at); saved %s, continue with --resume\n",
                static_cast<long long>(step), run_flags.checkpoint.c_str());
    return 0;
  }

  const double val_loss = evaluate(*model, validation, device);
  if (log && steps_this_run > 0) {
    log->row({static_cast<double>(step), static_cast<double>(epoch),
              window_steps > 0 ? window_loss / static_cast<double>(window_steps) : NAN,
              schedule.lr_at(step - 1), grad_norm, val_loss, std::exp(val_loss),
              progress.tokens_per_second(), seconds_since(start)});
  }
  if (steps_this_run > 0) {
    std::printf(
        "training loss: %.4f at the first step, %.4f at the end (smoothed); unigram "
        "baseline %.4f\n",
        first_loss, smoothed_loss, baseline);
  }
  std::printf(
      "final validation perplexity %.3f (loss %.4f nats per masked byte; unigram "
      "baseline perplexity %.2f)\n",
      std::exp(val_loss), val_loss, std::exp(val_baseline));
  if (steps_this_run > 0) {
    std::printf(
        "throughput: %.0f tokens/s in forward + backward + optimizer step (%lld steps "
        "of %lldx%lld tokens in %.1f s; %.1f s in all)\n",
        static_cast<double>(steps_this_run * tokens_per_step) / compute_seconds,
        static_cast<long long>(steps_this_run), static_cast<long long>(run_flags.batch),
        static_cast<long long>(seq_len), compute_seconds, seconds_since(start));
  }
  if (!run_flags.checkpoint.empty()) std::printf("checkpoint: %s\n", run_flags.checkpoint.c_str());
  if (!run_flags.plot.empty()) {
    train::plot_logs(run_flags.plot, {run_flags.log}, "val_ppl", "validation perplexity");
    std::printf("plot: %s\n", run_flags.plot.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
  } catch (const tinyformer::Error& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected error: %s\n", kProgram, e.what());
  }
  return 1;
}
