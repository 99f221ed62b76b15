// What the training programs (train_mlm, train_listops) share: the model and training flags,
// the encoder configuration and the nn::TrainingRun options built from them. The training loops
// themselves stay in each program's main, in plain sight. inspect_attention uses the model flags
// to rebuild train_mlm's model.
#pragma once

#include <tinyformer/tinyformer.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

using namespace tinyformer;

// Bad input from the command line or the files it names: the program prints the message on one
// line and exits with status 1. Messages say what was wrong and what to do.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
};

// train_mlm's model: the defaults above with its measured choices (mean pooling, d_model 64,
// d_ff 256, no dropout). inspect_attention starts from the same, so both rebuild the same model
// from the same flags.
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
  std::string log;
  std::string plot;
  std::vector<std::string> compare;
};

// Checks of numeric flags for CLI::Option::check, with messages such as "--lr: expected a
// value above 0, got -1" (CLI11's own print the bounds of a double with every digit of
// DBL_MAX). Each also rejects NaN and the infinities, which no flag means.
CLI::Validator positive();                         // > 0
CLI::Validator non_negative();                     // >= 0
CLI::Validator in_range(double low, double high);  // [low, high]

void add_model_flags(CLI::App& app, ModelFlags& flags);
void add_run_flags(CLI::App& app, RunFlags& flags);

// The encoder configuration for sequences of up to `seq_len` tokens; throws UsageError for
// values that do not fit together (heads not dividing d_model, k above the sequence length,
// an unknown projection kind, a malformed --k-schedule, --seq-len above --max-seq-len...).
nn::EncoderConfig encoder_config(const ModelFlags& flags, std::int64_t seq_len);
// "2 layers, d_model 128, 4 heads, d_ff 512, Linformer k=32 (linear, headwise sharing)".
std::string describe(const nn::EncoderConfig& config);
// Checks --steps, --batch, --lr...; throws UsageError.
void check_run_flags(const RunFlags& flags);

// Parses --device and checks that it is usable here; sets the thread count.
Device setup_device(const RunFlags& flags);

// Creates the directory of `file` when needed; a UsageError naming `flag` when it cannot be
// written. Called before training, so a bad path fails at once rather than at the first save.
void check_writable(const std::string& file, const char* flag);

// Checkpoint metadata: what the run was configured with, as "config.<flag>" entries.
using Metadata = nn::Metadata;
void put(Metadata& metadata, const std::string& key, const std::string& value);
void put(Metadata& metadata, const std::string& key, double value);
void put(Metadata& metadata, const std::string& key, std::int64_t value);
Metadata model_metadata(const ModelFlags& flags);
// The TrainingRun options these flags ask for: its checkpoints, log and evaluation interval,
// with `eval_columns` as the log's evaluation columns.
nn::TrainingRunOptions run_options(const RunFlags& flags, const char* program, Device device,
                                   std::vector<std::string> eval_columns);

// Prints "<program>: <message>" on one line of stderr for the exception that ends the program
// (any exception: main catches with `catch (...)` and passes std::current_exception()), and
// returns its exit status, 1. Bad input says what was wrong; running out of memory (sizes too
// large for it included) and file system failures say what to do about them; anything else is
// reported as a bug.
int report_error(const char* program, std::exception_ptr error);

}  // namespace train
