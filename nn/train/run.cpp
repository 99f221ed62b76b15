// TrainingRun: resume, step counting, progress, CSV log and checkpoints around a training loop.
#include "nn/train/run.h"

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "core/backend.h"
#include "core/error.h"
#include "core/random.h"
#include "nn/data/loader.h"
#include "nn/distributed/agreement.h"
#include "nn/distributed/distributed.h"
#include "nn/io/checkpoint.h"
#include "nn/io/model_file.h"
#include "nn/optim.h"

namespace tinyformer::nn {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The value of `key`, or an Error naming the checkpoint when it is missing.
std::string get(const Metadata& metadata, const std::string& key, const std::string& path) {
  const auto it = metadata.find(key);
  TF_CHECK(it != metadata.end(), "checkpoint '", path, "' has no '", key,
           "' entry: it was not written by this program; pass another --checkpoint");
  return it->second;
}

// "config.lr" -> "--lr".
std::string flag_of(const std::string& key) {
  return "--" + key.substr(key.find('.') + 1);
}

// The signal that arrived while a run handled them; 0 when none did. A handler may only touch
// a volatile sig_atomic_t (and call async-signal-safe functions).
volatile std::sig_atomic_t g_interrupt = 0;

extern "C" void on_interrupt(int signal_number) {
  if (g_interrupt != 0) {
    // A second signal: the user does not want to wait for the step and the save. The default
    // action (termination) happens once this handler returns and the signal is unblocked.
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
    return;
  }
  g_interrupt = signal_number;
}

bool parse_unsigned(const char* begin, const char* end, std::uint64_t& value) {
  if (begin == end || *begin < '0' || *begin > '9') return false;  // no sign, no space
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  return ec == std::errc() && ptr == end;
}

// "<seed> <offset>", strictly.
bool parse_generator_state(const std::string& state, std::uint64_t& seed, std::uint64_t& offset) {
  const std::size_t space = state.find(' ');
  if (space == std::string::npos) return false;
  const char* begin = state.data();
  return parse_unsigned(begin, begin + space, seed) &&
         parse_unsigned(begin + space + 1, begin + state.size(), offset) &&
         offset <= kMaxGeneratorOffset;
}

// What every process of a data-parallel job must share: the configuration ("config.lr" as
// "--lr"), the model's description, the data's identity, the run's length and evaluations, the
// device type and the default generator (the seed of dropout's masks).
distributed::Settings shared_settings(const TrainingRunOptions& options, const Metadata& config) {
  distributed::Settings settings;
  for (const auto& [key, value] : config) {
    settings[key.starts_with("config.") ? flag_of(key) : key] = value;
  }
  settings["--steps"] = std::to_string(options.steps);
  settings["--stop-at"] = std::to_string(options.stop_at);
  settings["--eval-every"] = std::to_string(options.eval_every);
  settings["--resume"] = options.resume ? "on" : "off";
  settings["--device"] = options.device.is_cuda() ? "cuda" : "cpu";
  settings["generator"] = generator_state();
  return settings;
}

const char* signal_name(int signal_number) {
  return signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace

bool parse_integer(const std::string& text, std::int64_t lo, std::int64_t hi, std::int64_t& value) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  const char* digits = begin != end && *begin == '-' ? begin + 1 : begin;
  if (digits == end || *digits < '0' || *digits > '9') return false;  // no "+5", " 5", "-"
  std::int64_t parsed = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, parsed);
  if (ec != std::errc() || ptr != end || parsed < lo || parsed > hi) return false;
  value = parsed;
  return true;
}

std::string generator_state() {
  return std::to_string(default_generator().seed()) + " " +
         std::to_string(default_generator().offset());
}

void restore_generator(const std::string& state) {
  std::uint64_t seed = 0, offset = 0;
  TF_CHECK(parse_generator_state(state, seed, offset), "restore_generator: unreadable state '",
           state, "' (expected \"<seed> <offset>\": two decimal integers, the offset at most ",
           kMaxGeneratorOffset, ")");
  default_generator().manual_seed(seed);
  default_generator().set_offset(offset);
}

