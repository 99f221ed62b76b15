// Tutorial step 9: what Linformer costs and buys. (a) The time and peak memory of one attention
// forward and backward against n, full attention and Linformer, with their log-log slopes; (b)
// the output error against k at several n: the paper's Theorem 1 (P R^T R V for a Gaussian R)
// and Linformer with a Gaussian, a learned and a mean-pooling E (Theorem 2); (c) the projection
// kinds side by side; (d) the spectrum of Linformer's own context mapping P' F. Writes
// tutorial_09_*.csv and .png. docs/tutorial/09-costs.md walks through it.
//
// --quick: smaller n, fewer repetitions and fitting steps (ctest runs this); the checks of the
// time slopes, which need large n and a quiet machine, are then reported as skipped. --smoke (the
// sanitizer build's ctest) is --quick with one timed run per size and 10 fitting steps.
#include <chrono>
#include <iomanip>
#include <map>
#include <sstream>

#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The least-squares slope of log(y) against log(x), over the points from index `first` on.
double loglog_slope(const std::vector<double>& x, const std::vector<double>& y, std::size_t first) {
  double mx = 0, my = 0;
  const double count = static_cast<double>(x.size() - first);
  for (std::size_t i = first; i < x.size(); ++i) {
    mx += std::log(x[i]) / count;
    my += std::log(y[i]) / count;
  }
  double sxy = 0, sxx = 0;
  for (std::size_t i = first; i < x.size(); ++i) {
    sxy += (std::log(x[i]) - mx) * (std::log(y[i]) - my);
    sxx += (std::log(x[i]) - mx) * (std::log(x[i]) - mx);
  }
  return sxy / sxx;
}

// |a - b|_F / |b|_F: the error of an approximation a of b, relative to b's size.
double relative_error(const Tensor& a, const Tensor& b) {
  const Tensor d = a - b;
  return std::sqrt(sum(d * d).item<double>() / sum(b * b).item<double>());
}

bool has_flag(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == flag) return true;
  return false;
}

// --- (a) Time and memory against n. ---

struct Cost {
  double ms = INFINITY;  // the fastest of the repetitions
  double mb = 0;         // peak bytes above what was held before, in MB
};

// One forward and backward of `layer` on x with upstream gradient g: the fastest of the timed
// runs after one warm-up (at least `runs` of them, and more until `budget_s` seconds have passed:
// the fastest run is the one least disturbed by other work on the machine), and the allocator's
// peak (memory_stats) above the bytes held before.
Cost forward_backward(nn::Attention& layer, const Tensor& x, const Tensor& g, int runs,
                      double budget_s) {
  Cost cost;
  const auto begin = Clock::now();
  for (int r = 0; r <= runs || seconds_since(begin) < budget_s; ++r) {
    for (const Tensor& p : layer.parameters()) p.zero_grad();
    const std::int64_t base = memory_stats().current_bytes;
    reset_peak_memory();
    const auto start = Clock::now();
    layer.forward(x).backward(g);
    const double ms = seconds_since(start) * 1e3;
    cost.mb = std::max(cost.mb, static_cast<double>(memory_stats().peak_bytes - base) / 1e6);
    if (r > 0) cost.ms = std::min(cost.ms, ms);
  }
  return cost;
}

struct Scaling {
  std::vector<double> n;
  std::vector<Cost> full, linformer;
  double full_time = 0, linformer_time = 0, full_memory = 0, linformer_memory = 0;  // slopes
};

