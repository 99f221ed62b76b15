// Flags, configuration and run options shared by the training programs.
#include "train_common.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <new>
#include <sstream>
#include <stdexcept>

namespace train {

namespace {

// A library check as a CLI11 validator; --help shows its description after the type.
CLI::Validator validator(nn::flags::NumberCheck check) {
  const std::string description = check.description;
  return CLI::Validator([check](std::string& text) { return check(text); }, description);
}

}  // namespace

CLI::Validator positive() {
  return validator(nn::flags::positive());
}
CLI::Validator non_negative() {
  return validator(nn::flags::non_negative());
}
CLI::Validator in_range(double low, double high) {
  return validator(nn::flags::in_range(low, high));
}
CLI::Validator integer(std::int64_t low, std::uint64_t high) {
  const nn::flags::IntegerCheck check = nn::flags::integer(low, high);
  // The text CLI11 converts afterwards is the plain decimal the check read: CLI11 alone would
  // read "010" as octal.
  return CLI::Validator(
      [check](std::string& text) {
        std::string canonical;
        std::string bad = check(text, &canonical);
        if (bad.empty()) text = canonical;
        return bad;
      },
      check.description);
}

void add_model_flags(CLI::App& app, ModelFlags& f) {
  app.add_option("--attention", f.attention,
                 "Attention: full (softmax over all n keys) or "
                 "linformer (keys and values projected to k rows)")
      ->check(CLI::IsMember({"full", "linformer"}))
      ->capture_default_str();
  app.add_option("--k", f.k, "Linformer: projected length k, the same in every layer")
      ->check(integer(1))
      ->capture_default_str();
  app.add_option("--k-schedule", f.k_schedule,
                 "Linformer: k per layer instead of --k: linear:k0,step,kmin (k_l = max(kmin, "
                 "k0 - l*step)), geometric:k0,ratio,kmin or an explicit list such as 128,96,64");
  // mean_pool and max_pool are taken as mean and max, the names a run records.
  app.add_option("--projection", f.projection,
                 "Linformer: projection kind (a registered name; mean_pool and max_pool are "
                 "mean and max)")
      ->transform(CLI::Transformer(std::map<std::string, std::string>{
          {"mean_pool", nn::canonical_projection_name("mean_pool")},
          {"max_pool", nn::canonical_projection_name("max_pool")}}))
      ->check(CLI::IsMember(nn::projection_names()))
      ->capture_default_str();
  app.add_option("--sharing", f.sharing,
                 "Linformer: which projection matrices are shared between heads and layers")
      ->check(CLI::IsMember({"none", "headwise", "key-value", "layerwise"}))
      ->capture_default_str();
  app.add_option("--projection-init", f.projection_init,
                 "Linformer, linear kind: E starts as mean pooling or random N(0, 1/k)")
      ->check(CLI::IsMember({"pooling", "normal"}))
      ->capture_default_str();
  app.add_option("--projection-lr-scale", f.projection_lr_scale,
                 "Linformer, linear kind: E's learning rate as a fraction of --lr")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--layers", f.layers, "Encoder layers")->check(integer(1))->capture_default_str();
  app.add_option("--d-model", f.d_model, "Model width")->check(integer(1))->capture_default_str();
  app.add_option("--heads", f.heads, "Attention heads (must divide --d-model)")
      ->check(integer(1))
      ->capture_default_str();
  app.add_option("--d-ff", f.d_ff, "Feed-forward width")->check(integer(1))->capture_default_str();
  app.add_option("--dropout", f.dropout, "Dropout on residual branches")
      ->check(in_range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--position-std", f.position_std,
                 "Learned positions start at N(0, std^2) (initialisation only)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--max-seq-len", f.max_seq_len,
                 "The model's longest sequence (position table, Linformer E); 0: --seq-len")
      ->check(integer(0))
      ->capture_default_str();
}

void add_run_flags(CLI::App& app, RunFlags& f) {
  app.add_option("--steps", f.steps, "Optimizer steps")
      ->check(integer(1, kMaxSteps))
      ->capture_default_str();
  app.add_option("--batch", f.batch, "Sequences per batch")
      ->check(integer(1))
      ->capture_default_str();
  app.add_option("--lr", f.lr,
                 "Peak learning rate (AdamW; linear warm-up, then cosine decay to "
                 "a tenth of it)")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "Warm-up steps")->check(integer(0))->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "AdamW weight decay (matrices only)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--clip", f.clip, "Clip the gradients' global norm to this (0: no clipping)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--device", f.device, "cpu or cuda (cuda:1 for a second GPU)")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of initialisation, data order, masks and dropout")
      ->check(integer(0, UINT64_MAX))
      ->capture_default_str();
  app.add_option("--threads", f.threads, "CPU threads (0: OMP_NUM_THREADS or every core)")
      ->check(integer(0, INT_MAX))
      ->capture_default_str();
  app.add_option("--eval-every", f.eval_every, "Evaluate every this many steps (0: at the end)")
      ->check(integer(0))
      ->capture_default_str();
  app.add_option("--log-every", f.log_every,
                 "Write a CSV row (mean training loss since the last row) every this many steps")
      ->check(integer(1))
      ->capture_default_str();
  app.add_option("--checkpoint-every", f.checkpoint_every,
                 "Save a checkpoint every this many steps (0: at every evaluation)")
      ->check(integer(0))
      ->capture_default_str();
  app.add_option("--stop-at", f.stop_at,
                 "Save a checkpoint and stop after this step, as an interruption would; "
                 "--resume continues")
      ->check(integer(0, kMaxSteps));
  app.add_option("--checkpoint", f.checkpoint,
                 "Checkpoint file (model, optimizer, data position; written atomically); none "
                 "for no checkpoints. An existing one is continued with --resume or replaced "
                 "with --overwrite, never silently")
      ->capture_default_str();
  app.add_flag("--resume", f.resume, "Continue from --checkpoint, exactly where it stopped");
  app.add_flag("--overwrite", f.overwrite,
               "Start a fresh run even though --checkpoint exists, replacing it (without "
               "--resume or --overwrite, an existing checkpoint is an error)");
  app.add_option("--log", f.log, "CSV log of the training run");
  app.add_option("--plot", f.plot,
                 "PNG of loss curves: of --compare's logs (without training), else of this "
                 "run's --log after training");
  app.add_option("--compare", f.compare, "CSV logs to plot together with --plot");
  app.add_flag("--distributed", f.distributed,
               "One process of a data-parallel job: mpirun -np N <program> ... --distributed "
               "(--batch is the global batch, split over the N processes)");
  app.add_option("--collective-timeout", f.collective_timeout,
                 "--distributed: end the job when a process waits this many seconds for the "
                 "others in a collective (0: never; default: TINYFORMER_COLLECTIVE_TIMEOUT, "
                 "else 600)")
      ->check(non_negative());
}

