// Interleaved timing with a stop rule on paired ratios (bench_timing.h says why).
#include "bench_timing.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace bench {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string format(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// "2.3%", or "n/a" when not known.
std::string percent(double v) {
  return std::isnan(v) ? std::string("n/a") : format("%.1f%%", 100 * v);
}

nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// The values whose flag is set, or, when fewer than kMinQuietRounds are, all of them (or none,
// with `all_if_few` false).
std::vector<double> counted_values(const std::vector<double>& values,
                                   const std::vector<bool>& flags, bool all_if_few = true) {
  std::vector<double> kept;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (flags.at(i)) kept.push_back(values[i]);
  }
  if (static_cast<int>(kept.size()) >= kMinQuietRounds) return kept;
  return all_if_few ? values : std::vector<double>{};
}

}  // namespace

std::shared_ptr<Probe> core_probe(int trips) {
  auto probe = std::make_shared<Probe>();
  probe->what = "a cache line's round trip between two threads, ns";
  // The line the two threads hand each other, alone in its cache line.
  struct alignas(64) Line {
    std::atomic<int> turn{0};
  };
  auto line = std::make_shared<Line>();
  probe->measure = [trips, line] {
    if (omp_get_max_threads() < 2) return 0.0;
    // At most this long: two threads sharing one core hand the line over once per time slice.
    constexpr double kLimitS = 0.005;
    double ns = 0;
    line->turn.store(0);
#pragma omp parallel num_threads(2)
    {
      // A team of one (the runtime may give fewer threads than asked): nothing to measure.
      const int me = omp_get_num_threads() < 2 ? -1 : omp_get_thread_num();
#pragma omp barrier
      if (me == 0) {
        // Thread 0 passes the line on with an odd turn and waits for the next even one; after
        // `trips` round trips (or the time limit) it passes -1, which ends thread 1's loop.
        const double t0 = steady_seconds();
        int done = 0;
        for (;; ++done) {
          while (line->turn.load(std::memory_order_acquire) != 2 * done) {
          }
          if (done == trips || steady_seconds() - t0 > kLimitS) break;
          line->turn.store(2 * done + 1, std::memory_order_release);
        }
        ns = (steady_seconds() - t0) * 1e9 / std::max(done, 1);
        line->turn.store(-1, std::memory_order_release);
      } else if (me == 1) {
        for (;;) {
          int turn = line->turn.load(std::memory_order_acquire);
          while (turn >= 0 && turn % 2 == 0) turn = line->turn.load(std::memory_order_acquire);
          if (turn < 0) break;
          line->turn.store(turn + 1, std::memory_order_release);
        }
      }
    }
    return ns;
  };
  return probe;
}

std::vector<std::vector<bool>> quiet_times(const std::vector<std::vector<double>>& probes,
                                           std::size_t jobs, double limit) {
  std::vector<std::vector<bool>> quiet(jobs, std::vector<bool>(probes.size(), false));
  for (std::size_t round = 0; round < probes.size(); ++round) {
    const std::vector<double>& p = probes[round];
    if (p.size() != jobs + 1) {
      throw std::invalid_argument("bench::quiet_times: round " + std::to_string(round) + " has " +
                                  std::to_string(p.size()) + " probes, expected " +
                                  std::to_string(jobs + 1));
    }
    const std::vector<std::size_t> order = round_order(jobs, round);
    for (std::size_t pos = 0; pos < jobs; ++pos) {
      quiet[order[pos]][round] = p[pos] <= limit && p[pos + 1] <= limit;
    }
  }
  return quiet;
}

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double relative_iqr(const std::vector<double>& v) {
  if (v.size() < 2) return kNaN;
  return (quantile(v, 0.75) - quantile(v, 0.25)) / median(v);
}

double median_ci_halfwidth(const std::vector<double>& v) {
  if (v.size() < 2) return kNaN;
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  const double m = static_cast<double>(s.size());
  const double half = 0.98 * std::sqrt(m);  // z / 2 with z = 1.96
  const double lower_rank = std::max(1.0, std::floor(m / 2 - half));
  const double upper_rank = std::min(m, std::ceil(1 + m / 2 + half));
  const double lower = s[static_cast<std::size_t>(lower_rank) - 1];
  const double upper = s[static_cast<std::size_t>(upper_rank) - 1];
  return (upper - lower) / 2 / median(s);
}