Scaling measure_scaling(bool quick, bool smoke, std::int64_t k) {
  const std::int64_t batch = 4, d_model = 64, heads = 2;
  const std::vector<std::int64_t> ns = quick
                                           ? std::vector<std::int64_t>{128, 256, 512, 1024}
                                           : std::vector<std::int64_t>{256, 512, 1024, 2048, 4096};
  const int runs = smoke ? 1 : quick ? 2 : 3;
  const double budget_s = smoke ? 0 : quick ? 0.02 : 0.4;
  Scaling s;
  std::printf(
      "(a) one attention forward + backward, batch %lld, d_model %lld, %lld heads, "
      "Linformer k = %lld\n",
      static_cast<long long>(batch), static_cast<long long>(d_model), static_cast<long long>(heads),
      static_cast<long long>(k));
  std::printf("  %6s %12s %12s %12s %12s %14s\n", "n", "full ms", "Linformer ms", "full MB",
              "Linformer MB", "full m-e MB");
  for (std::int64_t n : ns) {
    const Tensor x = randn({batch, n, d_model}), g = randn({batch, n, d_model});
    nn::MultiHeadAttention full(d_model, heads);
    const nn::ProjectionSpec spec{.k = k, .max_seq_len = n, .head_dim = d_model / heads};
    nn::LinformerAttention linformer(d_model, heads, nn::make_projection("linear", spec),
                                     nn::make_projection("linear", spec));
    // The textbook costs: both layers keep their probabilities (P, [B, H, n, n] or
    // [B, H, n, k]) for the backward. The default memory-efficient kernel keeps neither; the
    // last column shows what full attention costs on it.
    full.set_kernel(AttentionKernel::materialized);
    linformer.set_kernel(AttentionKernel::materialized);
    nn::MultiHeadAttention efficient(d_model, heads);
    s.n.push_back(static_cast<double>(n));
    s.full.push_back(forward_backward(full, x, g, runs, budget_s));
    s.linformer.push_back(forward_backward(linformer, x, g, runs, budget_s));
    const Cost memory_efficient = forward_backward(efficient, x, g, runs, budget_s);
    std::printf("  %6lld %12.2f %12.2f %12.2f %12.2f %14.2f\n", static_cast<long long>(n),
                s.full.back().ms, s.linformer.back().ms, s.full.back().mb, s.linformer.back().mb,
                memory_efficient.mb);
  }
  // The slopes over the three largest n, where the leading term dominates.
  const std::size_t first = ns.size() - 3;
  auto series = [](const std::vector<Cost>& c, double Cost::*field) {
    std::vector<double> v;
    for (const Cost& x : c) v.push_back(x.*field);
    return v;
  };
  s.full_time = loglog_slope(s.n, series(s.full, &Cost::ms), first);
  s.linformer_time = loglog_slope(s.n, series(s.linformer, &Cost::ms), first);
  s.full_memory = loglog_slope(s.n, series(s.full, &Cost::mb), first);
  s.linformer_memory = loglog_slope(s.n, series(s.linformer, &Cost::mb), first);
  std::printf(
      "  log-log slopes over the three largest n: time %.2f (full), %.2f (Linformer); "
      "memory %.2f (full), %.2f (Linformer)\n",
      s.full_time, s.linformer_time, s.full_memory, s.linformer_memory);
  return s;
}

// --- (b) The error against k at several n. ---

// B smooth signals of d features: per feature, four sinusoids of 1 to 4 periods per sequence
// with random amplitudes (the f-th divided by f) and phases. The periods are fractions of the
// sequence, so the same signals can be sampled at any length n.
struct Signals {
  std::int64_t batch = 0, features = 0;
  std::vector<float> amplitude, phase;  // [B, 4, d]
};

Signals random_signals(std::int64_t batch, std::int64_t features) {
  return {batch, features, randn({batch, 4, features}).to_vector<float>(),
          rand({batch, 4, features}).to_vector<float>()};
}

// The signals sampled at n positions, plus independent noise of standard deviation `noise`:
// [B, n, d]. A longer sequence is the same signal sampled more finely.
Tensor sample(const Signals& s, std::int64_t n, double noise) {
  const std::int64_t d = s.features;
  std::vector<float> x(static_cast<std::size_t>(s.batch * n * d), 0.0f);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t f = 0; f < 4; ++f)
      for (std::int64_t c = 0; c < d; ++c) {
        const auto i = static_cast<std::size_t>((b * 4 + f) * d + c);
        for (std::int64_t t = 0; t < n; ++t) {
          x[static_cast<std::size_t>((b * n + t) * d + c)] +=
              s.amplitude[i] / static_cast<float>(f + 1) *
              std::sin(6.2831853f *
                       (static_cast<float>((f + 1) * t) / static_cast<float>(n) + s.phase[i]));
        }
      }
  return from<float>(x, {s.batch, n, d}) + randn({s.batch, n, d}) * noise;
}

// One head's queries, keys and values of a few batches of smooth sequences at length n, with full
// attention's output as the target; the last batch is held out to measure errors on.
struct Task {
  std::vector<Tensor> query, key, value, target;  // [B, n, d] each
  Tensor probs;                                   // P of the held-out batch, [B, n, n]
  std::size_t train() const { return query.size() - 1; }
  std::size_t held_out() const { return query.size() - 1; }
};

// The layer's query, key and value weights, and the signals of its batches (the same at every n).
struct Layer {
  Tensor wq, wk, wv;  // [d, d]
  std::vector<Signals> batches;
};

// Full attention on the layer's batches sampled at length n: 16 training batches (4 with
// --quick) and the held-out batch, last.
Task make_task(const Layer& w, std::int64_t n, bool quick) {
  Task t;
  std::vector<const Signals*> used;
  for (std::size_t b = 0; b + 1 < w.batches.size() && b < (quick ? 4u : 16u); ++b)
    used.push_back(&w.batches[b]);
  used.push_back(&w.batches.back());
  for (const Signals* signals : used) {
    const Tensor x = sample(*signals, n, 0.3);
    t.query.push_back(matmul(x, w.wq));
    t.key.push_back(matmul(x, w.wk));
    t.value.push_back(matmul(x, w.wv));
    const bool held_out = signals == used.back();
    t.target.push_back(fused_attention(t.query.back(), t.key.back(), t.value.back(), {},
                                       {.probs = held_out ? &t.probs : nullptr}));
  }
  return t;
}

