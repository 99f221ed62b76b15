// The Linformer paper's Table 3 on this machine: forward time and peak memory of a Transformer
// encoder stack with full attention and with Linformer attention (layerwise sharing, as in the
// paper) for a grid of sequence lengths n and projected sizes k, printed as the paper's two
// tables (speed-up and memory saved) next to its figures, plus forward+backward times and a
// scaling view (time and memory against n at fixed k, with fitted exponents and a PNG plot).
//
// Every model of the grid and of the scaling view, forward and forward+backward, is one set of
// jobs timed in rounds (bench_timing.h): each round runs every job once in an order that changes
// from round to round, so a change in the machine's load hits every cell alike, and each
// speed-up is the median of the per-round ratios full / Linformer. Rounds go on until every
// speed-up is known to --target-spread or --budget ends. Peak memory comes from the allocator's
// statistics, measured once per model before the timing (it is the same every run).
//
//   benchmark_attention                       # 2 layers of RoBERTa-base's shape, n up to
//                                             # 4096: about 5 minutes on 2 CPU cores
//   benchmark_attention --quick               # n = 512, 1024, k = 128, 1 layer: about 1 minute
//   benchmark_attention --paper --device cuda # the paper's grid and RoBERTa-base shape
//   benchmark_attention --full-kernel materialized   # against the Transformer that keeps P
//
// The Transformer runs full attention on the memory-efficient kernel (the default, no n x n
// matrix kept) unless --full-kernel materialized; Linformer always runs the default.
// The JSON (--json) and the scaling plot (--png) go next to the executable, in the build folder,
// unless named; results/table3/ keeps the curated summary (examples/summarize_results.py).
#include <tinyformer/tinyformer.h>

#include "bench_timing.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

using namespace tinyformer;

namespace {

// One model's results: median times from the interleaved set, peak memory from one run.
struct Measurement {
  double forward_ms = 0, train_ms = 0;
  double forward_peak_mb = 0, train_peak_mb = 0;
};

// The paper's Table 3: speed-up (memory saved) of Linformer over Transformer, by n then k.
const std::map<std::int64_t, std::map<std::int64_t, std::pair<double, double>>> paper = {
    {512, {{128, {1.5, 1.7}}, {256, {1.3, 1.5}}}},
    {1024, {{128, {1.7, 3.0}}, {256, {1.6, 2.9}}, {512, {1.3, 1.8}}}},
    {2048, {{128, {2.6, 6.1}}, {256, {2.4, 5.6}}, {512, {2.1, 3.6}}, {1024, {1.3, 2.0}}}},
    {4096,
     {{128, {3.4, 14}},
      {256, {3.2, 13}},
      {512, {2.8, 8.3}},
      {1024, {2.2, 4.3}},
      {2048, {1.3, 2.3}}}},
    {8192,
     {{128, {5.5, 28}},
      {256, {5.0, 26}},
      {512, {4.4, 17}},
      {1024, {3.5, 8.5}},
      {2048, {2.1, 4.5}}}},
    {16384,
     {{128, {8.6, 56}}, {256, {7.8, 48}}, {512, {7.0, 32}}, {1024, {5.6, 16}}, {2048, {3.3, 8}}}},
    {32768,
     {{128, {13, 56}}, {256, {12, 48}}, {512, {11, 36}}, {1024, {8.8, 18}}, {2048, {5.0, 16}}}},
    {65536,
     {{128, {20, 60}}, {256, {18, 52}}, {512, {16, 40}}, {1024, {14, 20}}, {2048, {7.9, 18}}}},
};

// The profiler's table of one forward (inference) of `encoder` on x.
std::string profile_forward(nn::TransformerEncoder& encoder, const Tensor& x) {
  NoGradGuard no_grad;
  const Profiler profiler;
  Tensor y = encoder.forward(x);
  synchronize(x.device());
  return profiler.table(12);
}

// One forward (no graph) and one forward+backward of `encoder` on x.
void run_forward(nn::TransformerEncoder& encoder, const Tensor& x) {
  NoGradGuard no_grad;
  Tensor y = encoder.forward(x);
  synchronize(x.device());
}
void run_train(nn::TransformerEncoder& encoder, const Tensor& x) {
  sum(encoder.forward(x)).backward();
  synchronize(x.device());
}

// Peak memory of forward and forward+backward: what the device's allocator saw above the bytes
// held before the call, in the second of two calls (the first creates what is cached for good).
// Throws OutOfMemory when the call does not fit on the device.
double peak_mb(const Device& device, const std::function<void()>& call) {
  double mb = 0;
  for (int r = 0; r < 2; ++r) {
    const auto base = memory_stats(device).current_bytes;
    reset_peak_memory(device);
    call();
    mb = static_cast<double>(memory_stats(device).peak_bytes - base) / 1e6;
  }
  return mb;
}

// The folder of this executable (the build folder), where raw output goes by default; the
// current folder where /proc/self/exe cannot be read.
std::filesystem::path executable_folder() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path(".") : exe.parent_path();
}