std::vector<double> paired_ratios(const std::vector<double>& numerator,
                                  const std::vector<double>& denominator) {
  if (numerator.size() != denominator.size()) {
    throw std::invalid_argument("paired_ratios: " + std::to_string(numerator.size()) +
                                " numerators and " + std::to_string(denominator.size()) +
                                " denominators");
  }
  std::vector<double> r(numerator.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = numerator[i] / denominator[i];
  return r;
}

std::vector<std::size_t> round_order(std::size_t jobs, std::size_t round) {
  if (jobs == 0) return {};
  // The first row 0, 1, n-1, 2, n-2, ...; row i adds i to every entry (mod n). For an odd count
  // the next n rows are the first n reversed, which balances who follows whom.
  const std::size_t cycle = jobs % 2 == 0 ? jobs : 2 * jobs;
  const std::size_t row = round % cycle;
  std::vector<std::size_t> order(jobs);
  for (std::size_t j = 0; j < jobs; ++j) {
    const std::size_t first = j == 0 ? 0 : j % 2 == 1 ? (j + 1) / 2 : jobs - j / 2;
    order[j] = (first + row) % jobs;
  }
  if (row >= jobs) std::reverse(order.begin(), order.end());
  return order;
}

const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::converged:
      return "converged";
    case StopReason::budget:
      return "budget";
    case StopReason::max_rounds:
      return "max_rounds";
  }
  return "?";
}

std::optional<StopReason> stop_decision(const StopRule& rule, int rounds, double elapsed_s,
                                        double round_s, const std::vector<double>& spreads) {
  if (rounds < rule.min_rounds) return std::nullopt;
  if (rule.min_rounds == rule.max_rounds) return StopReason::max_rounds;  // a fixed count
  const bool all_within = std::all_of(spreads.begin(), spreads.end(), [&](double s) {
    return !std::isnan(s) && s <= rule.target_spread;
  });
  if (all_within) return StopReason::converged;
  if (rounds >= rule.max_rounds) return StopReason::max_rounds;
  if (elapsed_s + round_s > rule.budget_s) return StopReason::budget;
  return std::nullopt;
}

const JobStats& Result::job(const std::string& name) const {
  for (const JobStats& j : jobs) {
    if (j.name == name) return j;
  }
  throw std::out_of_range("bench::Result: no job named " + name);
}

const RatioStats& Result::ratio(const std::string& name) const {
  for (const RatioStats& r : ratios) {
    if (r.name == name) return r;
  }
  throw std::out_of_range("bench::Result: no ratio named " + name);
}

std::pair<double, std::string> Result::largest_spread() const {
  std::pair<double, std::string> worst{0.0, ""};
  // An unknown (NaN) spread counts as the largest.
  auto consider = [&](double spread, const std::string& name) {
    const bool worse = worst.second.empty() ||
                       (!std::isnan(worst.first) && (std::isnan(spread) || spread > worst.first));
    if (worse) worst = {spread, name};
  };
  const bool any_watched =
      std::any_of(ratios.begin(), ratios.end(), [](const RatioStats& r) { return r.watched; });
  if (any_watched) {
    for (const RatioStats& r : ratios) {
      if (r.watched) consider(r.spread, r.name);
    }
  } else {
    for (const JobStats& j : jobs) consider(median_ci_halfwidth(j.ms), j.name);
  }
  return worst;
}