// Linformer's output with E = F = e ([k, n]): softmax(Q (E K)^T / sqrt(d)) (E V).
Tensor linformer_output(const Task& t, std::size_t batch, const Tensor& e) {
  return fused_attention(t.query[batch], matmul(e, t.key[batch]), matmul(e, t.value[batch]));
}

// The k x n mean-pooling matrix: row r averages window r (nn::pool_window).
Tensor pooling_matrix(std::int64_t k, std::int64_t n) {
  std::vector<float> e(static_cast<std::size_t>(k * n), 0.0f);
  for (std::int64_t r = 0; r < k; ++r) {
    const auto [start, end] = nn::pool_window(r, n, k);
    for (std::int64_t j = start; j < end; ++j)
      e[static_cast<std::size_t>(r * n + j)] = 1.0f / static_cast<float>(end - start);
  }
  return from<float>(e, {k, n});
}

// A Gaussian E with N(0, 1/n) entries: each summary row a random mixture of the n rows with the
// size of one row, so that the scores keep step 1's scale.
Tensor gaussian_matrix(std::int64_t k, std::int64_t n) {
  return randn({k, n}) / std::sqrt(static_cast<double>(n));
}

// E fitted to reproduce full attention: Adam on the mean squared error of Linformer's output over
// the task's training batches, `steps` steps from `start`.
Tensor fit(const Task& t, const Tensor& start, int steps) {
  Tensor e = start.clone();
  e.requires_grad_();
  nn::optim::Adam optimizer({e}, {.lr = 1.0 / static_cast<double>(start.size(1))});
  for (int step = 0; step < steps; ++step) {
    const std::size_t b = static_cast<std::size_t>(step) % t.train();
    const Tensor d = linformer_output(t, b, e) - t.target[b];
    const Tensor loss = mean(d * d);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  return e.detach();
}

// Theorem 1's approximation of P V: P R^T R V with R [k, n] of N(0, 1/k) entries.
double theorem1_error(const Task& t, std::int64_t k) {
  const std::size_t h = t.held_out();
  const Tensor r = randn({k, t.probs.size(-1)}) / std::sqrt(static_cast<double>(k));
  const Tensor approx = matmul(matmul(t.probs, r.transpose(0, 1)), matmul(r, t.value[h]));
  return relative_error(approx, t.target[h]);
}

struct ErrorTable {
  std::vector<std::int64_t> ns, ks;
  // approximant -> [n index][k index]
  std::map<std::string, std::vector<std::vector<double>>> error;
};

const char* const kApproximants[] = {"theorem1", "gaussian", "learned", "mean"};

ErrorTable measure_errors(bool quick, const Layer& w, int fit_steps) {
  ErrorTable table;
  table.ns =
      quick ? std::vector<std::int64_t>{128, 256} : std::vector<std::int64_t>{256, 512, 1024, 2048};
  table.ks =
      quick ? std::vector<std::int64_t>{8, 16, 32} : std::vector<std::int64_t>{8, 16, 32, 64, 128};
  const int draws = 8;  // the random approximants are averaged over draws
  std::printf(
      "\n(b) relative error |O' - O|_F / |O|_F against full attention's output O, one head "
      "of width %lld,\n    the same smooth sequences at every n, learned E: %d Adam "
      "steps from the Gaussian\n",
      static_cast<long long>(w.wq.size(0)), fit_steps);
  std::printf("  %6s %5s %10s %10s %10s %10s\n", "n", "k", "theorem 1", "Gaussian", "learned",
              "mean");
  for (const char* a : kApproximants) table.error[a].resize(table.ns.size());
  for (std::size_t i = 0; i < table.ns.size(); ++i) {
    const std::int64_t n = table.ns[i];
    const Task task = make_task(w, n, quick);
    const std::size_t h = task.held_out();
    for (std::int64_t k : table.ks) {
      double t1 = 0, gauss = 0, fitted = 0, pooled = 0;
      Tensor first_gaussian;
      {
        NoGradGuard no_grad;
        for (int draw = 0; draw < draws; ++draw) {
          t1 += theorem1_error(task, k) / draws;
          const Tensor e = gaussian_matrix(k, n);
          if (draw == 0) first_gaussian = e;
          gauss += relative_error(linformer_output(task, h, e), task.target[h]) / draws;
        }
        pooled = relative_error(linformer_output(task, h, pooling_matrix(k, n)), task.target[h]);
      }
      const Tensor learned = fit(task, first_gaussian, fit_steps);
      {
        NoGradGuard no_grad;
        fitted = relative_error(linformer_output(task, h, learned), task.target[h]);
      }
      table.error["theorem1"][i].push_back(t1);
      table.error["gaussian"][i].push_back(gauss);
      table.error["learned"][i].push_back(fitted);
      table.error["mean"][i].push_back(pooled);
      std::printf("  %6lld %5lld %10.4f %10.4f %10.4f %10.4f\n", static_cast<long long>(n),
                  static_cast<long long>(k), t1, gauss, fitted, pooled);
    }
  }
  return table;
}

// --- (c) The projection kinds side by side. ---

struct KindRow {
  std::string name;  // as printed, and as the CSV file names it
  std::int64_t parameters = 0;
  double error_built = 0, error_fitted = -1, ms = 0;
};

std::vector<KindRow> compare_kinds(const Task& task, std::int64_t k, int fit_steps,
                                   Tensor& learned_e) {
  const std::int64_t n = task.query[0].size(1), d = task.query[0].size(2);
  const std::size_t h = task.held_out();
  std::printf("\n(c) the projection kinds at n = %lld, k = %lld (relative error as in (b))\n",
              static_cast<long long>(n), static_cast<long long>(k));
  std::printf("  %-18s %10s %12s %12s %14s\n", "kind", "parameters", "error", "fitted",
              "fwd+bwd ms");
  // [B, n, d] -> [B, 1, n, d]: one head, as the projections take it.
  auto head = [](const Tensor& t) { return t.unsqueeze(1); };
  auto output = [&](const nn::Projection& p, std::size_t b) {
    return fused_attention(head(task.query[b]), p.forward(head(task.key[b])),
                           p.forward(head(task.value[b])))
        .squeeze(1);
  };
  struct Kind {
    std::string name, registered;
    nn::ProjectionInit init;
    double lr;
  };
  const Kind kinds[] = {{"mean", "mean", nn::ProjectionInit::pooling, 0},
                        {"max", "max", nn::ProjectionInit::pooling, 0},
                        {"linear_pooling", "linear", nn::ProjectionInit::pooling, 0.1 / n},
                        {"linear_normal", "linear", nn::ProjectionInit::normal, 1.0 / n},
                        {"conv", "conv", nn::ProjectionInit::pooling, 1e-3}};
  std::vector<KindRow> rows;
  for (const Kind& kind : kinds) {
    auto p = nn::make_projection(kind.registered,
                                 {.k = k, .max_seq_len = n, .head_dim = d, .init = kind.init});
    KindRow row{.name = kind.name, .parameters = p->num_parameters()};
    {
      NoGradGuard no_grad;
      row.error_built = relative_error(output(*p, h), task.target[h]);
    }
    // The time of one forward and backward through the projection and attention.
    const Tensor g = randn(task.target[h].shape());
    double best = INFINITY;
    for (int r = 0; r < 4; ++r) {
      Tensor k_in = head(task.key[h]).detach(), v_in = head(task.value[h]).detach();
      k_in.requires_grad_();
      v_in.requires_grad_();
      const auto start = Clock::now();
      fused_attention(head(task.query[h]), p->forward(k_in), p->forward(v_in))
          .squeeze(1)
          .backward(g);
      if (r > 0) best = std::min(best, seconds_since(start) * 1e3);
    }
    row.ms = best;
    if (row.parameters > 0) {
      for (const Tensor& t : p->parameters()) t.zero_grad();
      nn::optim::Adam optimizer(p->parameters(), {.lr = kind.lr});
      for (int step = 0; step < fit_steps; ++step) {
        const std::size_t b = static_cast<std::size_t>(step) % task.train();
        const Tensor diff = output(*p, b) - task.target[b];
        const Tensor loss = mean(diff * diff);
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
      }
      NoGradGuard no_grad;
      row.error_fitted = relative_error(output(*p, h), task.target[h]);
      if (kind.name == "linear_pooling") learned_e = p->parameters()[0].detach().select(0, 0);
    }
    std::printf("  %-18s %10lld %12.4f", row.name.c_str(), static_cast<long long>(row.parameters),
                row.error_built);
    if (row.error_fitted >= 0) {
      std::printf(" %12.4f", row.error_fitted);
    } else {
      std::printf(" %12s", "-");
    }
    std::printf(" %14.3f\n", row.ms);
    rows.push_back(row);
  }
  return rows;
}

// --- (d) The spectrum of P' F. ---

struct Spectra {
  std::vector<double> full, mean, learned, gaussian;          // cumulative shares, index 1 .. n
  double mean_tail = 0, learned_tail = 0, gaussian_tail = 0;  // s_{k+1} / s_1
};

Spectra context_spectra(const Task& task, std::int64_t k, const Tensor& learned_e) {
  const std::size_t h = task.held_out();
  const Tensor q = task.query[h].to(kFloat64), key = task.key[h].to(kFloat64);
  const std::int64_t n = q.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  Spectra s;
  auto spectrum = [&](const Tensor& m) {  // [B, n, n] -> the averaged spectrum
    return nn::attention_spectrum(m.unsqueeze(1))[0];
  };
  s.full = spectrum(task.probs.to(kFloat64)).cumulative;
  // Linformer's n x k mapping P' = softmax(Q (E K)^T / sqrt(d)), times F = E: an n x n matrix
  // of rank at most k, the counterpart of P.
  auto mapping = [&](const Tensor& e, std::vector<double>& cumulative, double& tail) {
    const Tensor e64 = e.to(kFloat64);
    const Tensor p_small = softmax(matmul(q, matmul(e64, key).transpose(-2, -1)) * scale, -1);
    const nn::HeadSpectrum sp = spectrum(matmul(p_small, e64));
    cumulative = sp.cumulative;
    tail = sp.singular_values[static_cast<std::size_t>(k)] / sp.singular_values[0];
  };
  mapping(pooling_matrix(k, n), s.mean, s.mean_tail);
  mapping(learned_e, s.learned, s.learned_tail);
  mapping(gaussian_matrix(k, n), s.gaussian, s.gaussian_tail);
  const auto at = [&](const std::vector<double>& c, std::int64_t i) {
    return c[static_cast<std::size_t>(i - 1)];
  };
  std::printf(
      "\n(d) the spectrum of P (n x n) and of Linformer's P' F (n x k times k x n), "
      "n = %lld, k = %lld:\n  share of the first i singular values\n",
      static_cast<long long>(n), static_cast<long long>(k));
  std::printf("  %-22s %8s %8s %8s   s_{k+1} / s_1\n", "", "i = 1", "i = k/4", "i = k");
  std::printf("  %-22s %8.3f %8.3f %8.3f\n", "full attention P", at(s.full, 1), at(s.full, k / 4),
              at(s.full, k));
  std::printf("  %-22s %8.3f %8.3f %8.3f   %.2g\n", "P' F, mean pooling", at(s.mean, 1),
              at(s.mean, k / 4), at(s.mean, k), s.mean_tail);
  std::printf("  %-22s %8.3f %8.3f %8.3f   %.2g\n", "P' F, learned", at(s.learned, 1),
              at(s.learned, k / 4), at(s.learned, k), s.learned_tail);
  std::printf("  %-22s %8.3f %8.3f %8.3f   %.2g\n", "P' F, Gaussian", at(s.gaussian, 1),
              at(s.gaussian, k / 4), at(s.gaussian, k), s.gaussian_tail);
  return s;
}

// --- The figures. ---

void write_scaling(const std::string& dir, const Scaling& s, std::int64_t k) {
  const std::string csv = dir + "/tutorial_09_scaling.csv";
  {
    std::ofstream out(csv);
    out << std::setprecision(8);
    out << "n,full_ms,linformer_ms,full_mb,linformer_mb\n";
    for (std::size_t i = 0; i < s.n.size(); ++i) {
      out << s.n[i] << "," << s.full[i].ms << "," << s.linformer[i].ms << "," << s.full[i].mb << ","
          << s.linformer[i].mb << "\n";
    }
  }
  {
    std::ofstream out(dir + "/tutorial_09_slopes.csv");
    out << std::setprecision(8);
    out << "series,slope\nfull_time," << s.full_time << "\nlinformer_time," << s.linformer_time
        << "\nfull_memory," << s.full_memory << "\nlinformer_memory," << s.linformer_memory << "\n";
  }
  // The fitted lines pass through the points' centre of mass (in log-log) over the fitted range.
  auto line = [&](const std::vector<Cost>& c, double Cost::*field, double slope) {
    double mx = 0, my = 0;
    const std::size_t first = s.n.size() - 3;
    for (std::size_t i = first; i < s.n.size(); ++i) {
      mx += std::log(s.n[i]) / 3;
      my += std::log(c[i].*field) / 3;
    }
    std::ostringstream f;
    f << "exp(" << my << " + " << slope << " * (log(x) - " << mx << "))";
    return f.str();
  };
  std::ostringstream gp;
  char slope_text[4][64];
  std::snprintf(slope_text[0], 64, "full attention (slope %.2f)", s.full_time);
  std::snprintf(slope_text[1], 64, "Linformer, k = %lld (slope %.2f)", static_cast<long long>(k),
                s.linformer_time);
  std::snprintf(slope_text[2], 64, "full attention (slope %.2f)", s.full_memory);
  std::snprintf(slope_text[3], 64, "Linformer, k = %lld (slope %.2f)", static_cast<long long>(k),
                s.linformer_memory);
  gp << "set datafile separator ','\nset logscale xy\nset key top left\n"
     << "set xrange [" << s.n.front() / 1.25 << ":" << s.n.back() * 1.25 << "]\n"
     << "set xtics (" <<
      [&] {
        std::string t;
        for (double n : s.n) t += (t.empty() ? "" : ", ") + std::to_string(static_cast<int>(n));
        return t;
      }()
     << ")\n"
     << "set xlabel 'sequence length n'\n"
     << "set multiplot layout 1,2 title 'One attention layer, forward + backward: cost against n "
        "(dashed: least-squares fit over the three largest n)'\n"
     << "set title 'time'\nset ylabel 'ms (fastest of the runs)'\n"
     << "plot '" << csv << "' every ::1 using 1:2 with points pt 7 ps 1.3 lc 1 title '"
     << slope_text[0] << "', \\\n  '' every ::1 using 1:3 with points pt 5 ps 1.3 lc 2 title '"
     << slope_text[1] << "', \\\n  " << line(s.full, &Cost::ms, s.full_time)
     << " with lines dt 2 lc 1 notitle, \\\n  " << line(s.linformer, &Cost::ms, s.linformer_time)
     << " with lines dt 2 lc 2 notitle\n"
     << "set title 'peak memory'\nset ylabel 'MB above the inputs (allocator peak)'\n"
     << "plot '" << csv << "' every ::1 using 1:4 with points pt 7 ps 1.3 lc 1 title '"
     << slope_text[2] << "', \\\n  '' every ::1 using 1:5 with points pt 5 ps 1.3 lc 2 title '"
     << slope_text[3] << "', \\\n  " << line(s.full, &Cost::mb, s.full_memory)
     << " with lines dt 2 lc 1 notitle, \\\n  " << line(s.linformer, &Cost::mb, s.linformer_memory)
     << " with lines dt 2 lc 2 notitle\n"
     << "unset multiplot\n";
  tutorial::plot(dir + "/tutorial_09_scaling.png", gp.str(), 1100, 480);
}

void write_errors(const std::string& dir, const ErrorTable& t) {
  const std::string csv = dir + "/tutorial_09_error.csv";
  double lo = INFINITY, hi = 0;
  {
    std::ofstream out(csv);
    out << std::setprecision(8);
    out << "k";
    for (const char* a : kApproximants)
      for (std::int64_t n : t.ns) out << "," << a << "_n" << n;
    out << ",inverse_sqrt_k\n";
    for (std::size_t j = 0; j < t.ks.size(); ++j) {
      out << t.ks[j];
      for (const char* a : kApproximants) {
        for (std::size_t i = 0; i < t.ns.size(); ++i) {
          const double e = t.error.at(a)[i][j];
          out << "," << e;
          lo = std::min(lo, e);
          hi = std::max(hi, e);
        }
      }
      // 1 / sqrt(k) through Theorem 1's mean error at the smallest k.
      double first = 0;
      for (std::size_t i = 0; i < t.ns.size(); ++i) first += t.error.at("theorem1")[i][0];
      first /= static_cast<double>(t.ns.size());
      out << "," << first * std::sqrt(static_cast<double>(t.ks[0]) / static_cast<double>(t.ks[j]))
          << "\n";
    }
  }
  const char* titles[] = {"Theorem 1: P R^T R V, Gaussian R", "Linformer, Gaussian E",
                          "Linformer, learned E (from the Gaussian)", "Linformer, mean-pooling E"};
  std::ostringstream gp;
  gp << "set datafile separator ','\nset logscale xy\nset key bottom left font ',9'\n"
     << "set xrange [" << static_cast<double>(t.ks.front()) / 1.3 << ":"
     << static_cast<double>(t.ks.back()) * 1.3 << "]\n"
     << "set yrange [" << lo / 1.5 << ":" << hi * 1.5 << "]\n"
     << "set xtics (" <<
      [&] {
        std::string s;
        for (std::int64_t k : t.ks) s += (s.empty() ? "" : ", ") + std::to_string(k);
        return s;
      }()
     << ")\n"
     << "set xlabel 'k'\nset ylabel '|O'' - O|_F / |O|_F'\n"
     << "set multiplot layout 2,2 title 'Error of attention''s output against k, at four n "
        "(one scale for all panels)'\n";
  for (std::size_t a = 0; a < 4; ++a) {
    gp << "set title '" << titles[a] << "'\nplot ";
    for (std::size_t i = 0; i < t.ns.size(); ++i) {
      gp << (i ? ", \\\n  " : "") << "'" << csv << "' every ::1 using 1:" << 2 + a * t.ns.size() + i
         << " with linespoints lw 2 pt 7 lc " << i + 1 << " title 'n = " << t.ns[i] << "'";
    }
    if (a == 0) {
      gp << ", \\\n  '' every ::1 using 1:" << 2 + 4 * t.ns.size()
         << " with lines dt 2 lc rgb 'gray40' title 'c / sqrt(k)'";
    }
    gp << "\n";
  }
  gp << "unset multiplot\n";
  tutorial::plot(dir + "/tutorial_09_error.png", gp.str(), 1000, 760);
}

void write_kinds(const std::string& dir, const std::vector<KindRow>& rows) {
  std::ofstream out(dir + "/tutorial_09_kinds.csv");
  out << std::setprecision(8);
  out << "kind,parameters,error,fitted,ms\n";
  for (const KindRow& r : rows) {
    out << r.name << "," << r.parameters << "," << r.error_built << ",";
    if (r.error_fitted >= 0) out << r.error_fitted;
    out << "," << r.ms << "\n";
  }
}

void write_spectra(const std::string& dir, const Spectra& s, std::int64_t k) {
  const std::string csv = dir + "/tutorial_09_spectrum.csv";
  {
    std::ofstream out(csv);
    out << std::setprecision(8);
    out << "index,full,mean,learned,gaussian\n";
    for (std::size_t i = 0; i < s.full.size(); ++i) {
      out << i + 1 << "," << s.full[i] << "," << s.mean[i] << "," << s.learned[i] << ","
          << s.gaussian[i] << "\n";
    }
  }
  std::ostringstream gp;
  gp << "set datafile separator ','\nset logscale x\nset key bottom right\n"
     << "set xrange [1:" << s.full.size() << "]\nset yrange [0:1.02]\n"
     << "set title 'Spectra of full attention''s P and of Linformer''s P'' F (n = " << s.full.size()
     << ", k = " << k << ")'\n"
     << "set xlabel 'singular value index i (log scale)'\n"
     << "set ylabel 'share of the first i singular values'\n"
     << "set arrow from " << k << ", graph 0 to " << k
     << ", graph 1 nohead dt 3 lw 1.5 lc rgb 'gray40'\n"
     << "set label 'i = k = " << k << "' at " << k << ", graph 0.05 offset 0.5,0\n"
     << "plot '" << csv
     << "' every ::1 using 1:2 with lines lw 2 lc 1 title 'full attention P', \\\n"
     << "  '' every ::1 using 1:3 with lines lw 2 lc 4 title 'P'' F, mean-pooling E', \\\n"
     << "  '' every ::1 using 1:4 with lines lw 2 lc 3 title 'P'' F, E learned from pooling', \\\n"
     << "  '' every ::1 using 1:5 with lines lw 2 lc 2 title 'P'' F, Gaussian E'\n";
  tutorial::plot(dir + "/tutorial_09_spectrum.png", gp.str());
}

}  // namespace

