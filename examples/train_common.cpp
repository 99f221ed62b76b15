// Flags, configuration, run options and plots shared by the training programs.
#include "train_common.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <new>
#include <sstream>
#include <stdexcept>

namespace train {

namespace fs = std::filesystem;

namespace {

// %g: 0.99, 1e-06, 128 (never the 309 digits of DBL_MAX).
std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// A validator that reads the flag's text as a number and asks `accept` about it; `expected`
// completes "expected ..." in the message, `description` is what --help shows after the type.
CLI::Validator numeric(std::function<bool(double)> accept, const std::string& expected,
                       const std::string& description) {
  return CLI::Validator(
      [accept, expected](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "expected a number, got '" + text + "'";
        if (!std::isfinite(value)) return "expected a finite number, got " + text;
        if (!accept(value)) return "expected " + expected + ", got " + text;
        return {};
      },
      description);
}

}  // namespace

CLI::Validator positive() {
  return numeric([](double v) { return v > 0; }, "a value above 0", "POSITIVE");
}
CLI::Validator non_negative() {
  return numeric([](double v) { return v >= 0; }, "a value of 0 or more", "NONNEGATIVE");
}
CLI::Validator in_range(double low, double high) {
  const std::string lo = number_text(low), hi = number_text(high);
  return numeric([low, high](double v) { return v >= low && v <= high; },
                 "a value from " + lo + " to " + hi, "IN [" + lo + ", " + hi + "]");
}

void add_model_flags(CLI::App& app, ModelFlags& f) {
  app.add_option("--attention", f.attention,
                 "Attention: full (softmax over all n keys) or "
                 "linformer (keys and values projected to k rows)")
      ->check(CLI::IsMember({"full", "linformer"}))
      ->capture_default_str();
  app.add_option("--k", f.k, "Linformer: projected length k, the same in every layer")
      ->check(positive())
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
  app.add_option("--layers", f.layers, "Encoder layers")->check(positive())->capture_default_str();
  app.add_option("--d-model", f.d_model, "Model width")->check(positive())->capture_default_str();
  app.add_option("--heads", f.heads, "Attention heads (must divide --d-model)")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--d-ff", f.d_ff, "Feed-forward width")->check(positive())->capture_default_str();
  app.add_option("--dropout", f.dropout, "Dropout on residual branches")
      ->check(in_range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--max-seq-len", f.max_seq_len,
                 "The model's longest sequence (position table, Linformer E); 0: --seq-len")
      ->check(non_negative())
      ->capture_default_str();
}

void add_run_flags(CLI::App& app, RunFlags& f) {
  app.add_option("--steps", f.steps, "Optimizer steps")->capture_default_str();
  app.add_option("--batch", f.batch, "Sequences per batch")->capture_default_str();
  app.add_option("--lr", f.lr,
                 "Peak learning rate (AdamW; linear warm-up, then cosine decay to "
                 "a tenth of it)")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "Warm-up steps")->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "AdamW weight decay (matrices only)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--clip", f.clip, "Clip the gradients' global norm to this (0: no clipping)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--device", f.device, "cpu or cuda (cuda:1 for a second GPU)")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of initialisation, data order, masks and dropout")
      ->capture_default_str();
  app.add_option("--threads", f.threads, "CPU threads (0: OMP_NUM_THREADS or every core)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--eval-every", f.eval_every, "Evaluate every this many steps (0: at the end)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--log-every", f.log_every,
                 "Write a CSV row (mean training loss since the last row) every this many steps")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--checkpoint-every", f.checkpoint_every,
                 "Save a checkpoint every this many steps (0: at every evaluation)")
      ->check(non_negative())
      ->capture_default_str();
  app.add_option("--stop-at", f.stop_at,
                 "Save a checkpoint and stop after this step, as an interruption would; "
                 "--resume continues")
      ->check(non_negative());
  app.add_option("--checkpoint", f.checkpoint,
                 "Checkpoint file (model, optimizer, data position; written atomically); none "
                 "for no checkpoints")
      ->capture_default_str();
  app.add_flag("--resume", f.resume, "Continue from --checkpoint, exactly where it stopped");
  app.add_option("--log", f.log, "CSV log of the training run");
  app.add_option("--plot", f.plot,
                 "PNG of loss curves: of --compare's logs (without training), else of this "
                 "run's --log after training");
  app.add_option("--compare", f.compare, "CSV logs to plot together with --plot");
}

void check_run_flags(const RunFlags& f) {
  auto need = [](bool ok, const std::string& message) {
    if (!ok) throw UsageError(message);
  };
  need(f.steps > 0, "--steps must be at least 1, got " + std::to_string(f.steps));
  need(f.batch > 0, "--batch must be at least 1, got " + std::to_string(f.batch));
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

std::int64_t parse_int(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  std::int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw UsageError(what + ": '" + text + "' is not a whole number");
  }
  return value;
}

double parse_double(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw UsageError(what + ": '" + text + "' is not a number");
  return value;
}