std::string Result::quiet_summary() const {
  if (probes.empty()) return "";
  int quiet_rounds = 0;
  for (std::size_t round = 0; round < probes.size(); ++round) {
    bool all = true;
    for (const JobStats& j : jobs) all = all && j.quiet.at(round);
    quiet_rounds += all ? 1 : 0;
  }
  int fewest = rounds;
  for (const JobStats& j : jobs) fewest = std::min(fewest, j.counted);
  std::string s =
      format("probe (%s) at most %.1f, %.2fx its fastest, around every job in %d of %d rounds",
             rule.probe ? rule.probe->what.c_str() : "?", quiet_limit,
             rule.probe ? rule.probe->quiet_factor : kNaN, quiet_rounds, rounds);
  // A job or ratio with fewer quiet times than kMinQuietRounds has its statistics over all.
  auto few = [](const std::vector<bool>& quiet) {
    return std::count(quiet.begin(), quiet.end(), true) < kMinQuietRounds;
  };
  bool fallback = false;
  for (const JobStats& j : jobs) fallback = fallback || few(j.quiet);
  for (const RatioStats& r : ratios) fallback = fallback || few(r.quiet);
  s += fallback ? format(
                      "; FEWER than %d quiet times for some jobs or ratios: theirs are over "
                      "every round, those on distant cores included",
                      kMinQuietRounds)
                : format("; statistics over the quiet times (at least %d per job)", fewest);
  return s;
}

std::string Result::summary() const {
  const auto [spread, name] = largest_spread();
  std::string s =
      format("%d rounds after %d warm-up rounds, %.1f s: ", rounds, warmup_rounds, seconds);
  const std::string target = percent(rule.target_spread);
  const std::string worst =
      name.empty() ? std::string() : " (largest " + percent(spread) + ": " + name + ")";
  switch (stop) {
    case StopReason::converged:
      return s + "every spread within the target " + target + worst;
    case StopReason::budget:
      return s + "the budget of " + format("%.0f s", rule.budget_s) +
             " ended BEFORE the target spread " + target + worst;
    case StopReason::max_rounds:
      if (rule.min_rounds == rule.max_rounds) {
        return s + "a fixed number of rounds, no stop rule" + worst;
      }
      return s + "the limit of " + std::to_string(rule.max_rounds) +
             " rounds ended BEFORE the target spread " + target + worst;
  }
  return s;
}

std::string Result::report() const {
  std::string s;
  for (const JobStats& j : jobs) {
    s += format("  %-56s median %10.3f ms  min %10.3f ms  IQR/median %6s  %d rounds\n",
                j.name.c_str(), j.median_ms, j.min_ms, percent(j.spread).c_str(), j.counted);
  }
  for (const RatioStats& r : ratios) {
    s += format("  %-56s median %8.3f  +- %6s (95%% CI of the median)  IQR/median %6s%s\n",
                r.name.c_str(), r.median, percent(r.spread).c_str(), percent(r.iqr).c_str(),
                r.watched ? "" : "  [not watched]");
  }
  const std::string quiet = quiet_summary();
  return s + "  " + summary() + "\n" + (quiet.empty() ? "" : "  " + quiet + "\n");
}

nlohmann::json Result::to_json() const {
  nlohmann::json j = {{"rounds", rounds},
                      {"warmup_rounds", warmup_rounds},
                      {"seconds", seconds},
                      {"stop", to_string(stop)},
                      {"target_spread", rule.target_spread},
                      {"budget_s", rule.budget_s},
                      {"min_rounds", rule.min_rounds},
                      {"max_rounds", rule.max_rounds},
                      {"probe", rule.probe ? rule.probe->what : std::string()},
                      {"probes", probes},
                      {"quiet_limit", number(quiet_limit)},
                      {"jobs", nlohmann::json::array()},
                      {"ratios", nlohmann::json::array()}};
  for (const JobStats& s : jobs) {
    j["jobs"].push_back({{"name", s.name},
                         {"median_ms", number(s.median_ms)},
                         {"min_ms", number(s.min_ms)},
                         {"spread", number(s.spread)},
                         {"counted", s.counted},
                         {"ms", s.ms},
                         {"quiet", s.quiet}});
  }
  for (const RatioStats& r : ratios) {
    j["ratios"].push_back({{"name", r.name},
                           {"median", number(r.median)},
                           {"spread", number(r.spread)},
                           {"iqr", number(r.iqr)},
                           {"counted", r.counted},
                           {"watched", r.watched},
                           {"values", r.values},
                           {"quiet", r.quiet}});
  }
  return j;
}

