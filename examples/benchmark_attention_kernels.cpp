// Exact attention without the n x n matrix, measured: the bare fused_attention op on heads
// [batch, H, n, d_head] (RoBERTa-base's layer: 12 heads of 64), forward and forward+backward, on
// its two kernels, materialized (keeps P [batch, H, n, n]) and memory-efficient (keeps one
// log-sum-exp per row and recomputes P in backward), beside Linformer's attention over k
// summary rows (the same op with keys and values [batch, H, k, d_head]) at k = 64, 128, 256.
//
// Every case is one job of one interleaved set (bench_timing.h): each round runs every job once,
// in an order that changes from round to round, and each ratio is the median of the per-round
// ratios. Peak memory is the allocator's peak of live tensor bytes above what the inputs hold,
// measured once per case before the timing. A case whose peak would pass --memory-gb is left out
// (its peak is extrapolated from the last two lengths measured: n^2 for the materialized kernel,
// n for the others) and the longest n that each case trains on within that memory is printed.
//
//   benchmark_attention_kernels                       # n = 512..4096: a few minutes on 2 cores
//   benchmark_attention_kernels --n 512,1024 --quick  # seconds
//   benchmark_attention_kernels --causal --mask       # with the causal rule and key padding
//
// The JSON (--json) and the scaling plot (--png: time and peak memory against n) go next to the
// executable unless named; results/attention_kernels/ keeps the curated summary.
#include <tinyformer/tinyformer.h>

#include "bench_timing.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

using namespace tinyformer;

namespace {

std::filesystem::path executable_folder() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path(".") : exe.parent_path();
}

// One case: full attention on a kernel, or Linformer's (keys k rows, memory-efficient).
struct Case {
  std::string name;
  std::int64_t k = 0;  // 0: full attention
  AttentionKernel kernel = AttentionKernel::memory_efficient;
};