void add_precision_flag(CLI::App& app, RunFlags& f) {
  app.add_option("--precision", f.precision,
                 "float32, or bf16: mixed precision (products in bfloat16 on float32 master "
                 "weights, which the optimizer updates and checkpoints hold)")
      ->check(CLI::IsMember({"float32", "bf16"}))
      ->capture_default_str();
}

void add_profile_flag(CLI::App& app, RunFlags& f) {
  app.add_option("--profile", f.profile,
                 "Time every op of this many training steps (after the first " +
                     std::to_string(kProfileAfter) +
                     " of the run) and print them by shape, with the time between ops; "
                     "evaluations and batch preparation are left out")
      ->check(integer(0))
      ->capture_default_str();
}

void StepProfile::step_started(const nn::TrainingRun& run) {
  if (profiler_) {
    profiler_->resume();
  } else if (steps_ > profiled_ && run.steps_this_run() == kProfileAfter) {
    profiler_.emplace(/*by_shape=*/true);
  }
}

void StepProfile::step_ended(nn::TrainingRun& run) {
  if (!profiler_) return;
  profiler_->pause();
  if (++profiled_ == steps_) print(run);
}

void StepProfile::finish(nn::TrainingRun& run) {
  if (profiler_) print(run);
}

void StepProfile::print(nn::TrainingRun& run) {
  run.print("profile of " + std::to_string(profiled_) + " training steps (steps " +
            std::to_string(run.step() - profiled_ + 1) + "-" + std::to_string(run.step()) +
            "), each op's time by shape:\n" + profiler_->table(30));
  profiler_ = std::nullopt;
}