Result summarize(const std::vector<Job>& jobs, const std::vector<Ratio>& ratios,
                 std::vector<std::vector<double>> ms, const std::vector<std::vector<bool>>& quiet) {
  if (ms.size() != jobs.size()) {
    throw std::invalid_argument("bench::summarize: timings for " + std::to_string(ms.size()) +
                                " jobs, expected " + std::to_string(jobs.size()));
  }
  if (!quiet.empty() && quiet.size() != jobs.size()) {
    throw std::invalid_argument("bench::summarize: quiet flags for " +
                                std::to_string(quiet.size()) + " jobs, expected " +
                                std::to_string(jobs.size()));
  }
  Result r;
  r.rounds = jobs.empty() ? 0 : static_cast<int>(ms[0].size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    JobStats s;
    s.name = jobs[i].name;
    s.ms = std::move(ms[i]);
    s.quiet = quiet.empty() ? std::vector<bool>(s.ms.size(), true) : quiet[i];
    const std::vector<double> counted = counted_values(s.ms, s.quiet);
    s.counted = static_cast<int>(counted.size());
    s.median_ms = median(counted);
    s.min_ms = counted.empty() ? kNaN : *std::min_element(counted.begin(), counted.end());
    s.spread = relative_iqr(counted);
    r.jobs.push_back(std::move(s));
  }
  for (const Ratio& ratio : ratios) {
    if (ratio.numerator >= jobs.size() || ratio.denominator >= jobs.size()) {
      throw std::invalid_argument("bench::summarize: ratio " + ratio.name +
                                  " names a job that is not in the set");
    }
    RatioStats s;
    s.name = ratio.name;
    const JobStats &num = r.jobs[ratio.numerator], &den = r.jobs[ratio.denominator];
    s.values = paired_ratios(num.ms, den.ms);
    s.quiet.resize(s.values.size());
    for (std::size_t k = 0; k < s.values.size(); ++k) s.quiet[k] = num.quiet[k] && den.quiet[k];
    const std::vector<double> counted = counted_values(s.values, s.quiet);
    s.counted = static_cast<int>(counted.size());
    s.median = median(counted);
    s.spread = median_ci_halfwidth(counted);
    s.iqr = relative_iqr(counted);
    s.watched = ratio.watched;
    r.ratios.push_back(std::move(s));
  }
  return r;
}