struct Inputs {
  Tensor q, k, v, mask, up;
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{
      "Full attention materialized against memory-efficient, and Linformer's attention, as bare "
      "ops: time and peak memory, forward and forward+backward"};
  std::vector<std::int64_t> ns = {512, 1024, 2048, 4096};
  std::vector<std::int64_t> ks = {64, 128, 256};
  std::int64_t heads = 12, d_head = 64, batch = 1;
  bool causal = false, masked = false, quick = false, train = true;
  double memory_gb = 24;
  bench::StopRule rule;
  rule.budget_s = 180, rule.min_warmup = 1, rule.max_warmup = 2;
  std::string json_path = (executable_folder() / "benchmark_attention_kernels.json").string();
  app.add_option("--n", ns, "sequence lengths")->delimiter(',');
  app.add_option("--k", ks, "Linformer's projected sizes (none: --k 0)")->delimiter(',');
  app.add_option("--heads", heads)->capture_default_str();
  app.add_option("--d-head", d_head)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_flag("--causal", causal, "the causal rule (full attention only)");
  app.add_flag("--mask", masked, "a key-padding mask excluding the last eighth of the keys");
  app.add_flag("!--no-train", train, "forward only");
  app.add_option("--memory-gb", memory_gb,
                 "leave out a case whose forward+backward peak would pass this; the longest "
                 "sequence each case trains on within it is printed")
      ->capture_default_str();
  app.add_option("--budget", rule.budget_s, "seconds for the timed rounds")->capture_default_str();
  app.add_option("--min-rounds", rule.min_rounds)->capture_default_str();
  app.add_flag("--quick", quick, "a 10 s budget and 3 rounds at least");
  bool probe = true;
  app.add_flag("!--no-probe", probe,
               "count every round: without the probe the statistics leave out the rounds in "
               "which the host ran the threads on distant cores (bench_timing.h)");
  app.add_option("--json", json_path, "where to write the results")->capture_default_str();
  std::string png_path;  // default: beside the JSON
  app.add_option("--png", png_path,
                 "where to render time and peak memory against n (needs gnuplot); default: "
                 "benchmark_attention_kernels.png beside the JSON");
  CLI11_PARSE(app, argc, argv);
  if (png_path.empty()) {
    png_path = (std::filesystem::path(json_path).parent_path() / "benchmark_attention_kernels.png")
                   .string();
  }
  if (quick) {
    if (app.count("--budget") == 0) rule.budget_s = 10;
    if (app.count("--min-rounds") == 0) rule.min_rounds = 3;
  }
  try {
    if (probe) rule.probe = bench::core_probe();
    std::vector<Case> cases = {{"full materialized", 0, AttentionKernel::materialized},
                               {"full memory-efficient", 0, AttentionKernel::memory_efficient}};
    for (std::int64_t k : ks) {
      if (k > 0) cases.push_back({"Linformer k=" + std::to_string(k), k});
    }
    std::printf("bare attention [%lld, %lld, n, %lld], float32%s%s\nkernels: %s\ntiming: %s\n\n",
                static_cast<long long>(batch), static_cast<long long>(heads),
                static_cast<long long>(d_head), causal ? ", causal" : "",
                masked ? ", key padding (last n/8 keys)" : "", runtime_info(Device::cpu()).c_str(),
                bench::describe(rule).c_str());

    std::map<std::int64_t, Inputs> inputs;
    const auto inputs_for = [&](std::int64_t n) -> Inputs& {
      if (!inputs.count(n)) {
        manual_seed(1);
        Inputs in;
        in.q = randn({batch, heads, n, d_head}, {.requires_grad = true});
        in.k = randn({batch, heads, n, d_head}, {.requires_grad = true});
        in.v = randn({batch, heads, n, d_head}, {.requires_grad = true});
        in.up = randn({batch, heads, n, d_head});
        if (masked) {
          in.mask = zeros({batch, 1, 1, n}, {.dtype = DType::boolean});
          in.mask.narrow(3, n - n / 8, n / 8).fill_(1.0);
        }
        inputs[n] = in;
      }
      return inputs[n];
    };
    // Linformer's keys and values: k rows, as its projection makes them (the projection itself,
    // a product over n, is not part of the op).
    std::map<std::pair<std::int64_t, std::int64_t>, std::pair<Tensor, Tensor>> summaries;
    const auto call = [&](const Case& c, std::int64_t n, bool backward) {
      Inputs& in = inputs_for(n);
      Tensor key = in.k, value = in.v, mask = in.mask;
      if (c.k > 0) {
        auto& s = summaries[{n, c.k}];
        if (!s.first.defined()) {
          s.first = randn({batch, heads, c.k, d_head}, {.requires_grad = true});
          s.second = randn({batch, heads, c.k, d_head}, {.requires_grad = true});
        }
        key = s.first, value = s.second, mask = Tensor();
      }
      const AttentionOptions options{.causal = causal && c.k == 0, .kernel = c.kernel};
      if (!backward) {
        NoGradGuard no_grad;
        fused_attention(in.q, key, value, mask, options);
        return;
      }
      sum(mul(fused_attention(in.q, key, value, mask, options), in.up)).backward();
    };
    const auto clear_grads = [&] {
      for (auto& [n, in] : inputs) {
        for (Tensor* t : {&in.q, &in.k, &in.v}) t->zero_grad();
      }
      for (auto& [key, s] : summaries) s.first.zero_grad(), s.second.zero_grad();
    };
    const auto peak_mb = [&](const Case& c, std::int64_t n, bool backward) {
      double mb = 0;
      for (int r = 0; r < 2; ++r) {
        inputs_for(n);
        clear_grads();
        const auto base = memory_stats().current_bytes;
        reset_peak_memory();
        call(c, n, backward);
        mb = static_cast<double>(memory_stats().peak_bytes - base) / 1e6;
      }
      clear_grads();
      return mb;
    };

    // Memory first, case by case; a case is left out once its extrapolated training peak passes
    // the limit.
    struct Cell {
      double forward_mb = 0, train_mb = 0;
      std::size_t forward_job = 0, train_job = 0;
      bool ran = false;
    };
    std::map<std::pair<std::size_t, std::int64_t>, Cell> cells;
    std::vector<bench::Job> jobs;
    const double limit_mb = memory_gb * 1e3;
    std::vector<double> last_n(cases.size(), 0), last_mb(cases.size(), 0);
    std::vector<double> prev_n(cases.size(), 0), prev_mb(cases.size(), 0);
    const auto exponent = [&](std::size_t i) {
      return cases[i].k == 0 && cases[i].kernel == AttentionKernel::materialized ? 2.0 : 1.0;
    };
    for (std::int64_t n : ns) {
      for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        if (c.k >= n) continue;
        if (last_n[i] > 0) {
          const double predicted =
              last_mb[i] * std::pow(static_cast<double>(n) / last_n[i], exponent(i));
          if (predicted > limit_mb) {
            std::printf("%s at n=%lld left out: its peak would be about %.0f MB\n", c.name.c_str(),
                        static_cast<long long>(n), predicted);
            continue;
          }
        }
        Cell cell;
        cell.forward_mb = peak_mb(c, n, false);
        cell.train_mb = train ? peak_mb(c, n, true) : 0;
        prev_n[i] = last_n[i], prev_mb[i] = last_mb[i];
        last_n[i] = static_cast<double>(n), last_mb[i] = train ? cell.train_mb : cell.forward_mb;
        const std::string label = c.name + " n=" + std::to_string(n);
        cell.forward_job = jobs.size();
        jobs.push_back({label + " forward", nullptr, [&, i, n] { call(cases[i], n, false); }});
        if (train) {
          cell.train_job = jobs.size();
          jobs.push_back(
              {label + " forward+backward", clear_grads, [&, i, n] { call(cases[i], n, true); }});
        }
        cell.ran = true;
        cells[{i, n}] = cell;
      }
    }
    // Ratios: each case's time over the memory-efficient full attention's at the same n.
    std::vector<bench::Ratio> ratios;
    for (const auto& [key, cell] : cells) {
      const auto [i, n] = key;
      if (i == 1 || !cells.count({1, n})) continue;
      const Cell& base = cells.at({1, n});
      const std::string label = cases[i].name + " n=" + std::to_string(n);
      ratios.push_back({label + " forward / memory-efficient", cell.forward_job, base.forward_job});
      if (train) {
        ratios.push_back({label + " fwd+bwd / memory-efficient", cell.train_job, base.train_job});
      }
    }
    const bench::Result timing = bench::run(jobs, ratios, rule);
    std::printf("%s\n", timing.report().c_str());

