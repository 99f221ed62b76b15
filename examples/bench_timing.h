// Interleaved timing for the benchmark programs: a set of named jobs is warmed up, then timed in
// rounds (every job once per round, in an order that changes from round to round) until the
// ratios the program reports are known to a target precision or a time budget ends.
//
// Why rounds: a machine's load drifts over minutes. Timing case A for a while and then case B
// turns that drift into a difference between A and B; timing A and B in alternation, and taking
// the ratio B / A within each round (a paired ratio), lets the drift hit both alike. The stop
// rule watches the ratios themselves, not the absolute times, which drift whatever one does.
//
// Why a probe: on a virtual machine the host may move the program's threads between cores that
// share a cache and cores that do not, for seconds at a time (measured on a 2-core Zen 5 VM: a
// cache line's round trip between the two threads took 85 ns, or 400 ns in other stretches).
// Every job slows on distant cores, but not alike: one that synchronizes its threads more often
// slows more (libtorch's encoder layer at n = 256 by 30%, tinyformer's by 10%, a [2048]^2 product
// by 5%), so a ratio taken in such a stretch differs from one taken on close cores, and two runs
// differ by how much of each they saw. The probe, that round trip timed before every job and
// after each round's last, tells the stretches apart: a time counts when the probes on both
// sides of it were within a factor of the fastest probe seen, and the statistics are taken over
// those. Where the threads stay put (a machine of one's own), every time counts.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bench {

// --- Statistics (exposed for the tests) ---

// The median; the mean of the middle two for an even count. NaN for no values.
double median(std::vector<double> v);
// The q-quantile with linear interpolation between order statistics (R's type 7, NumPy's
// default): quantile(v, 0.5) == median(v).
double quantile(std::vector<double> v, double q);
// Interquartile range over the median: (q75 - q25) / median, a dispersion that one outlier does
// not move. NaN for fewer than two values.
double relative_iqr(const std::vector<double>& v);
// How well the median of v is known: the half-width of the distribution-free 95% confidence
// interval of the median, over the median. The interval runs between the order statistics of
// ranks floor(m/2 - 0.98 sqrt(m)) and ceil(1 + m/2 + 0.98 sqrt(m)) (1-based, clamped to [1, m];
// the normal approximation to the binomial count of values below the median), so it assumes
// nothing about the shape of the distribution (timings have a long right tail) and narrows as
// 1/sqrt(m). Up to m = 5 it spans every value. NaN for fewer than two values.
double median_ci_halfwidth(const std::vector<double>& v);
// numerator[i] / denominator[i]: the ratio within each round.
std::vector<double> paired_ratios(const std::vector<double>& numerator,
                                  const std::vector<double>& denominator);
// The order of `jobs` jobs in round `round`: the rows of a balanced Latin square (Williams
// design), one row per round, cycling. Over a cycle (`jobs` rounds for an even count, twice that
// for an odd one) every job runs in every position equally often and follows every other job
// equally often, so no job always runs after the same one (and inherits its cache or frequency
// state).
std::vector<std::size_t> round_order(std::size_t jobs, std::size_t round);

// --- The machine's state ---

// A measure of the machine's state (lower is better), and the fastest it has given: one Probe
// serves every set of a program, so a set timed entirely in a slow stretch is recognized as such.
struct Probe {
  std::function<double()> measure;
  double quiet_factor = 1.5;  // a measure within this factor of the fastest counts as quiet
  double fastest = std::numeric_limits<double>::infinity();
  std::string what;  // what it measures, for the reports
};

// The core probe: the mean time in ns of a cache line's round trip between the first two threads
// of an OpenMP team of the default size (`trips` round trips, about 0.1 ms on close cores). 0
// with one thread.
std::shared_ptr<Probe> core_probe(int trips = 1000);

// Whether each job's time of each round counts: quiet[job][round] is true when the probes
// before and after that job's run (probes[round][position] and [position + 1], position its
// place in the round's order) were at most `limit`.
std::vector<std::vector<bool>> quiet_times(const std::vector<std::vector<double>>& probes,
                                           std::size_t jobs, double limit);

// --- Jobs and the stop rule ---

// One thing to time: `setup` runs untimed right before each timed `run` (dropping gradients,
// say). run() must wait for its work to finish (synchronize on a GPU).
struct Job {
  std::string name;
  std::function<void()> setup, run;
};

// A ratio to report, time of `numerator` over time of `denominator` (indices into the jobs),
// taken within each round. The stop rule watches it unless `watched` is false (a bound reported
// alongside the results, say).
struct Ratio {
  std::string name;
  std::size_t numerator = 0, denominator = 0;
  bool watched = true;
};