Result run(const std::vector<Job>& jobs, const std::vector<Ratio>& ratios, const StopRule& rule,
           const std::function<double()>& clock) {
  if (rule.min_rounds < 1 || rule.max_rounds < rule.min_rounds || rule.min_warmup < 0 ||
      rule.max_warmup < rule.min_warmup) {
    throw std::invalid_argument(
        "bench::run: expected 1 <= min_rounds <= max_rounds and 0 <= min_warmup <= max_warmup");
  }
  for (const Ratio& ratio : ratios) {
    if (ratio.numerator >= jobs.size() || ratio.denominator >= jobs.size()) {
      throw std::invalid_argument("bench::run: ratio " + ratio.name +
                                  " names a job that is not in the set");
    }
  }
  const std::function<double()> now = clock ? clock : steady_seconds;
  const double start = now();
  auto time_once = [&](const Job& job) {
    if (job.setup) job.setup();
    const double t0 = now();
    job.run();
    return (now() - t0) * 1e3;
  };
  Probe* const probe = rule.probe.get();
  auto measure_probe = [&] {
    const double value = probe->measure();
    probe->fastest = std::min(probe->fastest, value);
    return value;
  };

  // Warm-up rounds, in the rotating order as well.
  int warmup = 0;
  std::vector<double> previous(jobs.size(), kNaN), latest(jobs.size(), kNaN);
  while (warmup < rule.max_warmup) {
    for (std::size_t j : round_order(jobs.size(), static_cast<std::size_t>(warmup))) {
      if (probe != nullptr) measure_probe();  // the probe's first reads, and the same rhythm
      latest[j] = time_once(jobs[j]);
    }
    ++warmup;
    bool settled = warmup >= 2;
    for (std::size_t j = 0; j < jobs.size() && settled; ++j) {
      settled = std::abs(latest[j] - previous[j]) <=
                rule.warmup_agreement * std::min(latest[j], previous[j]);
    }
    previous = latest;
    if (warmup >= rule.min_warmup && settled) break;
  }

  std::vector<std::vector<double>> ms(jobs.size()), probes;
  std::vector<double> round_seconds;
  auto quiet_limit = [&] { return probe->fastest * probe->quiet_factor; };
  std::optional<StopReason> stop;
  for (int round = 0; !stop; ++round) {
    const double round_start = now();
    std::vector<double> round_probes;
    for (std::size_t j : round_order(jobs.size(), static_cast<std::size_t>(round))) {
      if (probe != nullptr) round_probes.push_back(measure_probe());
      ms[j].push_back(time_once(jobs[j]));
    }
    if (probe != nullptr) {
      round_probes.push_back(measure_probe());
      probes.push_back(std::move(round_probes));
    }
    round_seconds.push_back(now() - round_start);

    const std::vector<std::vector<bool>> quiet =
        probe != nullptr ? quiet_times(probes, jobs.size(), quiet_limit())
                         : std::vector<std::vector<bool>>{};
    auto flags = [&](std::size_t j) {
      return quiet.empty() ? std::vector<bool>(ms[j].size(), true) : quiet[j];
    };
    std::vector<double> spreads;
    // With a probe: whether every watched ratio (or job) has kMinQuietRounds quiet times; until
    // one has, its spread is not known (NaN), so the run goes on.
    const bool probing = probe != nullptr;
    bool enough_quiet = true;
    auto count_quiet = [&](const std::vector<bool>& f) {
      enough_quiet = enough_quiet && std::count(f.begin(), f.end(), true) >= kMinQuietRounds;
    };
    for (const Ratio& ratio : ratios) {
      if (!ratio.watched) continue;
      const std::vector<bool> a = flags(ratio.numerator), b = flags(ratio.denominator);
      std::vector<bool> both(a.size());
      for (std::size_t k = 0; k < a.size(); ++k) both[k] = a[k] && b[k];
      if (probing) count_quiet(both);
      spreads.push_back(median_ci_halfwidth(counted_values(
          paired_ratios(ms.at(ratio.numerator), ms.at(ratio.denominator)), both, !probing)));
    }
    if (spreads.empty()) {
      for (std::size_t j = 0; j < ms.size(); ++j) {
        spreads.push_back(median_ci_halfwidth(counted_values(ms[j], flags(j), !probing)));
        if (probing) count_quiet(flags(j));
      }
    }
    StopRule now_rule = rule;
    if (!enough_quiet) now_rule.budget_s *= rule.quiet_budget_factor;
    stop = stop_decision(now_rule, round + 1, now() - start, median(round_seconds), spreads);
  }

  const double limit = probe != nullptr ? quiet_limit() : kNaN;
  const std::vector<std::vector<bool>> quiet =
      probe != nullptr ? quiet_times(probes, jobs.size(), limit) : std::vector<std::vector<bool>>{};
  Result r = summarize(jobs, ratios, std::move(ms), quiet);
  r.rule = rule;
  r.warmup_rounds = warmup;
  r.seconds = now() - start;
  r.stop = *stop;
  r.probes = std::move(probes);
  r.quiet_limit = limit;
  return r;
}

std::string describe(const StopRule& rule) {
  const std::string probe =
      rule.probe ? format(
                       "; a probe (%s) before every job and after each round's last, and "
                       "the statistics over the times with both probes around them within "
                       "%.2fx of the fastest (the budget up to %.0fx while fewer than %d)",
                       rule.probe->what.c_str(), rule.probe->quiet_factor, rule.quiet_budget_factor,
                       kMinQuietRounds)
                 : std::string();
  if (rule.min_rounds == rule.max_rounds) {
    return format("%d-%d warm-up rounds, then %d timed rounds", rule.min_warmup, rule.max_warmup,
                  rule.min_rounds) +
           probe;
  }
  return format(
             "%d-%d warm-up rounds, then timed rounds until the 95%% confidence interval of every "
             "reported ratio's median is within +-%.1f%% (at least %d rounds, at most %d, or "
             "until %.0f s per set)",
             rule.min_warmup, rule.max_warmup, 100 * rule.target_spread, rule.min_rounds,
             rule.max_rounds, rule.budget_s) +
         probe;
}

}  // namespace bench