    // The table: per n and case, times, peaks, and the ratios to memory-efficient full.
    nlohmann::json rows = nlohmann::json::array();
    std::printf("\n%-6s %-22s %11s %11s %13s %13s %16s %16s\n", "n", "case", "fwd ms", "fwd+bwd ms",
                "fwd peak MB", "train peak MB", "fwd / mem-eff", "fwd+bwd / mem-eff");
    for (std::int64_t n : ns) {
      for (std::size_t i = 0; i < cases.size(); ++i) {
        if (!cells.count({i, n})) continue;
        const Cell& cell = cells.at({i, n});
        const double fwd = timing.jobs[cell.forward_job].median_ms;
        const double trn = train ? timing.jobs[cell.train_job].median_ms : 0.0;
        const std::string label = cases[i].name + " n=" + std::to_string(n);
        double rf = 1, rt = 1;
        if (i != 1 && cells.count({1, n})) {
          rf = timing.ratio(label + " forward / memory-efficient").median;
          if (train) rt = timing.ratio(label + " fwd+bwd / memory-efficient").median;
        }
        std::printf("%-6lld %-22s %11.2f %11.2f %13.1f %13.1f %15.2fx %15.2fx\n",
                    static_cast<long long>(n), cases[i].name.c_str(), fwd, trn, cell.forward_mb,
                    cell.train_mb, rf, rt);
        rows.push_back({{"n", n},
                        {"case", cases[i].name},
                        {"k", cases[i].k},
                        {"forward_ms", fwd},
                        {"train_ms", trn},
                        {"forward_peak_mb", cell.forward_mb},
                        {"train_peak_mb", cell.train_mb},
                        {"forward_over_memory_efficient", rf},
                        {"train_over_memory_efficient", rt}});
      }
    }
    // The longest sequence within --memory-gb for a training step: the last measured peak
    // extended by the case's growth (n^2 materialized, n otherwise; fitted from the last two
    // lengths where there are two).
    nlohmann::json longest = nlohmann::json::object();
    std::printf(
        "\nLongest n whose forward+backward fits in %.0f GB (extrapolated from n = %lld):\n",
        memory_gb, static_cast<long long>(ns.back()));
    for (std::size_t i = 0; i < cases.size() && train; ++i) {
      if (last_n[i] == 0) continue;
      double e = exponent(i);
      if (prev_n[i] > 0 && prev_mb[i] > 0)
        e = std::log(last_mb[i] / prev_mb[i]) / std::log(last_n[i] / prev_n[i]);
      e = std::max(e, 0.5);
      const double n_max = last_n[i] * std::pow(limit_mb / last_mb[i], 1.0 / e);
      std::printf("  %-22s n = %.0f (peak growing as n^%.2f)\n", cases[i].name.c_str(), n_max, e);
      longest[cases[i].name] = {{"n", n_max}, {"exponent", e}};
    }
    std::printf("%s\n", timing.summary().c_str());
    if (!timing.quiet_summary().empty()) std::printf("%s\n", timing.quiet_summary().c_str());

