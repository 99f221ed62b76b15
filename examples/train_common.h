// What the training programs (train_mlm, train_listops, train_causal_lm and evaluate_checkpoint)
// share: the model and training flags, the encoder configuration and the nn::TrainingRun options
// built from them, as CLI11 options. What a program of any argument parser needs (flag checks, the
// device, error reports) is in the library (nn/train/program.h). The training loops themselves stay
// in each program's main, in plain sight.
#pragma once

#include <tinyformer/tinyformer.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

using namespace tinyformer;

// Bad input from the command line or the files it names: the program prints the message on one
// line and exits with status 1 (nn::report_error).
using UsageError = nn::UsageError;

// The flags that define the encoder: a checkpoint is only loadable into the same ones.
struct ModelFlags {
  std::string attention = "linformer";  // full | linformer
  std::int64_t k = 32;
  std::string k_schedule;  // "", "linear:k0,step,kmin", "geometric:k0,ratio,kmin" or "128,96,64"
  std::string projection = "linear";
  std::string sharing = "headwise";
  std::string projection_init = "pooling";  // the linear kind's start: pooling | normal
  double projection_lr_scale = 0.1;         // the linear kind's fraction of the learning rate
  std::int64_t layers = 2;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
  std::int64_t d_ff = 512;
  double dropout = 0.1;
  std::int64_t max_seq_len = 0;  // 0: the sequence length the program trains on
  // Learned positions start at N(0, position_std^2) (nn::InitConfig); initialisation only, so
  // not needed to resume.
  double position_std = nn::InitConfig{}.position_std;
};

// The initialisation these flags ask for.
nn::InitConfig init_config(const ModelFlags& flags);

// train_mlm's model: the defaults above with its measured choices (mean pooling, d_model 64,
// d_ff 256, no dropout, positions started as nn::InitConfig::language_model() says).
ModelFlags mlm_model_flags();

// The optimisation and bookkeeping flags.
struct RunFlags {
  std::int64_t steps = 1000;
  std::int64_t batch = 32;
  double lr = 1e-3;
  std::int64_t warmup = 100;
  double weight_decay = 0.01;
  double clip = 1.0;
  std::string device = "cpu";
  std::uint64_t seed = 1;
  int threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS or every core)
  std::int64_t eval_every = 200;
  std::int64_t log_every = 10;
  std::int64_t checkpoint_every = 0;  // 0: at every evaluation
  std::int64_t stop_at = 0;           // 0: run to --steps
  std::string checkpoint;
  bool resume = false;
  bool overwrite = false;  // a fresh run may replace an existing --checkpoint
  std::string log;
  std::string plot;
  std::vector<std::string> compare;
  bool distributed = false;           // one process of an MPI job (mpirun -np N ... --distributed)
  double collective_timeout = -1;     // seconds; -1: TINYFORMER_COLLECTIVE_TIMEOUT, else 600
  std::string precision = "float32";  // float32 | bf16 (add_precision_flag)
  std::int64_t profile = 0;           // steps to profile, 0: none (add_profile_flag)
};

// The library's checks of numeric flags (nn::flags) for CLI::Option::check, with messages such
// as "--lr: expected a value above 0, got -1" (CLI11's own print the bounds of a double with
// every digit of DBL_MAX). Each also rejects NaN and the infinities, which no flag means.
CLI::Validator positive();                         // > 0
CLI::Validator non_negative();                     // >= 0
CLI::Validator in_range(double low, double high);  // [low, high]
// Whole-number flags (nn::flags::integer): decimal digits, a '-' only where `low` is negative, a
// value in [low, high]; nothing wraps or saturates ("--seed -1" and a 300-digit --steps are
// refused with a short message). CLI11 then reads the plain decimal the check read.
CLI::Validator integer(std::int64_t low, std::uint64_t high = INT64_MAX);

// The most steps a run may take: an optimizer counts at most this many (a resumed checkpoint's
// step is checked against it).
inline constexpr std::int64_t kMaxSteps = nn::optim::Optimizer::kMaxStepCount;

void add_model_flags(CLI::App& app, ModelFlags& flags);
void add_run_flags(CLI::App& app, RunFlags& flags);
// --precision float32 | bf16: bf16 trains in mixed precision (nn::MixedPrecision,
// docs/mixed_precision.md), for the programs whose loop implements it.
void add_precision_flag(CLI::App& app, RunFlags& flags);
// --profile N: the program times every op of N training steps under tinyformer::Profiler (by
// shape) and prints the table (StepProfile, below).
void add_profile_flag(CLI::App& app, RunFlags& flags);

// The steps that --profile leaves out first: by then the allocator's caches and the libraries'
// primitives are warm, so the table shows the steady state.
inline constexpr std::int64_t kProfileAfter = 10;

