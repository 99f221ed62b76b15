// A resumable training run: what every training script repeats around its loop (resume from a
// checkpoint, the step counter, the progress bar, the CSV log, periodic atomic checkpoints),
// so that the script's main shows the loop itself (examples/train_mlm.cpp is the full script):
//
//   nn::TrainingRun run({.program = "train_mlm", .steps = 4000, .checkpoint = "run.safetensors",
//                        .resume = resume, .checkpoint_every = 500, .eval_every = 500,
//                        .log = "run.csv", .eval_columns = {"val_loss"}},
//                       *model, optimizer, &loader, config_metadata);
//   while (run.running()) {
//     const nn::data::LoaderBatch order = loader.next();          // batch
//     ... tokens, labels ...
//     run.start_step();
//     const double lr = schedule.lr_at(run.step());               // schedule
//     optimizer.set_lr(lr);
//     const Tensor loss = cross_entropy(model->forward(tokens), labels);  // forward, loss
//     optimizer.zero_grad();
//     loss.backward();                                             // backward
//     const double norm = nn::optim::clip_grad_norm(params, 1.0);  // clip
//     optimizer.step();                                            // step
//     run.end_step({.loss = loss.item<double>(), .lr = lr, .grad_norm = norm,
//                   .tokens = tokens.numel(), .epoch = order.epoch});
//     if (run.evaluation_due()) {
//       run.pause();
//       const double val_loss = evaluate(...);
//       run.report_evaluation({val_loss}, "validation loss ...");
//     }
//     run.log_and_checkpoint();  // the CSV row and the periodic checkpoint, when due
//   }
//   run.finish();  // the last checkpoint
//   if (run.interrupted()) return run.exit_status();  // Ctrl-C: saved, exit with 130
//
// A checkpoint holds the model, the optimizer and, as metadata, the model's description (when
// TrainingRunOptions::model is given: nn::load_model then opens the checkpoint alone), the run's
// configuration, the step, the loader's position and the dropout generator's position: a resumed
// run continues exactly where the saved one stopped, drawing the same batches, masks and dropout.
// All of it is checked on resume: the step is a plain decimal integer in [0, steps], every
// optimizer step count agrees with it (one optimizer step per run step), the generator state is two
// decimal integers, the tensors match their checksums.
//
// Interruptions: while a run exists, SIGINT and SIGTERM only set a flag. The step in progress
// finishes, running() turns false, finish() saves the checkpoint (atomically, as always) and
// says how to resume, and the script returns exit_status(): 130 for SIGINT, 143 for SIGTERM,
// as a shell reports a process killed by them. A second signal ends the process at once. A
// signal that was ignored when the run began (SIG_IGN, as a non-interactive shell sets for a
// background job) stays ignored.
//
// Data-parallel runs (distributed::init() before the run; every process builds its own
// TrainingRun): the constructor first checks that every process was started alike
// (distributed::check_agreement: the configuration, the model's description, the data's identity
// in `config`, steps, stop_at, eval_every, resume, the device type and the seed), and after a
// resume, at the same step; otherwise it throws the same Error on every process, naming the first
// difference. Rank 0 alone writes the log and the checkpoints, all ranks read the checkpoint
// to resume; the step's loss is averaged and its tokens summed over the processes, so the
// progress bar, the log and the divergence check describe the whole job; and running() asks
// every process, so that a signal received by one stops them all after the same step.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "nn/io/output_paths.h"
#include "nn/io/safetensors.h"
#include "nn/models.h"
#include "nn/module.h"
#include "nn/train/progress.h"

