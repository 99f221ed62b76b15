// The Linformer paper's Table 3 on this machine: forward time and peak memory of a Transformer
// encoder stack with full attention and with Linformer attention (layerwise sharing, as in the
// paper) for a grid of sequence lengths n and projected sizes k, printed as the paper's two
// tables (speed-up and memory saved) next to its figures, plus forward+backward times and a
// scaling view (time and memory against n at fixed k, with fitted exponents and a PNG plot).
//
//   benchmark_attention                       # 2 layers of RoBERTa-base's shape, n up to
//                                             # 4096: about 2 minutes on 2 CPU cores
//   benchmark_attention --paper --device cuda # the paper's grid and RoBERTa-base shape
#include <tinyformer/tinyformer.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

using namespace tinyformer;

namespace {

struct Measurement {
  double forward_ms = 0, train_ms = 0;  // medians
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The profiler's table of one forward (inference) of `encoder` on x.
std::string profile_forward(nn::TransformerEncoder& encoder, const Tensor& x) {
  NoGradGuard no_grad;
  const Profiler profiler;
  Tensor y = encoder.forward(x);
  synchronize(x.device());
  return profiler.table(12);
}

// Times forward (no graph) and forward+backward of `encoder` on x; peak memory is what the
// device's allocator saw above the bytes held before the call.
Measurement measure(nn::TransformerEncoder& encoder, const Tensor& x, int reps, bool train) {
  Measurement m;
  synchronize(x.device());
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    const auto base = memory_stats(x.device()).current_bytes;
    reset_peak_memory(x.device());
    const double t0 = now_ms();
    {
      NoGradGuard no_grad;
      Tensor y = encoder.forward(x);
      synchronize(x.device());
    }
    const double t1 = now_ms();
    if (r > 0) times.push_back(t1 - t0);  // the first run warms caches and primitives
    m.forward_peak_mb = static_cast<double>(memory_stats(x.device()).peak_bytes - base) / 1e6;
  }
  m.forward_ms = median(times);
  if (!train) return m;
  times.clear();
  for (int r = 0; r < reps + 1; ++r) {
    encoder.zero_grad();
    const auto base = memory_stats(x.device()).current_bytes;
    reset_peak_memory(x.device());
    const double t0 = now_ms();
    sum(encoder.forward(x)).backward();
    synchronize(x.device());
    const double t1 = now_ms();
    if (r > 0) times.push_back(t1 - t0);
    m.train_peak_mb = static_cast<double>(memory_stats(x.device()).peak_bytes - base) / 1e6;
  }
  m.train_ms = median(times);
  return m;
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
  CLI::App app{"Linformer vs Transformer: the paper's Table 3 on this machine"};
  std::string device_name = "cpu";
  std::vector<std::int64_t> ns = {512, 1024, 2048, 4096};
  std::vector<std::int64_t> ks = {128, 256};
  // RoBERTa-base's layer shape (as the paper); two layers keep the default run to minutes on a CPU.
  std::int64_t d_model = 768, heads = 12, d_ff = 3072, layers = 2, batch = 1;
  int reps = 3;
  bool paper_grid = false, train = true, scaling = true;
  std::int64_t scaling_k = 128;
  std::vector<std::int64_t> scaling_ns = {256, 512, 1024, 2048, 4096};
  std::string json_path = "benchmark_attention.json", png_path = "benchmark_attention_scaling.png";
  app.add_option("--device", device_name, "cpu or cuda");
  app.add_option("--n", ns, "sequence lengths")->delimiter(',');
  app.add_option("--k", ks, "projected sizes")->delimiter(',');
  app.add_option("--d-model", d_model);
  app.add_option("--heads", heads);
  app.add_option("--d-ff", d_ff);
  app.add_option("--layers", layers);
  app.add_option("--batch", batch);
  app.add_option("--reps", reps, "timed repetitions (median reported)");
  app.add_flag("--paper", paper_grid,
               "the paper's grid (n = 512..65536, k = 128..2048) and RoBERTa-base shape "
               "(d=768, 12 heads, ff=3072, 12 layers); for a GPU");
  app.add_flag("!--no-train", train, "skip forward+backward timing");
  app.add_flag("!--no-scaling", scaling, "skip the scaling view");
  app.add_option("--scaling-k", scaling_k);
  app.add_option("--scaling-n", scaling_ns)->delimiter(',');
  bool profile = false;
  app.add_flag("--profile", profile,
               "after the timings, print where one forward of each model spends its time "
               "(tinyformer::Profiler)");
  app.add_option("--json", json_path, "where to write the results");
  app.add_option("--png", png_path, "where to render the scaling plot (needs gnuplot)");
  CLI11_PARSE(app, argc, argv);

  try {
    const Device device = parse_device(device_name);
    if (paper_grid) {
      ns = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
      ks = {128, 256, 512, 1024, 2048};
      d_model = 768, heads = 12, d_ff = 3072, layers = 12;
    }
    std::printf(
        "device %s; encoder: %lld layers, d_model %lld, %lld heads, ff %lld, batch %lld, "
        "float32\nkernels: %s\n\n",
        device.str().c_str(), static_cast<long long>(layers), static_cast<long long>(d_model),
        static_cast<long long>(heads), static_cast<long long>(d_ff), static_cast<long long>(batch),
        runtime_info(device).c_str());
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
      enc->to(device);
      enc->eval();
      return enc;
    };