struct StopRule {
  // Stop once every watched ratio's spread (median_ci_halfwidth of its paired values) is at most
  // this; with no watched ratios, every job's own spread.
  double target_spread = 0.02;
  // Seconds for the whole set, warm-up included; no round starts that would end after it
  // (judged by the median round so far). min_rounds run whatever the budget.
  double budget_s = 30;
  int min_rounds = 5, max_rounds = 1000;
  // Warm-up rounds (untimed for the results): at least min_warmup, then more until every job's
  // last two warm-up times agree within warmup_agreement (relative), at most max_warmup. The
  // first calls create oneDNN primitives and fill the caching allocators.
  int min_warmup = 2, max_warmup = 6;
  double warmup_agreement = 0.05;
  // The machine's state, measured before every timed job and after each round's last; null:
  // every time counts.
  std::shared_ptr<Probe> probe;
  // With a probe: while some watched ratio (or job, without ratios) has fewer than
  // kMinQuietRounds quiet times, the budget is this many times budget_s.
  double quiet_budget_factor = 3;
};

enum class StopReason { converged, budget, max_rounds };
const char* to_string(StopReason reason);

// Whether to stop after `rounds` rounds, `elapsed_s` seconds since the warm-up began, with a
// median round of `round_s` seconds and the watched spreads (NaN counts as not yet known).
// min_rounds == max_rounds is a fixed count: max_rounds, whatever the spreads.
std::optional<StopReason> stop_decision(const StopRule& rule, int rounds, double elapsed_s,
                                        double round_s, const std::vector<double>& spreads);

// --- Results ---

// The statistics below are over the rounds that count: the quiet ones when at least
// kMinQuietRounds of them are (the probe's), else all of them.
constexpr int kMinQuietRounds = 3;

struct JobStats {
  std::string name;
  std::vector<double> ms;   // one time per round, in round order
  std::vector<bool> quiet;  // per round: whether the machine was quiet around it
  int counted = 0;          // the rounds the statistics are over
  double median_ms = 0, min_ms = 0;
  double spread = 0;  // relative_iqr of the times
};

struct RatioStats {
  std::string name;
  std::vector<double> values;  // one paired ratio per round
  std::vector<bool> quiet;     // per round: both times quiet
  int counted = 0;
  double median = 0;
  double spread = 0;  // median_ci_halfwidth: how well the median is known (the stop rule's)
  double iqr = 0;     // relative_iqr: how much single rounds scatter
  bool watched = true;
};

struct Result {
  StopRule rule;
  std::vector<JobStats> jobs;
  std::vector<RatioStats> ratios;
  int rounds = 0, warmup_rounds = 0;
  double seconds = 0;  // warm-up included
  StopReason stop = StopReason::max_rounds;
  // With a probe: its measures per round (before each job in the round's order, then after the
  // last) and the largest that counted as quiet.
  std::vector<std::vector<double>> probes;
  double quiet_limit = std::numeric_limits<double>::quiet_NaN();

  const JobStats& job(const std::string& name) const;
  const RatioStats& ratio(const std::string& name) const;
  // The largest watched spread (ratios, or jobs when no ratio is watched) and whose it is.
  std::pair<double, std::string> largest_spread() const;
  // One line: rounds, time, and why it stopped; it says when the budget (or the round limit)
  // ended before the target spread was reached.
  std::string summary() const;
  // With a probe, one line: in how many rounds the machine was quiet around every job, and
  // whether the statistics are over the quiet times; empty without one.
  std::string quiet_summary() const;
  // Per job: median, min, spread, rounds; per ratio: median and both spreads; then summary().
  std::string report() const;
  nlohmann::json to_json() const;
};

// Computes the statistics of finished timings (ms[j][round]), over the rounds that count
// (quiet[j][round]; empty: all); used by run() and by tests.
Result summarize(const std::vector<Job>& jobs, const std::vector<Ratio>& ratios,
                 std::vector<std::vector<double>> ms,
                 const std::vector<std::vector<bool>>& quiet = {});

// Warms up, then times rounds until the stop rule says so. `clock` returns seconds (a test
// passes a fake one); by default std::chrono::steady_clock.
Result run(const std::vector<Job>& jobs, const std::vector<Ratio>& ratios, const StopRule& rule,
           const std::function<double()>& clock = {});

// A short description of the rule for the programs' headers and --help.
std::string describe(const StopRule& rule);

}  // namespace bench