namespace tinyformer::nn {

namespace optim {
class Optimizer;
}
namespace data {
class Loader;
}

// The options mirror a training script's command-line flags; messages name those flags
// (--checkpoint, --resume), and a metadata key "config.<name>" stands for the flag --<name>.
struct TrainingRunOptions {
  std::string program{};     // recorded in checkpoints: another program's checkpoint is refused
  std::int64_t steps = 0;    // the run's length: the progress bar counts to it
  std::int64_t stop_at = 0;  // stop after this step as an interruption would (0: at steps)
  std::string checkpoint{};  // the checkpoint file; empty: no checkpoints
  bool resume = false;       // continue from `checkpoint`, which must exist
  // Replace an existing `checkpoint` with a fresh run's. Without it (and without resume) an
  // existing checkpoint is an Error: a run is not thrown away by repeating a command.
  bool overwrite = false;
  std::int64_t checkpoint_every = 0;  // save every this many steps (0: only when the run ends)
  std::int64_t eval_every = 0;        // evaluation_due() every this many steps (0: never)
  std::string log{};                  // the CSV log; empty: none
  std::int64_t log_every = 10;        // a log row every this many steps, and at evaluations
  // The log's columns for report_evaluation's values, e.g. {"val_loss", "val_ppl"}. The log
  // reads: step, epoch, loss (mean since the last row), lr, grad_norm, these, tokens_per_s,
  // seconds.
  std::vector<std::string> eval_columns{};
  Device device = Device::cpu();  // synchronized before a step's time is read
  ProgressOptions progress{};
  bool handle_interrupts = true;  // SIGINT and SIGTERM end the run with a checkpoint (above)
  // What the model is: saved in every checkpoint (nn/io/model_file.h), so that nn::load_model
  // rebuilds it in another program; on resume, a checkpoint of another model is refused with
  // the fields that differ. The model must be of the described kind.
  std::optional<ModelDescription> model{};
  // The files the program reads (its data) and the files it writes besides the checkpoint and
  // the log (a plot): no output may be an input or another output (check_run_paths).
  std::vector<NamedPath> inputs{};
  std::vector<NamedPath> outputs{};
};

// The checks of the run's paths that TrainingRun's constructor makes before any work, for a
// program that wants them earlier (before it reads or generates its data): an Error when
//   - resume is set without a checkpoint, or with none at the path;
//   - the checkpoint, the log or one of `outputs` is something other than a regular file or a
//     missing path (a directory, a FIFO, a device: check_file_path), or its directory is not
//     writable;
//   - a fresh run (no resume) would replace an existing checkpoint without `overwrite`;
//   - an output (checkpoint, log, `outputs`) is one of `inputs`, lies inside an input directory,
//     or is the same file as another output (check_outputs_distinct; a resumed run reads and
//     rewrites its own checkpoint, which is not an input here).
// Messages name the flags (--checkpoint, --log, --resume, --overwrite).
void check_run_paths(const TrainingRunOptions& options);

// What one optimizer step measured.
struct StepStats {
  double loss = 0;
  double lr = 0;
  std::optional<double> grad_norm{};  // before clipping; none when the gradients were not clipped
  std::int64_t tokens = 0;            // tokens (positions) in the batch
  std::int64_t epoch = 0;             // the epoch the batch came from
};

class TrainingRun {
 public:
  // With options.resume, loads the checkpoint into `model`, `optimizer` and `loader` (which may
  // be null when the script keeps no data position) after checking that it was written by the
  // same program with the same values of the keys in `must_match` (a mismatch throws an Error
  // naming the flag and both values; other "config." keys that differ are printed as notes).
  // Nothing is written before these checks pass. The paths are checked first (check_run_paths):
  // an output that is an input or a special file, a read-only directory, or an existing
  // checkpoint that a fresh run would replace without `overwrite` is an Error before any work.
  // Then opens the log (a resumed run keeps the
  // rows up to its step), installs the interrupt handlers and starts the clock. `config` is
  // saved in every checkpoint.
  TrainingRun(TrainingRunOptions options, Module& model, optim::Optimizer& optimizer,
              data::Loader* loader, Metadata config, std::vector<std::string> must_match = {});
  // Restores the signal handlers that were there before.
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Whether another step is to be taken: the step is below stop_at (or steps) and no SIGINT or
  // SIGTERM has arrived.
  bool running();
  // The signal that interrupted the run (SIGINT or SIGTERM), 0 when none did.
  int interrupted() const;
  // The status the program exits with after an interruption: 128 + the signal number.
  int exit_status() const { return interrupted() != 0 ? 128 + interrupted() : 0; }
  // Steps taken so far, counting those before a resume: the index of the step being taken.
  std::int64_t step() const { return step_; }
  bool resumed() const { return resumed_; }