// Least-squares slope of log(y) against log(x).
double fitted_exponent(const std::vector<double>& x, const std::vector<double>& y) {
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += std::log(x[i]), my += std::log(y[i]);
  mx /= static_cast<double>(x.size()), my /= static_cast<double>(x.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (std::log(x[i]) - mx) * (std::log(y[i]) - my);
    den += (std::log(x[i]) - mx) * (std::log(x[i]) - mx);
  }
  return num / den;
}

}  // namespace

int main(int argc, char** argv) {
  // A line at a time even into a file or a pipe, so that a log shows the run's progress.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{
      "Linformer vs Transformer: the paper's Table 3 on this machine. The defaults take about 5 "
      "minutes on 2 CPU cores (--budget for the timed rounds, plus building the models and "
      "measuring memory), --quick about one"};
  std::string device_name = "cpu";
  std::vector<std::int64_t> ns = {512, 1024, 2048, 4096};
  std::vector<std::int64_t> ks = {128, 256};
  // RoBERTa-base's layer shape (as the paper); two layers keep the default run to minutes on a CPU.
  std::int64_t d_model = 768, heads = 12, d_ff = 3072, layers = 2, batch = 1;
  bool paper_grid = false, train = true, scaling = true, quick = false;
  std::int64_t scaling_k = 128;
  std::vector<std::int64_t> scaling_ns = {256, 512, 1024, 2048, 4096};
  // The stop rule (bench_timing.h) for the one set of all models. Each model has run twice for
  // its memory before the timing starts (creating its primitives and filling the allocator's
  // cache), so one interleaved warm-up round suffices.
  bench::StopRule rule;
  rule.budget_s = 240, rule.min_warmup = 1, rule.max_warmup = 1;
  int reps = 0;
  std::string json_path = (executable_folder() / "benchmark_attention.json").string();
  std::string png_path;  // default: beside the JSON
  app.add_option("--device", device_name, "cpu or cuda");
  app.add_option("--n", ns, "sequence lengths")->delimiter(',');
  app.add_option("--k", ks, "projected sizes")->delimiter(',');
  app.add_option("--d-model", d_model);
  app.add_option("--heads", heads);
  app.add_option("--d-ff", d_ff);
  auto* layers_option = app.add_option("--layers", layers);
  app.add_option("--batch", batch);
  auto* budget_option = app.add_option("--budget", rule.budget_s,
                                       "seconds for all the timed rounds, warm-up included; the "
                                       "first --min-rounds rounds always run")
                            ->check(CLI::PositiveNumber)
                            ->capture_default_str();
  app.add_option("--target-spread", rule.target_spread,
                 "stop once every speed-up's median is known to this relative precision "
                 "(half-width of its 95% confidence interval)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  auto* min_rounds_option = app.add_option("--min-rounds", rule.min_rounds, "timed rounds at least")
                                ->check(CLI::Range(1, 1000000))
                                ->capture_default_str();
  app.add_option("--max-rounds", rule.max_rounds, "timed rounds at most")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--reps", reps, "exactly this many timed rounds, instead of the stop rule")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--quick", quick,
               "n = 512 and 1024, k = 128, one layer, scaling n = 256..1024, 3 rounds at least "
               "and a 20 s budget unless given: about a minute on 2 cores");
  app.add_flag("--paper", paper_grid,
               "the paper's grid (n = 512..65536, k = 128..2048) and RoBERTa-base shape "
               "(d=768, 12 heads, ff=3072, 12 layers); for a GPU");
  bool probe = true;
  app.add_flag("!--no-probe", probe,
               "count every round: without the probe (CPU only) that leaves out the times taken "
               "while the host ran the threads on distant cores (bench_timing.h)");
  app.add_flag("!--no-train", train, "skip forward+backward timing");
  app.add_flag("!--no-scaling", scaling, "skip the scaling view");
  app.add_option("--scaling-k", scaling_k);
  app.add_option("--scaling-n", scaling_ns)->delimiter(',');
  std::string full_kernel = "memory_efficient";
  app.add_option("--full-kernel", full_kernel,
                 "the Transformer's attention kernel, the baseline: memory_efficient (the "
                 "default: no n x n matrix kept) or materialized (P kept for the backward)")
      ->check(CLI::IsMember({"memory_efficient", "materialized"}))
      ->capture_default_str();
  bool profile = false;
  app.add_flag("--profile", profile,
               "after the timings, print where one forward of each model spends its time "
               "(tinyformer::Profiler)");
  app.add_option("--json", json_path, "where to write the results")->capture_default_str();
  app.add_option("--png", png_path,
                 "where to render the scaling plot (needs gnuplot); default: "
                 "benchmark_attention_scaling.png beside the JSON");
  CLI11_PARSE(app, argc, argv);
  if (png_path.empty()) {
    png_path = (std::filesystem::path(json_path).parent_path() / "benchmark_attention_scaling.png")
                   .string();
  }

  try {
    const Device device = parse_device(device_name);
    if (paper_grid) {
      if (app.count("--n") == 0) ns = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
      if (app.count("--k") == 0) ks = {128, 256, 512, 1024, 2048};
      d_model = 768, heads = 12, d_ff = 3072, layers = 12;
    }
    if (quick) {
      if (app.count("--n") == 0) ns = {512, 1024};
      if (app.count("--k") == 0) ks = {128};
      if (layers_option->count() == 0) layers = 1;
      if (app.count("--scaling-n") == 0) scaling_ns = {256, 512, 1024};
      if (budget_option->count() == 0) rule.budget_s = 20;
      if (min_rounds_option->count() == 0) rule.min_rounds = 3;
    }
    if (reps > 0) rule.min_rounds = rule.max_rounds = reps;
    rule.max_rounds = std::max(rule.max_rounds, rule.min_rounds);
    if (probe && device.is_cpu()) rule.probe = bench::core_probe();
    std::printf(
        "device %s; encoder: %lld layers, d_model %lld, %lld heads, ff %lld, batch %lld, "
        "float32; the Transformer's attention kernel: %s\nkernels: %s\ntiming: every model below, "
        "forward%s, in one set of jobs taking "
        "turns in an order that changes every round: %s. A speed-up is the median of the "
        "per-round ratios full / Linformer, +- the half-width of its 95%% confidence interval\n\n",
        device.str().c_str(), static_cast<long long>(layers), static_cast<long long>(d_model),
        static_cast<long long>(heads), static_cast<long long>(d_ff), static_cast<long long>(batch),
        full_kernel.c_str(), runtime_info(device).c_str(), train ? " and forward+backward" : "",
        bench::describe(rule).c_str());
    auto make = [&](std::int64_t n, std::int64_t k) {
      nn::EncoderConfig c{.layers = layers,
                          .d_model = d_model,
                          .heads = heads,
                          .d_ff = d_ff,
                          .max_seq_len = n,
                          .dropout = 0.0};
      if (k > 0) {
        c.attention = nn::AttentionKind::linformer;
        c.linformer = {.k = k, .sharing = nn::Sharing::layerwise};
      }
      auto enc = std::make_shared<nn::TransformerEncoder>(c);
      if (k == 0) nn::set_attention_kernel(*enc, parse_attention_kernel(full_kernel));
      enc->to(device);
      enc->eval();
      return enc;
    };
    auto label = [](std::int64_t n, std::int64_t k) {
      return "n=" + std::to_string(n) + (k == 0 ? " full" : " k=" + std::to_string(k));
    };

    // The models: (n, 0) is full attention. The grid's, with forward+backward unless
    // --no-train, and the scaling view's (forward only), each once.
    std::map<std::pair<std::int64_t, std::int64_t>, bool> models;  // -> time forward+backward
    for (std::int64_t n : ns) {
      models[{n, 0}] = train;
      for (std::int64_t k : ks) {
        if (k < n) models[{n, k}] = train;
      }
    }
    if (scaling) {
      for (std::int64_t n : scaling_ns) {
        if (n <= scaling_k) continue;
        models.try_emplace({n, 0}, false);
        models.try_emplace({n, scaling_k}, false);
      }
    }

    // Build every model and measure its memory, then one set of jobs for them all. A model
    // whose forward does not fit on the device is left out (its cells say so), and so is the
    // forward+backward of one whose forward fits but not its training step.
    std::map<std::int64_t, Tensor> inputs;  // by n, shared by the models of that n
    std::map<std::pair<std::int64_t, std::int64_t>, std::shared_ptr<nn::TransformerEncoder>>
        encoders;
    std::map<std::pair<std::int64_t, std::int64_t>, Measurement> measured;
    std::vector<bench::Job> jobs;
    std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> forward_job, train_job;
    auto out_of_memory = [&](std::int64_t n, std::int64_t k, const char* what,
                             const OutOfMemory& e) {
      std::printf("%s %s does not fit: %s\n", label(n, k).c_str(), what, e.what());
      empty_cache(device);
    };
    for (const auto& [key, with_train] : models) {
      const auto [n, k] = key;
      std::shared_ptr<nn::TransformerEncoder> encoder;
      Measurement m;
      try {
        if (!inputs.count(n)) inputs[n] = randn({batch, n, d_model}, {.device = device});
        encoder = make(n, k);
        m.forward_peak_mb = peak_mb(device, [&] { run_forward(*encoder, inputs.at(n)); });
      } catch (const OutOfMemory& e) {
        encoder.reset();
        out_of_memory(n, k, "forward", e);
        continue;
      }
      const Tensor x = inputs.at(n);
      forward_job[key] = jobs.size();
      jobs.push_back(
          {label(n, k) + " forward", nullptr, [encoder, x] { run_forward(*encoder, x); }});
      if (with_train) {
        try {
          m.train_peak_mb = peak_mb(device, [&] {
            encoder->zero_grad();
            run_train(*encoder, x);
          });
          train_job[key] = jobs.size();
          jobs.push_back({label(n, k) + " forward+backward", [encoder] { encoder->zero_grad(); },
                          [encoder, x] { run_train(*encoder, x); }});
        } catch (const OutOfMemory& e) {
          encoder->zero_grad();
          out_of_memory(n, k, "forward+backward", e);
        }
      }
      measured[key] = m;
      encoders[key] = std::move(encoder);
    }
    // The speed-ups, full / Linformer, for every Linformer model whose full model ran too.
    std::vector<bench::Ratio> ratios;
    auto has_ratio = [&](std::int64_t n, std::int64_t k, bool training) {
      const auto& job = training ? train_job : forward_job;
      return k > 0 && job.count({n, 0}) && job.count({n, k});
    };
    for (const auto& [key, with_train] : models) {
      const auto [n, k] = key;
      if (has_ratio(n, k, false)) {
        ratios.push_back(
            {label(n, k) + " inference speed-up", forward_job.at({n, 0}), forward_job.at(key)});
      }
      if (has_ratio(n, k, true)) {
        ratios.push_back(
            {label(n, k) + " training speed-up", train_job.at({n, 0}), train_job.at(key)});
      }
    }
    const bench::Result timing = bench::run(jobs, ratios, rule);
    std::printf("%s\n", timing.report().c_str());
    for (auto& [key, m] : measured) {
      m.forward_ms = timing.jobs[forward_job.at(key)].median_ms;
      if (train_job.count(key)) m.train_ms = timing.jobs[train_job.at(key)].median_ms;
    }
    auto speedup = [&](std::int64_t n, std::int64_t k, bool training) -> const bench::RatioStats& {
      return timing.ratio(label(n, k) + (training ? " training speed-up" : " inference speed-up"));
    };

    nlohmann::json results = nlohmann::json::array(), ratio_json = nlohmann::json::array();
    // A model that did not fit: "out_of_memory" true, and no times; a training step that did
    // not fit: "train_ms" null.
    auto cell_json = [&](std::int64_t n, std::int64_t k) {
      nlohmann::json j = {{"n", n}, {"k", k == 0 ? nlohmann::json(nullptr) : nlohmann::json(k)}};
      if (!measured.count({n, k})) {
        j["out_of_memory"] = true;
        return j;
      }
      const Measurement& m = measured.at({n, k});
      j.update(
          {{"forward_ms", m.forward_ms},
           {"forward_min_ms", timing.jobs[forward_job.at({n, k})].min_ms},
           {"forward_spread", timing.jobs[forward_job.at({n, k})].spread},
           {"forward_peak_mb", m.forward_peak_mb},
           {"train_ms", train_job.count({n, k}) ? nlohmann::json(m.train_ms) : nlohmann::json()},
           {"train_peak_mb", m.train_peak_mb}});
      if (train_job.count({n, k})) {
        j["train_min_ms"] = timing.jobs[train_job.at({n, k})].min_ms;
        j["train_spread"] = timing.jobs[train_job.at({n, k})].spread;
      }
      if (has_ratio(n, k, false)) {
        j["inference_speedup"] = speedup(n, k, false).median;
        j["inference_speedup_spread"] = speedup(n, k, false).spread;
        if (has_ratio(n, k, true)) {
          j["training_speedup"] = speedup(n, k, true).median;
          j["training_speedup_spread"] = speedup(n, k, true).spread;
        }
      }
      return j;
    };
    auto print_model = [&](std::int64_t n, std::int64_t k) {
      std::printf("%-17s forward", label(n, k).c_str());
      if (!measured.count({n, k})) {
        std::printf(" does not fit on the device\n");
        return;
      }
      const Measurement& m = measured.at({n, k});
      std::printf(" %9.2f ms  peak %8.1f MB", m.forward_ms, m.forward_peak_mb);
      if (train && train_job.count({n, k})) {
        std::printf("   fwd+bwd %9.2f ms  peak %8.1f MB", m.train_ms, m.train_peak_mb);
      } else if (train) {
        std::printf("   fwd+bwd does not fit on the device");
      }
      std::printf("\n");
    };
    for (std::int64_t n : ns) {
      print_model(n, 0);
      results.push_back(cell_json(n, 0));
      for (std::int64_t k : ks) {
        if (k >= n) continue;
        print_model(n, k);
        results.push_back(cell_json(n, k));
      }
    }
    for (const bench::RatioStats& r : timing.ratios) {
      ratio_json.push_back({{"name", r.name}, {"median", r.median}, {"spread", r.spread}});
    }

    // Cells: speed-up +- its spread (memory saved) [the paper's speed-up (memory saved)].
    auto table = [&](const char* title, bool training, bool with_paper) {
      std::printf("\n%s\n%-7s", title, "n \\ k");
      for (std::int64_t k : ks) std::printf(" | %-31lld", static_cast<long long>(k));
      std::printf("\n");
      for (std::int64_t n : ns) {
        std::printf("%-7lld", static_cast<long long>(n));
        for (std::int64_t k : ks) {
          if (k >= n) {
            std::printf(" | %-31s", "-");
            continue;
          }
          if (!has_ratio(n, k, training)) {
            const bool linformer_ran = (training ? train_job : forward_job).count({n, k}) > 0;
            std::printf(" | %-31s", linformer_ran ? "full: out of memory" : "out of memory");
            continue;
          }
          const Measurement& f = measured.at({n, 0});
          const Measurement& l = measured.at({n, k});
          const bench::RatioStats& s = speedup(n, k, training);
          const double mem =
              training ? f.train_peak_mb / l.train_peak_mb : f.forward_peak_mb / l.forward_peak_mb;
          char cell[96];
          auto p = paper.count(n) && paper.at(n).count(k) ? paper.at(n).at(k) : std::pair{0.0, 0.0};
          // The spread is unknown (NaN) after a single round.
          const int length = std::isnan(s.spread)
                                 ? std::snprintf(cell, sizeof cell, "%.2fx (%.1fx)", s.median, mem)
                                 : std::snprintf(cell, sizeof cell, "%.2fx +-%.0f%% (%.1fx)",
                                                 s.median, 100 * s.spread, mem);
          if (with_paper && p.first > 0 && length > 0) {
            std::snprintf(cell + length, sizeof cell - static_cast<std::size_t>(length),
                          " [%.1fx (%.0fx)]", p.first, p.second);
          }
          std::printf(" | %-31s", cell);
        }
        std::printf("\n");
      }
    };
    table(
        "Inference: speed-up of Linformer over Transformer +- its spread (memory saved), "
        "[paper's Table 3]",
        false, true);
    if (train) {
      table(
          "Training (forward+backward): speed-up +- its spread (memory saved); the paper "
          "reports none",
          true, false);
    }
    std::printf("%s\n", timing.summary().c_str());
    if (!timing.quiet_summary().empty()) std::printf("%s\n", timing.quiet_summary().c_str());

    nlohmann::json scaling_json;
    if (profile) {
      for (const auto& [key, encoder] : encoders) {
        std::printf("\n%s, one forward:\n%s", label(key.first, key.second).c_str(),
                    profile_forward(*encoder, inputs.at(key.first)).c_str());
      }
    }
    if (scaling) {
      std::vector<double> xs, tf, tl, mf, ml;
      std::printf("\nScaling at k = %lld (forward):\n%-7s %12s %12s %12s %12s %14s\n",
                  static_cast<long long>(scaling_k), "n", "full ms", "linformer ms", "full MB",
                  "linformer MB", "speed-up");
      for (std::int64_t n : scaling_ns) {
        if (n <= scaling_k || !has_ratio(n, scaling_k, false)) continue;
        const Measurement& f = measured.at({n, 0});
        const Measurement& l = measured.at({n, scaling_k});
        xs.push_back(static_cast<double>(n));
        tf.push_back(f.forward_ms), tl.push_back(l.forward_ms);
        mf.push_back(f.forward_peak_mb), ml.push_back(l.forward_peak_mb);
        const bench::RatioStats& s = speedup(n, scaling_k, false);
        std::printf("%-7lld %12.2f %12.2f %12.1f %12.1f %7.2fx +-%.0f%%\n",
                    static_cast<long long>(n), f.forward_ms, l.forward_ms, f.forward_peak_mb,
                    l.forward_peak_mb, s.median, 100 * s.spread);
      }
      if (xs.size() >= 2) {
        // The exponent over the upper half of the range, where attention dominates.
        const std::size_t from_i = xs.size() / 2 - (xs.size() >= 4 ? 0 : 0);
        auto tail = [&](const std::vector<double>& v) {
          return std::vector<double>(v.begin() + static_cast<long>(from_i), v.end());
        };
        const auto xt = tail(xs);
        const double e_tf = fitted_exponent(xt, tail(tf)), e_tl = fitted_exponent(xt, tail(tl));
        const double e_mf = fitted_exponent(xt, tail(mf)), e_ml = fitted_exponent(xt, tail(ml));
        std::printf(
            "fitted exponent (n >= %.0f): time full %.2f, Linformer %.2f; memory full "
            "%.2f, Linformer %.2f\n",
            xt.front(), e_tf, e_tl, e_mf, e_ml);
        scaling_json = {{"k", scaling_k},
                        {"n", xs},
                        {"full_ms", tf},
                        {"linformer_ms", tl},
                        {"full_mb", mf},
                        {"linformer_mb", ml},
                        {"exponents",
                         {{"time_full", e_tf},
                          {"time_linformer", e_tl},
                          {"memory_full", e_mf},
                          {"memory_linformer", e_ml}}}};
        const std::string dat = png_path + ".dat";
        {
          std::ofstream out(dat);
          for (std::size_t i = 0; i < xs.size(); ++i) {
            out << xs[i] << ' ' << tf[i] << ' ' << tl[i] << ' ' << mf[i] << ' ' << ml[i] << '\n';
          }
        }
        const std::string script =
            "set terminal pngcairo size 1000,420; set output '" + png_path +
            "';"
            "set multiplot layout 1,2; set logscale xy; set key left top; set xlabel 'n';"
            "set ylabel 'forward ms'; plot '" +
            dat +
            "' u 1:2 w lp t 'full', '' u 1:3 w lp t "
            "'Linformer k=" +
            std::to_string(scaling_k) +
            "';"
            "set ylabel 'peak MB'; plot '" +
            dat +
            "' u 1:4 w lp t 'full', '' u 1:5 w lp t "
            "'Linformer';unset multiplot";
        const std::string cmd = "gnuplot -e \"" + script + "\" 2>/dev/null";
        if (std::system(cmd.c_str()) == 0) {
          std::printf("plot written to %s\n", png_path.c_str());
        } else {
          std::printf("gnuplot not available: no plot (apt-get install gnuplot-nox)\n");
        }
        std::remove(dat.c_str());
      }
    }
    // "ratios": the speed-ups by name, what examples/compare_benchmark_runs.py compares;
    // "timing": every job's and ratio's per-round values and the stop rule's outcome.
    std::ofstream(json_path) << nlohmann::json{{"program", "benchmark_attention"},
                                               {"device", device.str()},
                                               {"d_model", d_model},
                                               {"heads", heads},
                                               {"d_ff", d_ff},
                                               {"layers", layers},
                                               {"batch", batch},
                                               {"full_kernel", full_kernel},
                                               {"results", results},
                                               {"ratios", ratio_json},
                                               {"scaling", scaling_json},
                                               {"timing", timing.to_json()}}
                                    .dump(2)
                             << "\n";
    std::printf(
        "results written to %s; to check that a second run reproduces the speed-ups: "
        "examples/compare_benchmark_runs.py FIRST.json SECOND.json\n",
        json_path.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "benchmark_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