// --k-schedule: one k per layer.
std::vector<std::int64_t> k_schedule(const std::string& text, std::int64_t layers) {
  const std::string usage =
      "--k-schedule '" + text +
      "': expected linear:k0,step,kmin, geometric:k0,ratio,kmin or one k per layer such as "
      "128,96,64";
  const auto colon = text.find(':');
  try {
    if (colon != std::string::npos) {
      const std::string rule = text.substr(0, colon);
      const auto args = split(text.substr(colon + 1), ',');
      if (args.size() != 3) throw UsageError(usage);
      if (rule == "linear") {
        return nn::k_linear_decay(layers, parse_int(args[0], "--k-schedule"),
                                  parse_int(args[1], "--k-schedule"),
                                  parse_int(args[2], "--k-schedule"));
      }
      if (rule == "geometric") {
        return nn::k_geometric_decay(layers, parse_int(args[0], "--k-schedule"),
                                     parse_double(args[1], "--k-schedule"),
                                     parse_int(args[2], "--k-schedule"));
      }
      throw UsageError(usage);
    }
  } catch (const tinyformer::Error& e) {
    throw UsageError("--k-schedule '" + text + "': " + e.what());
  }
  std::vector<std::int64_t> ks;
  for (const std::string& part : split(text, ',')) ks.push_back(parse_int(part, "--k-schedule"));
  if (static_cast<std::int64_t>(ks.size()) != layers) {
    throw UsageError("--k-schedule '" + text + "' lists " + std::to_string(ks.size()) +
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

std::string describe(const nn::EncoderConfig& c) {
  std::string text = std::to_string(c.layers) + (c.layers == 1 ? " layer" : " layers") +
                     ", d_model " + std::to_string(c.d_model) + ", " + std::to_string(c.heads) +
                     " heads, d_ff " + std::to_string(c.d_ff) + ", ";
  if (c.attention == nn::AttentionKind::full) return text + "full attention";
  std::string ks;
  if (c.linformer.k_per_layer.empty()) {
    ks = std::to_string(c.linformer.k);
  } else {
    for (std::int64_t k : c.linformer.k_per_layer)
      ks += (ks.empty() ? "" : ",") + std::to_string(k);
  }
  // Sharing applies to the learned matrices E and F of the linear kind only.
  const bool linear = c.linformer.projection_name == "linear";
  std::string recipe;
  if (linear) {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", c.linformer.projection_lr_scale);
    recipe = std::string(", ") + nn::sharing_name(c.linformer.sharing) + " sharing, " +
             nn::projection_init_name(c.linformer.projection_init) + " start, lr x" + scale;
  }
  return text + "Linformer k=" + ks + " (" + c.linformer.projection_name + " projection" + recipe +
         ")";
}

Device setup_device(const RunFlags& f) {
  Device device;
  try {
    device = parse_device(f.device);
  } catch (const tinyformer::Error& e) {
    throw UsageError(std::string("--device: ") + e.what());
  }
  if (device.type == DeviceType::cuda && !cuda_available()) {
    throw UsageError("--device " + f.device +
                     ": no usable CUDA device (this build has no CUDA backend, or no GPU is "
                     "present); use --device cpu");
  }
  // One OpenMP pool serves our loops, OpenBLAS (its OpenMP build) and oneDNN.
  if (f.threads > 0) omp_set_num_threads(f.threads);
  return device;
}

void check_writable(const std::string& file, const char* flag) {
  if (file.empty()) return;
  fs::path dir = fs::path(file).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || ::access(dir.c_str(), W_OK) != 0) {
    throw UsageError(std::string(flag) + " " + file + ": cannot write to the directory '" +
                     dir.string() + "'; choose a writable path");
  }
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
  return m;
}

nn::TrainingRunOptions run_options(const RunFlags& f, const char* program, Device device,
                                   std::vector<std::string> eval_columns) {
  return {.program = program,
          .steps = f.steps,
          .stop_at = f.stop_at,
          .checkpoint = f.checkpoint,
          .resume = f.resume,
          .checkpoint_every = f.checkpoint_every > 0 ? f.checkpoint_every : f.eval_every,
          .eval_every = f.eval_every,
          .log = f.log,
          .log_every = f.log_every,
          .eval_columns = std::move(eval_columns),
          .device = device,
          .progress = {}};
}

int report_error(const char* program, std::exception_ptr error) {
  constexpr const char* kSmaller =
      "; lower --batch, the sequence length, the model's size (--d-model, --d-ff, --layers) or "
      "the amount of data";
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const tinyformer::OutOfMemory& e) {
    message = e.what() + std::string(kSmaller);
  } catch (const std::bad_alloc&) {
    message = std::string("out of host memory") + kSmaller;
  } catch (const std::length_error& e) {  // a std::vector or string asked for too many elements
    message = std::string("a size too large for memory (") + e.what() + ")" + kSmaller;
  } catch (const fs::filesystem_error& e) {
    message = std::string(e.what()) +
              "; check that the path exists and that its permissions "
              "let this program read it (and write where it writes)";
  } catch (const UsageError& e) {  // bad input (flags, files, checkpoints): says what to do
    message = e.what();
  } catch (const tinyformer::Error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("unexpected error, a bug to report with the command line: ") + e.what();
  } catch (...) {
    message = "unexpected error of an unknown type, a bug to report with the command line";
  }
  std::replace(message.begin(), message.end(), '\n', ' ');  // one line, for logs and scripts
  std::fprintf(stderr, "%s: %s\n", program, message.c_str());
  return 1;
}

}  // namespace train