    nlohmann::json results = nlohmann::json::array();
    std::map<std::int64_t, Measurement> full;
    std::map<std::pair<std::int64_t, std::int64_t>, Measurement> lin;
    std::vector<std::string> profiles;
    for (std::int64_t n : ns) {
      Tensor x = randn({batch, n, d_model}, {.device = device});
      full[n] = measure(*make(n, 0), x, reps, train);
      if (profile) {
        profiles.push_back("n=" + std::to_string(n) + ", full attention, one forward:\n" +
                           profile_forward(*make(n, 0), x));
      }
      std::printf("n=%-6lld full        forward %9.2f ms  peak %8.1f MB", static_cast<long long>(n),
                  full[n].forward_ms, full[n].forward_peak_mb);
      if (train)
        std::printf("   fwd+bwd %9.2f ms  peak %8.1f MB", full[n].train_ms, full[n].train_peak_mb);
      std::printf("\n");
      results.push_back({{"n", n},
                         {"k", nullptr},
                         {"forward_ms", full[n].forward_ms},
                         {"forward_peak_mb", full[n].forward_peak_mb},
                         {"train_ms", full[n].train_ms},
                         {"train_peak_mb", full[n].train_peak_mb}});
      for (std::int64_t k : ks) {
        if (k >= n) continue;
        Measurement m = measure(*make(n, k), x, reps, train);
        lin[{n, k}] = m;
        if (profile) {
          profiles.push_back("n=" + std::to_string(n) + ", Linformer k=" + std::to_string(k) +
                             ", one forward:\n" + profile_forward(*make(n, k), x));
        }
        std::printf("n=%-6lld k=%-6lld    forward %9.2f ms  peak %8.1f MB",
                    static_cast<long long>(n), static_cast<long long>(k), m.forward_ms,
                    m.forward_peak_mb);
        if (train) std::printf("   fwd+bwd %9.2f ms  peak %8.1f MB", m.train_ms, m.train_peak_mb);
        std::printf("\n");
        results.push_back({{"n", n},
                           {"k", k},
                           {"forward_ms", m.forward_ms},
                           {"forward_peak_mb", m.forward_peak_mb},
                           {"train_ms", m.train_ms},
                           {"train_peak_mb", m.train_peak_mb}});
      }
    }

    auto table = [&](const char* title, auto value, bool with_paper) {
      std::printf("\n%s\n%-7s", title, "n \\ k");
      for (std::int64_t k : ks) std::printf(" | %-17lld", static_cast<long long>(k));
      std::printf("\n");
      for (std::int64_t n : ns) {
        std::printf("%-7lld", static_cast<long long>(n));
        for (std::int64_t k : ks) {
          auto it = lin.find({n, k});
          if (it == lin.end()) {
            std::printf(" | %-17s", "-");
            continue;
          }
          char cell[64];
          auto [speed, mem] = value(full[n], it->second);
          auto p = paper.count(n) && paper.at(n).count(k) ? paper.at(n).at(k) : std::pair{0.0, 0.0};
          if (with_paper && p.first > 0) {
            std::snprintf(cell, sizeof cell, "%.1fx (%.1fx) [%.1fx (%.0fx)]", speed, mem, p.first,
                          p.second);
          } else {
            std::snprintf(cell, sizeof cell, "%.1fx (%.1fx)", speed, mem);
          }
          std::printf(" | %-17s", cell);
        }
        std::printf("\n");
      }
    };
    table(
        "Inference: speed-up of Linformer over Transformer (memory saved), [paper's Table 3]",
        [](const Measurement& f, const Measurement& l) {
          return std::pair{f.forward_ms / l.forward_ms, f.forward_peak_mb / l.forward_peak_mb};
        },
        true);
    if (train) {
      table(
          "Training (forward+backward): speed-up (memory saved); the paper reports none",
          [](const Measurement& f, const Measurement& l) {
            return std::pair{f.train_ms / l.train_ms, f.train_peak_mb / l.train_peak_mb};
          },
          false);
    }

    nlohmann::json scaling_json;
    for (const std::string& p : profiles) std::printf("\n%s", p.c_str());
    if (scaling) {
      std::vector<double> xs, tf, tl, mf, ml;
      std::printf("\nScaling at k = %lld (forward):\n%-7s %12s %12s %12s %12s\n",
                  static_cast<long long>(scaling_k), "n", "full ms", "linformer ms", "full MB",
                  "linformer MB");
      for (std::int64_t n : scaling_ns) {
        if (n <= scaling_k) continue;
        Tensor x = randn({batch, n, d_model}, {.device = device});
        Measurement f = measure(*make(n, 0), x, reps, false);
        Measurement l = measure(*make(n, scaling_k), x, reps, false);
        xs.push_back(static_cast<double>(n));
        tf.push_back(f.forward_ms), tl.push_back(l.forward_ms);
        mf.push_back(f.forward_peak_mb), ml.push_back(l.forward_peak_mb);
        std::printf("%-7lld %12.2f %12.2f %12.1f %12.1f\n", static_cast<long long>(n), f.forward_ms,
                    l.forward_ms, f.forward_peak_mb, l.forward_peak_mb);
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
    std::ofstream(json_path) << nlohmann::json{{"device", device.str()}, {"d_model", d_model},
                                               {"heads", heads},         {"d_ff", d_ff},
                                               {"layers", layers},       {"batch", batch},
                                               {"results", results},     {"scaling", scaling_json}}
                                    .dump(2)
                             << "\n";
    std::printf("results written to %s\n", json_path.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "benchmark_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