  // Around the forward, backward and optimizer step: their time is the throughput's.
  void start_step();
  // Counts the step and shows it on the progress bar; throws an Error when the loss or the
  // gradient norm is not finite (the run has diverged).
  void end_step(const StepStats& stats);

  // Whether the step just taken is one to evaluate: every eval_every steps, except the last
  // (the script evaluates after the loop).
  bool evaluation_due() const;
  // Stops the clock (evaluations and checkpoints count neither towards the throughput nor
  // towards the time left); report_evaluation restarts it.
  void pause();
  // Prints `line` above the progress bar, keeps `values` (one per eval column) for this
  // step's log row, and restarts the clock.
  void report_evaluation(const std::vector<double>& values, const std::string& line);
  // Prints `text` (one line or several) above the progress bar.
  void print(const std::string& text);
  // Writes this step's log row and saves a checkpoint when one is due.
  void log_and_checkpoint();

  // Ends the progress bar and saves the checkpoint, when this run took a step. After an
  // interruption it also prints (on stderr) where the checkpoint is and how to continue.
  void finish();
  // Whether the run stopped before `steps` (stop_at, or an interruption): the script then ends
  // without a final evaluation, and --resume continues.
  bool stopped_early() const { return step_ < options_.steps; }
  // The last log row, after the script's final evaluation (none when this run took no step).
  void log_final(const std::vector<double>& values);

  // Saves the checkpoint now (atomically): the model, the optimizer, the configuration and
  // the step, loader and generator positions.
  void save();

  std::int64_t steps_this_run() const { return steps_this_run_; }
  std::int64_t tokens_this_run() const { return tokens_this_run_; }
  double first_loss() const { return first_loss_; }        // of this run's first step
  double smoothed_loss() const { return smoothed_loss_; }  // exponential moving average
  double compute_seconds() const { return compute_seconds_; }
  double elapsed_seconds() const;  // since the clock started, pauses included

 private:
  void resume_from_checkpoint(const Metadata& current, const std::vector<std::string>& must_match);
  void install_interrupt_handlers();
  void write_row(double loss, double lr, double grad_norm, const std::vector<double>& values);

  TrainingRunOptions options_;
  Module& model_;
  optim::Optimizer& optimizer_;
  data::Loader* loader_;
  Metadata config_;
  std::int64_t last_step_;
  std::int64_t step_ = 0;
  bool resumed_ = false;
  std::optional<CsvLogger> log_;
  std::optional<ProgressBar> progress_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point step_start_;

  std::int64_t steps_this_run_ = 0;
  std::int64_t tokens_this_run_ = 0;
  double compute_seconds_ = 0;
  double first_loss_;
  double smoothed_loss_;
  double last_lr_ = 0;
  double last_grad_norm_;
  std::int64_t epoch_ = 0;
  double window_loss_ = 0;  // summed since the last log row
  std::int64_t window_steps_ = 0;
  std::vector<double> eval_values_;  // this step's, NaN when it was not evaluated
  bool evaluated_ = false;
  bool primary_;           // rank 0 of a data-parallel job, or the only process: writes files
  int agreed_signal_ = 0;  // a signal any process of the job received (running() asks them all)
  struct SavedHandlers;    // the SIGINT and SIGTERM actions before this run
  std::unique_ptr<SavedHandlers> saved_handlers_;
};

// The default generator's position as text ("<seed> <offset>"), and back: a resumed run draws
// the same dropout masks. restore_generator accepts exactly two decimal integers separated by
// one space, the offset at most kMaxGeneratorOffset; anything else is an Error and changes
// nothing.
std::string generator_state();
void restore_generator(const std::string& state);
inline constexpr std::uint64_t kMaxGeneratorOffset = std::uint64_t{1} << 62;

// The run metadata a checkpoint carries, parsed strictly: a decimal integer in [lo, hi], with no
// sign other than a leading '-', no spaces, no exponent (std::from_chars, all of `text`).
// Returns false for anything else.
bool parse_integer(const std::string& text, std::int64_t lo, std::int64_t hi, std::int64_t& value);

}  // namespace tinyformer::nn