void check_run_flags(const RunFlags& f) {
  auto need = [](bool ok, const std::string& message) {
    if (!ok) throw UsageError(message);
  };
  need(f.steps > 0, "--steps must be at least 1, got " + std::to_string(f.steps));
  need(f.batch > 0, "--batch must be at least 1, got " + std::to_string(f.batch));
  need(f.profile >= 0, "--profile must be 0 or more steps, got " + std::to_string(f.profile));
  // The parser's checks say the same; these hold for RunFlags filled in by code too.
  need(std::isfinite(f.lr) && f.lr > 0, "--lr must be a finite number above 0");
  need(f.warmup >= 0, "--warmup must be 0 or more");
  need(std::isfinite(f.weight_decay) && f.weight_decay >= 0,
       "--weight-decay must be a finite number, 0 or more");
  need(std::isfinite(f.clip) && f.clip >= 0,
       "--clip must be a finite number, 0 (no clipping) or more");
  need(f.stop_at <= f.steps, "--stop-at (" + std::to_string(f.stop_at) + ") is beyond --steps (" +
                                 std::to_string(f.steps) + ")");
  need(!f.resume || !f.checkpoint.empty(), "--resume needs --checkpoint PATH to resume from");
  need(!f.resume || !f.overwrite,
       "--resume and --overwrite exclude each other: continue the checkpoint's run, or replace it");
  need(f.plot.empty() || !f.compare.empty() || !f.log.empty(),
       "--plot needs the logs to draw: --log CSV (this run) or --compare CSV...");
  need(f.compare.empty() || !f.plot.empty(), "--compare needs --plot PNG (the image to write)");
}

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

// An entry of --k-schedule: a whole number of 0 or more (nn::flags::integer; the schedule's own
// checks then say what each entry must be), or a UsageError naming the flag.
std::int64_t parse_int(const std::string& text) {
  std::string canonical;
  const std::string bad = nn::flags::integer(0)(text, &canonical);
  if (!bad.empty()) throw UsageError("--k-schedule: " + bad);
  return std::stoll(canonical);
}

double parse_double(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw UsageError("--k-schedule: expected a number, got " + nn::flags::quoted(text));
  }
  return value;
}

// --k-schedule: one k per layer.
std::vector<std::int64_t> k_schedule(const std::string& text, std::int64_t layers) {
  const std::string shown = nn::flags::quoted(text);
  const std::string usage =
      "--k-schedule " + shown +
      ": expected linear:k0,step,kmin, geometric:k0,ratio,kmin or one k per layer such as "
      "128,96,64";
  const auto colon = text.find(':');
  try {
    if (colon != std::string::npos) {
      const std::string rule = text.substr(0, colon);
      const auto args = split(text.substr(colon + 1), ',');
      if (args.size() != 3) throw UsageError(usage);
      if (rule == "linear") {
        return nn::k_linear_decay(layers, parse_int(args[0]), parse_int(args[1]),
                                  parse_int(args[2]));
      }
      if (rule == "geometric") {
        return nn::k_geometric_decay(layers, parse_int(args[0]), parse_double(args[1]),
                                     parse_int(args[2]));
      }
      throw UsageError(usage);
    }
  } catch (const tinyformer::Error& e) {
    throw UsageError("--k-schedule " + shown + ": " + e.what());
  }
  std::vector<std::int64_t> ks;
  for (const std::string& part : split(text, ',')) ks.push_back(parse_int(part));
  if (static_cast<std::int64_t>(ks.size()) != layers) {
    throw UsageError("--k-schedule " + shown + " lists " + std::to_string(ks.size()) +
                     " values for " + std::to_string(layers) +
                     " layers; give one k per layer (--layers)");
  }
  return ks;
}