    // The scaling plot: forward+backward (forward with --no-train) time and peak memory against
    // n, one line per case, on log-log axes.
    {
      const std::string dat = png_path + ".dat";
      std::ofstream out(dat);
      std::string plots_time, plots_memory;
      int block = 0;
      for (std::size_t i = 0; i < cases.size(); ++i) {
        bool any = false;
        for (std::int64_t n : ns) {
          if (!cells.count({i, n})) continue;
          const Cell& cell = cells.at({i, n});
          const double ms = timing.jobs[train ? cell.train_job : cell.forward_job].median_ms;
          out << n << ' ' << ms << ' ' << (train ? cell.train_mb : cell.forward_mb) << '\n';
          any = true;
        }
        if (!any) continue;
        out << "\n\n";
        const std::string sep = block == 0 ? "" : ", ";
        const std::string index = "index " + std::to_string(block);
        plots_time += sep + "'" + dat + "' " + index + " u 1:2 w lp t '" + cases[i].name + "'";
        plots_memory += sep + "'" + dat + "' " + index + " u 1:3 w lp t '" + cases[i].name + "'";
        ++block;
      }
      out.close();
      const std::string what = train ? "forward+backward" : "forward";
      const std::string script =
          "set terminal pngcairo size 1100,440; set output '" + png_path +
          "'; set multiplot layout 1,2; set logscale xy; set key left top; set xlabel 'n';"
          "set ylabel '" +
          what + " ms'; plot " + plots_time + "; set ylabel '" + what + " peak MB'; plot " +
          plots_memory + "; unset multiplot";
      const std::string command = "gnuplot -e \"" + script + "\" 2>/dev/null";
      if (block > 0 && std::system(command.c_str()) == 0) {
        std::printf("plot written to %s\n", png_path.c_str());
      } else {
        std::printf("no plot (gnuplot not available: apt-get install gnuplot-nox)\n");
      }
      std::remove(dat.c_str());
    }
    std::ofstream(json_path) << nlohmann::json{{"program", "benchmark_attention_kernels"},
                                               {"heads", heads},
                                               {"d_head", d_head},
                                               {"batch", batch},
                                               {"causal", causal},
                                               {"masked", masked},
                                               {"memory_gb", memory_gb},
                                               {"rows", rows},
                                               {"longest_n", longest},
                                               {"timing", timing.to_json()}}
                                    .dump(2)
                             << "\n";
    std::printf("results written to %s\n", json_path.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "benchmark_attention_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