int main(int argc, char** argv) {
  manual_seed(9);
  const bool smoke = tutorial::smoke(argc, argv);
  const bool quick = smoke || has_flag(argc, argv, "--quick");
  const std::string dir = tutorial::figure_dir(argc, argv);
  const auto start = Clock::now();
  std::printf("Step 9: what Linformer costs and buys%s\n", smoke   ? " (--smoke)"
                                                           : quick ? " (--quick)"
                                                                   : "");

  // (a)
  const std::int64_t k_cost = 64;
  const Scaling scaling = measure_scaling(quick, smoke, k_cost);
  auto timing_check = [&](bool ok, const std::string& claim) {
    if (quick) {
      std::printf("  [skipped] %s (%s: small n)\n", claim.c_str(), smoke ? "--smoke" : "--quick");
    } else {
      check(ok, claim);
    }
  };
  check(scaling.full_memory > 1.7 && scaling.full_memory < 2.1,
        "full attention's peak memory grows as n^2 (slope 1.7 to 2.1)");
  check(scaling.linformer_memory > 0.9 && scaling.linformer_memory < 1.1,
        "Linformer's peak memory grows as n (slope 0.9 to 1.1)");
  timing_check(scaling.full_time > 1.5 && scaling.full_time < 2.5,
               "full attention's time grows as n^2 (slope 1.5 to 2.5)");
  // Linformer's work is linear in n, but at n of a few thousand its tensors outgrow the caches
  // and each element costs more: the measured slope lies somewhat above 1.
  timing_check(scaling.linformer_time > 0.6 && scaling.linformer_time < 1.5,
               "Linformer's time grows about as n (slope 0.6 to 1.5)");
  timing_check(scaling.full_time - scaling.linformer_time > 0.5,
               "full attention's time slope exceeds Linformer's by more than 0.5");
  check(scaling.linformer.back().mb * 4 < scaling.full.back().mb,
        "at the largest n Linformer needs under a quarter of full attention's memory");

  // (b)
  const std::int64_t d = 32;
  Layer layer{randn({d, d}) / std::sqrt(static_cast<double>(d)),
              randn({d, d}) / std::sqrt(static_cast<double>(d)),
              randn({d, d}) / std::sqrt(static_cast<double>(d)),
              {}};
  // 16 training batches of 4 sequences, and a held-out batch of 8.
  for (int b = 0; b < 16; ++b) layer.batches.push_back(random_signals(4, d));
  layer.batches.push_back(random_signals(8, d));
  const int fit_steps = smoke ? 10 : quick ? 30 : 100;
  const ErrorTable errors = measure_errors(quick, layer, fit_steps);
  const std::size_t last_k = errors.ks.size() - 1;
  auto every_n = [&](const std::string& a, auto&& predicate) {
    bool ok = true;
    for (std::size_t i = 0; i < errors.ns.size(); ++i) ok = ok && predicate(errors.error.at(a)[i]);
    return ok;
  };
  // At fixed k: the largest error over n against the smallest.
  auto spread_in_n = [&](const std::string& a) {
    double worst = 1;
    for (std::size_t j = 0; j < errors.ks.size(); ++j) {
      double lo = INFINITY, hi = 0;
      for (std::size_t i = 0; i < errors.ns.size(); ++i) {
        lo = std::min(lo, errors.error.at(a)[i][j]);
        hi = std::max(hi, errors.error.at(a)[i][j]);
      }
      worst = std::max(worst, hi / lo);
    }
    return worst;
  };
  const double shrink = quick ? 1.6 : 2.5;  // sqrt(k_max / k_min) is 2 (quick) or 4
  check(
      every_n("theorem1", [&](const std::vector<double>& e) { return e[0] > shrink * e[last_k]; }),
      "Theorem 1: at every n the error falls with k, about as 1/sqrt(k)");
  check(spread_in_n("theorem1") < 1.5,
        "Theorem 1: at every k the error is the same for every n (within a factor 1.5)");
  for (const std::string a : {"gaussian", "learned", "mean"}) {
    check(
        every_n(a, [&](const std::vector<double>& e) { return e[0] > e[last_k]; }),
        "Linformer, " + a + " E: at every n the error at the largest k is below the smallest k's");
  }
  check(spread_in_n("learned") < 2 && spread_in_n("mean") < 2,
        "learned and mean-pooling E: at every k the error changes with n by under a factor 2");
  bool learned_better = true;
  for (std::size_t i = 0; i < errors.ns.size(); ++i)
    for (std::size_t j = 0; j < errors.ks.size(); ++j)
      learned_better =
          learned_better && errors.error.at("learned")[i][j] < errors.error.at("gaussian")[i][j];
  check(learned_better, "fitting E improves on the Gaussian it starts from, at every n and k");

  // (c) and (d) on one task.
  const std::int64_t n_kinds = quick ? 128 : 512, k_kinds = quick ? 16 : 32;
  const Task task = make_task(layer, n_kinds, quick);
  Tensor learned_e;
  const std::vector<KindRow> kinds = compare_kinds(task, k_kinds, fit_steps, learned_e);
  std::map<std::string, KindRow> by_name;
  for (const KindRow& r : kinds) by_name[r.name] = r;
  check(std::abs(by_name["linear_pooling"].error_built - by_name["mean"].error_built) < 1e-5,
        "the linear kind built with its pooling start gives mean pooling's output");
  check(by_name["mean"].error_built < by_name["max"].error_built,
        "on smooth sequences a window's mean summarises it better than its max");
  check(by_name["linear_pooling"].error_fitted < by_name["linear_pooling"].error_built &&
            by_name["linear_normal"].error_fitted < by_name["linear_normal"].error_built,
        "fitting lowers the linear kind's error, from either start");

  const Spectra spectra = context_spectra(task, k_kinds, learned_e);
  check(spectra.mean_tail < 1e-10 && spectra.learned_tail < 1e-10 && spectra.gaussian_tail < 1e-10,
        "P' F has at most k nonzero singular values, whatever E");
  check(spectra.full[static_cast<std::size_t>(k_kinds) - 1] < 0.999,
        "full attention's P is not of rank k: its first k values carry less than all");

  write_scaling(dir, scaling, k_cost);
  write_errors(dir, errors);
  write_kinds(dir, kinds);
  write_spectra(dir, spectra, k_kinds);
  std::printf("%.1f s in all\n", seconds_since(start));
  return tutorial::finish();
}