nn::Sharing sharing(const std::string& name) {
  if (name == "none") return nn::Sharing::none;
  if (name == "headwise") return nn::Sharing::headwise;
  if (name == "key-value") return nn::Sharing::key_value;
  if (name == "layerwise") return nn::Sharing::layerwise;
  throw UsageError("--sharing: unknown mode '" + name +
                   "'; use none, headwise, key-value or layerwise");
}

}  // namespace

nn::EncoderConfig encoder_config(const ModelFlags& f, std::int64_t seq_len) {
  const std::int64_t max_seq_len = f.max_seq_len > 0 ? f.max_seq_len : seq_len;
  if (seq_len > max_seq_len) {
    throw UsageError("the sequence length " + std::to_string(seq_len) +
                     " is above the model's maximum " + std::to_string(max_seq_len) +
                     " (--max-seq-len); lower the sequence length or raise --max-seq-len");
  }
  nn::EncoderConfig config{.layers = f.layers,
                           .d_model = f.d_model,
                           .heads = f.heads,
                           .d_ff = f.d_ff,
                           .max_seq_len = max_seq_len,
                           .dropout = f.dropout};
  if (f.attention == "linformer") {
    config.attention = nn::AttentionKind::linformer;
    config.linformer.k = f.k;
    if (!f.k_schedule.empty()) config.linformer.k_per_layer = k_schedule(f.k_schedule, f.layers);
    config.linformer.projection_name = f.projection;
    config.linformer.sharing = sharing(f.sharing);
    config.linformer.projection_init =
        f.projection_init == "normal" ? nn::ProjectionInit::normal : nn::ProjectionInit::pooling;
    config.linformer.projection_lr_scale = f.projection_lr_scale;
  } else if (f.attention != "full") {
    throw UsageError("--attention: unknown kind '" + f.attention + "'; use full or linformer");
  }
  try {
    nn::validate(config);
  } catch (const tinyformer::Error& e) {
    throw UsageError(std::string("invalid model configuration: ") + e.what());
  }
  return config;
}

Device setup_device(const RunFlags& f) {
  const Device device = nn::usable_device(f.device);
  // One OpenMP pool serves our loops, OpenBLAS (its OpenMP build) and oneDNN.
  if (f.threads > 0) omp_set_num_threads(f.threads);
  return device;
}

DistributedRun::DistributedRun(const RunFlags& f) {
  if (!f.distributed) return;
  if (!distributed::available()) {
    throw UsageError(
        "--distributed: this build has no MPI, so it cannot train across processes (install "
        "Open MPI: apt-get install libopenmpi-dev openmpi-bin, then configure and build again)");
  }
  if (f.collective_timeout >= 0) distributed::set_collective_timeout(f.collective_timeout);
  distributed::init();
  enabled_ = true;
  const int n = distributed::world_size();
  if (f.batch % n != 0) {
    throw UsageError("--batch " + std::to_string(f.batch) + " does not split evenly over " +
                     std::to_string(n) + " processes; use a multiple of " + std::to_string(n));
  }
  // Processes on one machine share its cores, unless told otherwise.
  if (f.threads == 0 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    omp_set_num_threads(std::max(1, omp_get_num_procs() / distributed::local_world_size()));
  }
  if (distributed::rank() == 0) {
    std::printf("distributed: %d processes, batch %lld = %d x %lld\n", n,
                static_cast<long long>(f.batch), n, static_cast<long long>(f.batch / n));
  } else if (std::freopen("/dev/null", "w", stdout) == nullptr) {
    throw UsageError("--distributed: cannot silence the standard output of rank " +
                     std::to_string(distributed::rank()));
  }
}