// --profile N in a training loop: every op of N steps after the run's first kProfileAfter, by
// shape, under tinyformer::Profiler, which is paused between the steps so that batch
// preparation and evaluations stay out of it; the table is printed above the progress bar.
class StepProfile {
 public:
  explicit StepProfile(std::int64_t steps) : steps_(steps) {}
  // After run.start_step().
  void step_started(const nn::TrainingRun& run);
  // After run.end_step(): prints the table after the last profiled step.
  void step_ended(nn::TrainingRun& run);
  // After the loop: prints what was profiled when the run ended before the last profiled step.
  void finish(nn::TrainingRun& run);

 private:
  void print(nn::TrainingRun& run);

  std::int64_t steps_, profiled_ = 0;
  std::optional<Profiler> profiler_;
};

// The encoder configuration for sequences of up to `seq_len` tokens; throws UsageError for
// values that do not fit together (heads not dividing d_model, k above the sequence length,
// an unknown projection kind, a malformed --k-schedule, --seq-len above --max-seq-len...).
nn::EncoderConfig encoder_config(const ModelFlags& flags, std::int64_t seq_len);
using nn::describe;
// Checks --steps, --batch, --lr...; throws UsageError.
void check_run_flags(const RunFlags& flags);

// Parses --device and checks that it is usable here; sets the thread count.
Device setup_device(const RunFlags& flags);

// With --distributed, this process's part in a data-parallel job started by
// `mpirun -np N <program> ... --distributed`: the constructor joins the job (MPI, with
// --collective-timeout as the collectives' timeout when given), checks that
// --batch (the global batch) splits evenly over the processes, gives each process an equal share
// of the cores unless --threads or OMP_NUM_THREADS says otherwise, and sends the standard output
// of every rank but 0 to /dev/null (rank 0 prints for the job; errors still reach stderr from
// any rank). The destructor ends the job cleanly when the program returns normally; an
// exception leaves that to report_error, which aborts the whole job. Without --distributed it
// does nothing and the program is a world of one. A build without MPI says so (UsageError).
class DistributedRun {
 public:
  explicit DistributedRun(const RunFlags& flags);
  ~DistributedRun();
  DistributedRun(const DistributedRun&) = delete;
  DistributedRun& operator=(const DistributedRun&) = delete;

  bool enabled() const { return enabled_; }
  int rank() const { return distributed::rank(); }
  int world_size() const { return distributed::world_size(); }
  // This process's share of the global batch.
  std::int64_t local_batch(std::int64_t global) const { return global / world_size(); }
  // Evaluation split over the processes: whether item `index` (a batch, an example) is this
  // process's, and a sum over every process's part (the same value on all of them).
  bool is_mine(std::int64_t index) const { return index % world_size() == rank(); }
  double sum(double value) const;
  // The factor that turns this process's mean loss over its `local_count` items (masked bytes)
  // into its part of the whole batch's mean: local_count * world_size / (the sum of the
  // counts). The processes' gradients, averaged, are then the single process's. 1 without
  // --distributed.
  double loss_weight(std::int64_t local_count) const;
  // Waits until every process got here (nothing without --distributed).
  void barrier() const;
  // Wraps the model for data-parallel training (gradients averaged during backward); nothing
  // without --distributed.
  void wrap(std::shared_ptr<nn::Module> model);

 private:
  bool enabled_ = false;
  std::unique_ptr<distributed::DistributedDataParallel> ddp_;
};

using nn::check_writable;

// Checkpoint metadata: what the run was configured with, as "config.<flag>" entries.
using Metadata = nn::Metadata;
void put(Metadata& metadata, const std::string& key, const std::string& value);
void put(Metadata& metadata, const std::string& key, double value);
void put(Metadata& metadata, const std::string& key, std::int64_t value);
Metadata model_metadata(const ModelFlags& flags);
// The TrainingRun options these flags ask for: its checkpoints (--overwrite included), log and
// evaluation interval, with `eval_columns` as the log's evaluation columns, the files the program
// reads as `inputs` and --plot among the outputs. nn::check_run_paths on them, before the data
// is read, refuses an output that is an input or another output, a special file, and an
// existing checkpoint a fresh run would replace.
nn::TrainingRunOptions run_options(const RunFlags& flags, const char* program, Device device,
                                   std::vector<std::string> eval_columns,
                                   std::vector<nn::NamedPath> inputs = {});

// --plot PNG --compare CSV...: draws the logs (nn::plot_logs) after checking that the image is
// none of them, and says what it wrote.
void plot_compared(const RunFlags& flags, const std::string& right_column,
                   const std::string& right_label);

// nn::report_error, with the flags to lower when memory runs out; in a data-parallel job
// it ends every process.
int report_error(const char* program, std::exception_ptr error);

}  // namespace train