void check_run_paths(const TrainingRunOptions& options) {
  const std::string& checkpoint = options.checkpoint;
  TF_CHECK(!options.resume || !checkpoint.empty(),
           "--resume needs --checkpoint PATH to resume from");
  if (!checkpoint.empty()) {
    check_file_path(checkpoint, /*for_saving=*/true, "--checkpoint " + checkpoint);
    const bool exists = std::filesystem::exists(std::filesystem::symlink_status(checkpoint));
    TF_CHECK(exists || !options.resume, "--resume: no checkpoint at ", checkpoint,
             "; run without --resume to start training");
    TF_CHECK(!exists || options.resume || options.overwrite, "--checkpoint ", checkpoint,
             ": a checkpoint is there already; pass --resume to continue its run, --overwrite to "
             "start over and replace it, or another --checkpoint");
  }
  if (!options.log.empty())
    check_file_path(options.log, /*for_saving=*/true, "--log " + options.log);
  std::vector<NamedPath> outputs = {{"--checkpoint", checkpoint}, {"--log", options.log}};
  for (const NamedPath& output : options.outputs) {
    if (!output.path.empty()) {
      check_file_path(output.path, /*for_saving=*/true, output.flag + " " + output.path);
    }
    outputs.push_back(output);
  }
  check_outputs_distinct(options.inputs, outputs);
}

struct TrainingRun::SavedHandlers {
  struct sigaction interrupt {};
  struct sigaction terminate {};
  bool interrupt_installed = false;
  bool terminate_installed = false;
};

TrainingRun::TrainingRun(TrainingRunOptions options, Module& model, optim::Optimizer& optimizer,
                         data::Loader* loader, Metadata config, std::vector<std::string> must_match)
    : options_(std::move(options)),
      model_(model),
      optimizer_(optimizer),
      loader_(loader),
      config_(std::move(config)),
      last_step_(options_.stop_at > 0 ? options_.stop_at : options_.steps),
      first_loss_(NAN),
      smoothed_loss_(NAN),
      last_grad_norm_(NAN),
      eval_values_(options_.eval_columns.size(), NAN),
      primary_(distributed::rank() == 0) {
  TF_CHECK(options_.steps > 0, "TrainingRun: steps must be at least 1, got ", options_.steps);
  TF_CHECK(options_.stop_at >= 0 && options_.stop_at <= options_.steps, "TrainingRun: stop_at (",
           options_.stop_at, ") must lie in [0, steps] (steps ", options_.steps, ")");
  TF_CHECK(options_.checkpoint_every >= 0 && options_.eval_every >= 0 && options_.log_every > 0,
           "TrainingRun: checkpoint_every and eval_every must be 0 or more, log_every positive");
  // Before any work: the checkpoint is saved only after training, too late to find out that
  // the path is a directory or a FIFO, that its directory is read-only, or that it is the data.
  check_run_paths(options_);
  config_["program"] = options_.program;
  if (options_.model) {
    TF_CHECK(model_.type_name() == model_kind_name(options_.model->kind),
             "TrainingRun: the model is a ", model_.type_name(),
             " but TrainingRunOptions::model describes a ", model_kind_name(options_.model->kind));
    config_[kModelMetadataKey] = model_description_json(*options_.model);
  }
  // A data-parallel job stops here, on every process, unless all were started alike.
  distributed::check_agreement(shared_settings(options_, config_));
  if (options_.resume) {
    resume_from_checkpoint(config_, must_match);
    distributed::check_agreement({{"the step of --checkpoint", std::to_string(step_)}});
  }

  if (!options_.log.empty() && primary_) {
    std::vector<std::string> columns = {"step", "epoch", "loss", "lr", "grad_norm"};
    columns.insert(columns.end(), options_.eval_columns.begin(), options_.eval_columns.end());
    columns.insert(columns.end(), {"tokens_per_s", "seconds"});
    log_ = resumed_ ? CsvLogger::resume(options_.log, columns, static_cast<double>(step_))
                    : CsvLogger(options_.log, columns);
  }
  progress_.emplace(options_.steps, std::min(step_, options_.steps), options_.progress);
  if (options_.handle_interrupts) install_interrupt_handlers();
  start_ = std::chrono::steady_clock::now();
}