DistributedRun::~DistributedRun() {
  ddp_.reset();
  // On an exception report_error aborts the job instead: the other processes may be waiting
  // for this one in a collective, where a clean shutdown would wait for them in turn.
  if (enabled_ && std::uncaught_exceptions() == 0) distributed::shutdown();
}

double DistributedRun::sum(double value) const {
  if (!enabled_) return value;
  const Tensor t = scalar_tensor(value, {.dtype = DType::float64});
  distributed::all_reduce(t);
  return t.item<double>();
}

double DistributedRun::loss_weight(std::int64_t local_count) const {
  if (!enabled_) return 1.0;
  const double total = sum(static_cast<double>(local_count));
  return total > 0 ? static_cast<double>(local_count) * world_size() / total : 1.0;
}

void DistributedRun::barrier() const {
  if (enabled_) distributed::barrier();
}

void DistributedRun::wrap(std::shared_ptr<nn::Module> model) {
  if (enabled_) ddp_ = std::make_unique<distributed::DistributedDataParallel>(std::move(model));
}

void put(Metadata& m, const std::string& key, const std::string& value) {
  m[key] = value;
}
void put(Metadata& m, const std::string& key, double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  m[key] = text;
}
void put(Metadata& m, const std::string& key, std::int64_t value) {
  m[key] = std::to_string(value);
}

ModelFlags mlm_model_flags() {
  ModelFlags f;
  f.projection = "mean";
  f.d_model = 64;
  f.d_ff = 256;
  f.dropout = 0.0;  // a few passes over the corpus at most: no overfitting to fight
  f.position_std = nn::InitConfig::language_model().position_std;
  return f;
}

nn::InitConfig init_config(const ModelFlags& f) {
  return {.position_std = f.position_std};
}

Metadata model_metadata(const ModelFlags& f) {
  Metadata m;
  put(m, "config.attention", f.attention);
  if (f.attention == "linformer") {
    put(m, "config.k", f.k_schedule.empty() ? std::to_string(f.k) : f.k_schedule);
    put(m, "config.projection", f.projection);
    put(m, "config.sharing", f.sharing);
    if (f.projection == "linear") {
      put(m, "config.projection-init", f.projection_init);
      put(m, "config.projection-lr-scale", f.projection_lr_scale);
    }
  }
  put(m, "config.layers", f.layers);
  put(m, "config.d-model", f.d_model);
  put(m, "config.heads", f.heads);
  put(m, "config.d-ff", f.d_ff);
  put(m, "config.dropout", f.dropout);
  put(m, "config.position-std", f.position_std);
  return m;
}

nn::TrainingRunOptions run_options(const RunFlags& f, const char* program, Device device,
                                   std::vector<std::string> eval_columns,
                                   std::vector<nn::NamedPath> inputs) {
  return {.program = program,
          .steps = f.steps,
          .stop_at = f.stop_at,
          .checkpoint = f.checkpoint,
          .resume = f.resume,
          .overwrite = f.overwrite,
          .checkpoint_every = f.checkpoint_every > 0 ? f.checkpoint_every : f.eval_every,
          .eval_every = f.eval_every,
          .log = f.log,
          .log_every = f.log_every,
          .eval_columns = std::move(eval_columns),
          .device = device,
          .progress = {},
          .model = std::nullopt,
          .inputs = std::move(inputs),
          .outputs = {{"--plot", f.plot}}};
}

void plot_compared(const RunFlags& f, const std::string& right_column,
                   const std::string& right_label) {
  std::vector<nn::NamedPath> logs;
  for (const std::string& log : f.compare) logs.push_back({"--compare", log});
  nn::check_outputs_distinct(logs, {{"--plot", f.plot}});
  nn::plot_logs(f.plot, f.compare, right_column, right_label);
  std::printf("wrote %s (%zu runs)\n", f.plot.c_str(), f.compare.size());
}

int report_error(const char* program, std::exception_ptr error) {
  return nn::report_error(program, error,
                          "; lower --batch, the sequence length, the model's size (--d-model, "
                          "--d-ff, --layers) or the amount of data");
}

}  // namespace train
