// Interleaved timing with a stop rule on paired ratios (bench_timing.h says why).
#include "bench_timing.h"

#include <algorithm>
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

}  // namespace

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
                j.name.c_str(), j.median_ms, j.min_ms, percent(j.spread).c_str(),
                static_cast<int>(j.ms.size()));
  }
  for (const RatioStats& r : ratios) {
    s += format("  %-56s median %8.3f  +- %6s (95%% CI of the median)  IQR/median %6s%s\n",
                r.name.c_str(), r.median, percent(r.spread).c_str(), percent(r.iqr).c_str(),
                r.watched ? "" : "  [not watched]");
  }
  return s + "  " + summary() + "\n";
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
                      {"jobs", nlohmann::json::array()},
                      {"ratios", nlohmann::json::array()}};
  for (const JobStats& s : jobs) {
    j["jobs"].push_back({{"name", s.name},
                         {"median_ms", number(s.median_ms)},
                         {"min_ms", number(s.min_ms)},
                         {"spread", number(s.spread)},
                         {"ms", s.ms}});
  }
  for (const RatioStats& r : ratios) {
    j["ratios"].push_back({{"name", r.name},
                           {"median", number(r.median)},
                           {"spread", number(r.spread)},
                           {"iqr", number(r.iqr)},
                           {"watched", r.watched},
                           {"values", r.values}});
  }
  return j;
}

Result summarize(const std::vector<Job>& jobs, const std::vector<Ratio>& ratios,
                 std::vector<std::vector<double>> ms) {
  if (ms.size() != jobs.size()) {
    throw std::invalid_argument("bench::summarize: timings for " + std::to_string(ms.size()) +
                                " jobs, expected " + std::to_string(jobs.size()));
  }
  Result r;
  r.rounds = jobs.empty() ? 0 : static_cast<int>(ms[0].size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    JobStats s;
    s.name = jobs[i].name;
    s.ms = std::move(ms[i]);
    s.median_ms = median(s.ms);
    s.min_ms = s.ms.empty() ? kNaN : *std::min_element(s.ms.begin(), s.ms.end());
    s.spread = relative_iqr(s.ms);
    r.jobs.push_back(std::move(s));
  }
  for (const Ratio& ratio : ratios) {
    if (ratio.numerator >= jobs.size() || ratio.denominator >= jobs.size()) {
      throw std::invalid_argument("bench::summarize: ratio " + ratio.name +
                                  " names a job that is not in the set");
    }
    RatioStats s;
    s.name = ratio.name;
    s.values = paired_ratios(r.jobs[ratio.numerator].ms, r.jobs[ratio.denominator].ms);
    s.median = median(s.values);
    s.spread = median_ci_halfwidth(s.values);
    s.iqr = relative_iqr(s.values);
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

  // Warm-up rounds, in the rotating order as well.
  int warmup = 0;
  std::vector<double> previous(jobs.size(), kNaN), latest(jobs.size(), kNaN);
  while (warmup < rule.max_warmup) {
    for (std::size_t j : round_order(jobs.size(), static_cast<std::size_t>(warmup))) {
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

  std::vector<std::vector<double>> ms(jobs.size());
  std::vector<double> round_seconds;
  std::optional<StopReason> stop;
  for (int round = 0; !stop; ++round) {
    const double round_start = now();
    for (std::size_t j : round_order(jobs.size(), static_cast<std::size_t>(round))) {
      ms[j].push_back(time_once(jobs[j]));
    }
    round_seconds.push_back(now() - round_start);

    std::vector<double> spreads;
    for (const Ratio& ratio : ratios) {
      if (!ratio.watched) continue;
      spreads.push_back(
          median_ci_halfwidth(paired_ratios(ms.at(ratio.numerator), ms.at(ratio.denominator))));
    }
    if (spreads.empty()) {
      for (const auto& t : ms) spreads.push_back(median_ci_halfwidth(t));
    }
    stop = stop_decision(rule, round + 1, now() - start, median(round_seconds), spreads);
  }

  Result r = summarize(jobs, ratios, std::move(ms));
  r.rule = rule;
  r.warmup_rounds = warmup;
  r.seconds = now() - start;
  r.stop = *stop;
  return r;
}

std::string describe(const StopRule& rule) {
  if (rule.min_rounds == rule.max_rounds) {
    return format("%d-%d warm-up rounds, then %d timed rounds", rule.min_warmup, rule.max_warmup,
                  rule.min_rounds);
  }
  return format(
      "%d-%d warm-up rounds, then timed rounds until the 95%% confidence interval of every "
      "reported ratio's median is within +-%.1f%% (at least %d rounds, at most %d, or until %.0f "
      "s per set)",
      rule.min_warmup, rule.max_warmup, 100 * rule.target_spread, rule.min_rounds, rule.max_rounds,
      rule.budget_s);
}

}  // namespace bench