TrainingRun::~TrainingRun() {
  if (!saved_handlers_) return;
  if (saved_handlers_->interrupt_installed) {
    ::sigaction(SIGINT, &saved_handlers_->interrupt, nullptr);
  }
  if (saved_handlers_->terminate_installed) {
    ::sigaction(SIGTERM, &saved_handlers_->terminate, nullptr);
  }
}

void TrainingRun::install_interrupt_handlers() {
  saved_handlers_ = std::make_unique<SavedHandlers>();
  g_interrupt = 0;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write in progress continues
  auto install = [&](int signal_number, struct sigaction& saved) {
    struct sigaction current {};
    if (::sigaction(signal_number, nullptr, &current) != 0 || current.sa_handler == SIG_IGN) {
      return false;
    }
    return ::sigaction(signal_number, &action, &saved) == 0;
  };
  saved_handlers_->interrupt_installed = install(SIGINT, saved_handlers_->interrupt);
  saved_handlers_->terminate_installed = install(SIGTERM, saved_handlers_->terminate);
}

bool TrainingRun::running() {
  if (distributed::world_size() > 1) {
    // Every process takes the same steps: a signal that reached one stops all after this step.
    agreed_signal_ = static_cast<int>(distributed::all_reduce_max(interrupted()));
  }
  return step_ < last_step_ && interrupted() == 0;
}

int TrainingRun::interrupted() const {
  const int own = saved_handlers_ ? static_cast<int>(g_interrupt) : 0;
  return own != 0 ? own : agreed_signal_;
}

// Everything is checked before the model, the optimizer or the loader changes.
void TrainingRun::resume_from_checkpoint(const Metadata& current,
                                         const std::vector<std::string>& must_match) {
  const std::string& path = options_.checkpoint;
  // One read: the metadata checked here and the tensors loaded below come from the same bytes.
  const SafetensorsFile file = load_safetensors(path);
  const Metadata& saved = file.metadata;
  const std::string saved_program = get(saved, "program", path);
  TF_CHECK(saved_program == options_.program, "checkpoint '", path, "' was written by ",
           saved_program, ", not ", options_.program, "; pass another --checkpoint");
  for (const std::string& key : must_match) {
    const auto now = current.find(key);
    if (now == current.end()) continue;
    const auto then = saved.find(key);
    TF_CHECK(then != saved.end(), "checkpoint '", path, "' has no ", flag_of(key),
             " setting; it is from another configuration: pass another --checkpoint or drop "
             "--resume");
    TF_CHECK(then->second == now->second, "checkpoint '", path,
             "' is from another configuration: ", flag_of(key), " ", then->second, " there, ",
             now->second, " now; pass the same flags to resume, or another --checkpoint");
  }
  if (options_.model && saved.count(kModelMetadataKey) != 0) {
    const ModelDescription then = read_model_description(saved, "checkpoint '" + path + "'");
    const std::vector<std::string> differences = model_differences(then, *options_.model);
    if (!differences.empty()) {
      std::string listed;
      for (const std::string& d : differences) listed += (listed.empty() ? "" : "; ") + d;
      fail("checkpoint '", path, "' holds a model of another configuration (", listed,
           "); pass the same model flags to resume, or another --checkpoint");
    }
  }
  const std::string step_text = get(saved, "step", path);
  std::int64_t step = 0;
  TF_CHECK(parse_integer(step_text, 0, optim::Optimizer::kMaxStepCount, step), "checkpoint '", path,
           "': unreadable step '", step_text, "' (expected a decimal integer in [0, ",
           optim::Optimizer::kMaxStepCount, "]); the file is corrupted");
  TF_CHECK(step <= options_.steps, "checkpoint '", path, "' is at step ", step, ", beyond --steps ",
           options_.steps, "; pass --steps above ", step,
           " to train further, or another --checkpoint");

  // One optimizer step per run step: every parameter's count is at most the run's step, and the
  // most-updated parameter's equals it.
  if (optimizer_.counts_steps()) {
    std::int64_t most = 0;
    for (const auto& [name, t] : file.tensors) {
      if (!name.starts_with("optim.state.") || !name.ends_with(".step")) continue;
      if (t.numel() != 1 || t.dtype() != DType::int64) continue;  // load_checkpoint reports it
      const std::int64_t count = t.item<std::int64_t>();
      TF_CHECK(count <= step, "checkpoint '", path, "': \"", name, "\" is ", count,
               " but the run is at step ", step, "; the file is inconsistent");
      most = std::max(most, count);
    }
    TF_CHECK(most == step, "checkpoint '", path, "': the run is at step ", step,
             " but its optimizer state has taken ", most, " steps; the file is inconsistent");
  }

  const std::string generator = get(saved, "generator", path);
  std::uint64_t seed = 0, offset = 0;
  TF_CHECK(parse_generator_state(generator, seed, offset), "checkpoint '", path,
           "': unreadable generator state '", generator,
           "' (expected \"<seed> <offset>\": two decimal integers, the offset at most ",
           kMaxGeneratorOffset, "); the file is corrupted");
  std::optional<data::LoaderState> loader_state;
  if (loader_ != nullptr) {
    try {
      loader_state = data::LoaderState::parse(get(saved, "loader", path));
    } catch (const Error& e) {
      fail("checkpoint '", path, "': ", e.what());
    }
  }

  for (const auto& [key, value] : current) {
    if (key.rfind("config.", 0) != 0) continue;
    const auto then = saved.find(key);
    if (then != saved.end() && then->second != value) {
      std::printf("note: %s was %s in the checkpoint, now %s\n", flag_of(key).c_str(),
                  then->second.c_str(), value.c_str());
    }
  }
  load_checkpoint(file, path, model_, &optimizer_);
  if (loader_state) loader_->load_state(*loader_state);
  restore_generator(generator);
  step_ = step;
  resumed_ = true;
}

void TrainingRun::start_step() {
  step_start_ = std::chrono::steady_clock::now();
}

void TrainingRun::end_step(const StepStats& step_stats) {
  backend(options_.device).synchronize();
  compute_seconds_ += seconds_since(step_start_);
  StepStats stats = step_stats;
  if (distributed::world_size() > 1) {
    // The job's step: the mean of the processes' losses (their shares are equal), all tokens.
    const Tensor sums = from<double>({stats.loss, static_cast<double>(stats.tokens)}, {2});
    distributed::all_reduce(sums);
    const std::vector<double> v = sums.to_vector<double>();
    stats.loss = v[0] / distributed::world_size();
    stats.tokens = static_cast<std::int64_t>(v[1]);
  }
  const double grad_norm = stats.grad_norm.value_or(NAN);
  if (!std::isfinite(stats.loss) || (stats.grad_norm && !std::isfinite(grad_norm))) {
    progress_->finish();
    fail("the loss became ", stats.loss, " at step ", step_ + 1, " (gradient norm ", grad_norm,
         "): the run diverged; lower --lr or keep --clip on");
  }
  ++step_;
  ++steps_this_run_;
  tokens_this_run_ += stats.tokens;
  last_lr_ = stats.lr;
  last_grad_norm_ = grad_norm;
  epoch_ = stats.epoch;
  if (std::isnan(first_loss_)) first_loss_ = stats.loss;
  smoothed_loss_ =
      std::isnan(smoothed_loss_) ? stats.loss : 0.95 * smoothed_loss_ + 0.05 * stats.loss;
  window_loss_ += stats.loss;
  ++window_steps_;
  progress_->update(step_, smoothed_loss_, stats.lr, stats.tokens);
}

bool TrainingRun::evaluation_due() const {
  return options_.eval_every > 0 && step_ % options_.eval_every == 0 && step_ < options_.steps;
}

void TrainingRun::pause() {
  progress_->pause();
}

void TrainingRun::report_evaluation(const std::vector<double>& values, const std::string& line) {
  TF_CHECK(values.size() == options_.eval_columns.size(),
           "TrainingRun::report_evaluation: ", options_.eval_columns.size(), " eval columns, got ",
           values.size(), " values");
  progress_->print(line);
  eval_values_ = values;
  evaluated_ = true;
  progress_->resume();
}

void TrainingRun::print(const std::string& text) {
  progress_->print(!text.empty() && text.back() == '\n' ? text.substr(0, text.size() - 1) : text);
}

void TrainingRun::write_row(double loss, double lr, double grad_norm,
                            const std::vector<double>& values) {
  std::vector<double> row = {static_cast<double>(step_), static_cast<double>(epoch_), loss, lr,
                             grad_norm};
  row.insert(row.end(), values.begin(), values.end());
  row.insert(row.end(), {progress_->tokens_per_second(), elapsed_seconds()});
  log_->row(row);
}

void TrainingRun::log_and_checkpoint() {
  // The last step's row comes after the script's final evaluation (log_final).
  if (log_ && (step_ % options_.log_every == 0 || evaluated_) && step_ < options_.steps) {
    write_row(window_loss_ / static_cast<double>(window_steps_), last_lr_, last_grad_norm_,
              eval_values_);
    window_loss_ = 0;
    window_steps_ = 0;
  }
  eval_values_.assign(options_.eval_columns.size(), NAN);
  evaluated_ = false;
  // The last one is saved by finish().
  if (!options_.checkpoint.empty() && options_.checkpoint_every > 0 &&
      step_ % options_.checkpoint_every == 0 && step_ < last_step_ && interrupted() == 0) {
    progress_->pause();
    save();
    progress_->resume();
  }
}

void TrainingRun::finish() {
  progress_->finish();
  if (!options_.checkpoint.empty() && steps_this_run_ > 0) save();
  if (const int signal_number = interrupted(); signal_number != 0 && primary_) {
    if (options_.checkpoint.empty()) {
      std::fprintf(
          stderr, "%s: interrupted by %s after step %lld; no checkpoint (none was asked for)\n",
          options_.program.c_str(), signal_name(signal_number), static_cast<long long>(step_));
    } else {
      std::fprintf(stderr,
                   "%s: interrupted by %s after step %lld; the checkpoint %s holds it: run the "
                   "same command with --resume to continue\n",
                   options_.program.c_str(), signal_name(signal_number),
                   static_cast<long long>(step_), options_.checkpoint.c_str());
    }
  }
}

void TrainingRun::log_final(const std::vector<double>& values) {
  TF_CHECK(values.size() == options_.eval_columns.size(),
           "TrainingRun::log_final: ", options_.eval_columns.size(), " eval columns, got ",
           values.size(), " values");
  if (!log_ || steps_this_run_ == 0) return;
  write_row(window_steps_ > 0 ? window_loss_ / static_cast<double>(window_steps_) : NAN, last_lr_,
            last_grad_norm_, values);
}

void TrainingRun::save() {
  TF_CHECK(!options_.checkpoint.empty(), "TrainingRun::save: no checkpoint path was given");
  if (!primary_) return;  // the processes hold the same model: rank 0 writes it
  Metadata metadata = config_;
  metadata["step"] = std::to_string(step_);
  if (loader_ != nullptr) metadata["loader"] = loader_->state().to_string();
  metadata["generator"] = generator_state();
  save_checkpoint(options_.checkpoint, model_, &optimizer_, metadata);
}

double TrainingRun::elapsed_seconds() const {
  return seconds_since(start_);
}

}  // namespace tinyformer::nn
