// The benchmark programs' timing harness (examples/bench_timing.h): its statistics on known
// values, the round order, the stop rule, and whole runs on a fake clock with scripted times.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "bench_timing.h"

namespace {

// A fake clock and jobs that advance it by scripted durations instead of doing work.
struct FakeMachine {
  double now_s = 0;
  std::vector<std::size_t> calls;  // which job ran, in order

  std::function<double()> clock() {
    return [this] { return now_s; };
  }
  // A job whose i-th call takes duration_ms(i) milliseconds.
  bench::Job job(const std::string& name, std::size_t id,
                 std::function<double(std::size_t)> duration_ms) {
    auto count = std::make_shared<std::size_t>(0);
    return {name, nullptr, [this, id, count, duration_ms] {
              calls.push_back(id);
              now_s += duration_ms((*count)++) * 1e-3;
            }};
  }
};

}  // namespace

TEST_CASE("bench_timing: median, quantiles and the interquartile range") {
  CHECK(bench::median({3, 1, 2}) == 2);
  CHECK(bench::median({4, 1, 3, 2}) == doctest::Approx(2.5));
  CHECK(bench::median({7}) == 7);
  CHECK(std::isnan(bench::median({})));
  // Linear interpolation between order statistics (NumPy's default).
  CHECK(bench::quantile({4, 1, 3, 2}, 0.25) == doctest::Approx(1.75));
  CHECK(bench::quantile({4, 1, 3, 2}, 0.75) == doctest::Approx(3.25));
  CHECK(bench::quantile({4, 1, 3, 2}, 0.5) == doctest::Approx(bench::median({4, 1, 3, 2})));
  CHECK(bench::quantile({10, 20, 30, 40, 50}, 0.1) == doctest::Approx(14));
  CHECK(bench::relative_iqr({4, 1, 3, 2}) == doctest::Approx(1.5 / 2.5));
  // One far outlier does not move it.
  CHECK(bench::relative_iqr({10, 10, 10, 10, 1000}) == 0);
  CHECK(std::isnan(bench::relative_iqr({5})));
}

TEST_CASE("bench_timing: the confidence half-width of the median") {
  std::vector<double> v;
  for (int i = 1; i <= 20; ++i) v.push_back(i);
  // m = 20: ranks floor(10 - 4.38) = 5 and ceil(11 + 4.38) = 16.
  CHECK(bench::median_ci_halfwidth(v) == doctest::Approx((16.0 - 5.0) / 2 / 10.5));
  // Up to five values the interval spans them all.
  CHECK(bench::median_ci_halfwidth({1, 2, 3, 4, 5}) == doctest::Approx((5.0 - 1.0) / 2 / 3));
  CHECK(bench::median_ci_halfwidth({2, 2, 2}) == 0);
  CHECK(std::isnan(bench::median_ci_halfwidth({2})));
  // It narrows with more values of the same scatter.
  std::vector<double> more;
  for (int r = 0; r < 10; ++r) more.insert(more.end(), v.begin(), v.end());
  CHECK(bench::median_ci_halfwidth(more) < 0.4 * bench::median_ci_halfwidth(v));
}

TEST_CASE("bench_timing: paired ratios are taken within each round") {
  // The load doubles from round to round: the paired ratio stays 2 exactly.
  CHECK(bench::paired_ratios({20, 40, 80}, {10, 20, 40}) == std::vector<double>{2, 2, 2});
  // The median of paired ratios is not the ratio of the medians.
  const std::vector<double> numerator = {1, 10, 100}, denominator = {10, 1, 50};
  CHECK(bench::median(bench::paired_ratios(numerator, denominator)) == doctest::Approx(2));
  CHECK(bench::median(numerator) / bench::median(denominator) == doctest::Approx(1));
  CHECK_THROWS(bench::paired_ratios({1, 2}, {1}));
}

TEST_CASE("bench_timing: the round order is a balanced Latin square") {
  for (std::size_t n = 1; n <= 7; ++n) {
    CAPTURE(n);
    const std::size_t cycle = n % 2 == 0 ? n : 2 * n;
    std::map<std::pair<std::size_t, std::size_t>, int> follows;
    std::vector<std::vector<int>> at_position(n, std::vector<int>(n, 0));
    for (std::size_t round = 0; round < cycle; ++round) {
      const auto order = bench::round_order(n, round);
      REQUIRE(order.size() == n);
      CHECK(std::set<std::size_t>(order.begin(), order.end()).size() == n);  // a permutation
      for (std::size_t p = 0; p < n; ++p) ++at_position[p][order[p]];
      for (std::size_t p = 1; p < n; ++p) ++follows[{order[p - 1], order[p]}];
    }
    // Every job in every position equally often, every ordered pair adjacent equally often.
    for (const auto& row : at_position) {
      for (int count : row) CHECK(count == static_cast<int>(cycle / n));
    }
    if (n >= 2) {
      CHECK(follows.size() == n * (n - 1));
      for (const auto& [pair, count] : follows) CHECK(count == follows.begin()->second);
    }
    CHECK(bench::round_order(n, cycle) == bench::round_order(n, 0));  // it cycles
  }
  CHECK(bench::round_order(3, 1) != bench::round_order(3, 0));
}

TEST_CASE("bench_timing: the stop rule") {
  bench::StopRule rule;
  rule.target_spread = 0.02, rule.budget_s = 10, rule.min_rounds = 5, rule.max_rounds = 50;
  using R = bench::StopReason;
  // Never before min_rounds, however tight or late.
  CHECK_FALSE(bench::stop_decision(rule, 4, 100, 1, {0.0}).has_value());
  CHECK(bench::stop_decision(rule, 5, 1, 0.1, {0.01, 0.02}) == R::converged);
  // One ratio outside the target keeps it going; an unknown spread is not within it.
  CHECK_FALSE(bench::stop_decision(rule, 5, 1, 0.1, {0.01, 0.03}).has_value());
  CHECK_FALSE(bench::stop_decision(rule, 5, 1, 0.1, {NAN}).has_value());
  // No round starts that would end after the budget.
  CHECK(bench::stop_decision(rule, 6, 9.5, 0.6, {0.05}) == R::budget);
  CHECK_FALSE(bench::stop_decision(rule, 6, 9.3, 0.6, {0.05}).has_value());
  CHECK(bench::stop_decision(rule, 50, 1, 0.1, {0.05}) == R::max_rounds);
  // Converged wins when both hold.
  CHECK(bench::stop_decision(rule, 50, 20, 0.1, {0.01}) == R::converged);
  // A fixed count ignores the spreads.
  rule.min_rounds = rule.max_rounds = 7;
  CHECK_FALSE(bench::stop_decision(rule, 6, 100, 1, {0.0}).has_value());
  CHECK(bench::stop_decision(rule, 7, 1, 0.1, {0.0}) == R::max_rounds);
}

TEST_CASE("bench_timing: a run whose load drifts converges on the paired ratio") {
  FakeMachine m;
  // The machine slows down by half each round (both jobs of a round alike), and job 0's first
  // call is slow (primitive creation). Job 1 takes 3 times job 0 in every round.
  std::size_t round_of_call = 0;
  auto load = [&] { return 1.0 + 0.5 * static_cast<double>(round_of_call++ / 2); };
  const std::vector<bench::Job> jobs = {
      m.job("a", 0, [&](std::size_t i) { return (i == 0 ? 100.0 : 10.0) * load(); }),
      m.job("b", 1, [&](std::size_t) { return 30.0 * load(); })};
  bench::StopRule rule;
  rule.min_rounds = 6, rule.max_rounds = 100, rule.budget_s = 1000;
  const bench::Result r = bench::run(jobs, {{"b/a", 1, 0}}, rule, m.clock());

  CHECK(r.stop == bench::StopReason::converged);
  CHECK(r.rounds == 6);
  // Warm-up: the slow first call, then two calls to see the times agree... except that the
  // load grows by half each round, so they never agree and warm-up runs to max_warmup.
  CHECK(r.warmup_rounds == rule.max_warmup);
  REQUIRE(r.ratios.size() == 1);
  CHECK(r.ratio("b/a").median == doctest::Approx(3));
  CHECK(r.ratio("b/a").spread == doctest::Approx(0));
  CHECK(r.job("a").ms.size() == 6);
  // The times themselves drift: round 0 after six warm-up rounds has load 4.
  CHECK(r.job("a").min_ms == doctest::Approx(40));
  CHECK(r.job("b").min_ms == doctest::Approx(120));
  CHECK(r.job("a").median_ms == doctest::Approx(10 * (4 + 0.5 * 2.5)));
  CHECK(r.job("a").spread > 0.1);
  CHECK(r.summary().find("within the target") != std::string::npos);
  // Both jobs ran (warm-up and timed) in alternating order: a b, b a, ...
  REQUIRE(m.calls.size() == 2 * (6 + 6));
  CHECK(m.calls[0] == 0);
  CHECK(m.calls[1] == 1);
  CHECK(m.calls[2] == 1);
  CHECK(m.calls[3] == 0);
  CHECK(r.seconds == doctest::Approx(m.now_s));
}

TEST_CASE("bench_timing: warm-up ends when two consecutive times agree") {
  FakeMachine m;
  const std::vector<bench::Job> jobs = {
      m.job("a", 0, [](std::size_t i) { return i == 0 ? 100.0 : 10.0; }),
      m.job("b", 1, [](std::size_t i) { return i < 2 ? 50.0 : 20.0; })};
  bench::StopRule rule;
  rule.min_rounds = 3, rule.max_rounds = 3;
  const bench::Result r = bench::run(jobs, {{"b/a", 1, 0}}, rule, m.clock());
  // Round 1: 100 and 50; round 2: 10 and 50 (a changed); round 3: 10 and 20 (b changed);
  // round 4: 10 and 20, both agree.
  CHECK(r.warmup_rounds == 4);
  REQUIRE(r.job("a").ms.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(r.job("a").ms[i] == doctest::Approx(10));
    CHECK(r.job("b").ms[i] == doctest::Approx(20));
  }
  CHECK(r.stop == bench::StopReason::max_rounds);
  CHECK(r.summary().find("fixed number of rounds") != std::string::npos);
}

TEST_CASE("bench_timing: a noisy ratio stops at the budget and says so") {
  FakeMachine m;
  const std::vector<bench::Job> jobs = {
      m.job("a", 0, [](std::size_t) { return 10.0; }),
      m.job("b", 1, [](std::size_t i) { return i % 2 == 0 ? 15.0 : 25.0; })};
  bench::StopRule rule;
  rule.min_rounds = 5, rule.max_rounds = 100000, rule.budget_s = 2;
  const bench::Result r = bench::run(jobs, {{"b/a", 1, 0}}, rule, m.clock());
  CHECK(r.stop == bench::StopReason::budget);
  // It stops when the next round, judged by the median round (30 ms), would end past 2 s.
  CHECK(r.seconds <= 2.0 + 0.035);
  CHECK(r.seconds > 2.0 - 0.035);
  CHECK(r.ratio("b/a").spread > 0.02);
  CHECK(r.ratio("b/a").iqr > 0.3);
  CHECK(r.summary().find("BEFORE the target spread") != std::string::npos);
  CHECK(r.largest_spread().second == "b/a");
  const nlohmann::json j = r.to_json();
  CHECK(j["stop"] == "budget");
  CHECK(j["ratios"][0]["values"].size() == static_cast<std::size_t>(r.rounds));

  // The same at a round limit.
  FakeMachine m2;
  const std::vector<bench::Job> jobs2 = {
      m2.job("a", 0, [](std::size_t) { return 10.0; }),
      m2.job("b", 1, [](std::size_t i) { return i % 2 == 0 ? 15.0 : 25.0; })};
  rule.max_rounds = 8, rule.budget_s = 1000;
  const bench::Result r2 = bench::run(jobs2, {{"b/a", 1, 0}}, rule, m2.clock());
  CHECK(r2.stop == bench::StopReason::max_rounds);
  CHECK(r2.rounds == 8);
  CHECK(r2.summary().find("limit of 8 rounds ended BEFORE") != std::string::npos);
}

TEST_CASE("bench_timing: without ratios the jobs' own spreads are watched") {
  FakeMachine m;
  const std::vector<bench::Job> jobs = {
      m.job("steady", 0, [](std::size_t) { return 10.0; }),
      m.job("noisy", 1, [](std::size_t i) { return i % 3 == 0 ? 10.0 : 30.0; })};
  bench::StopRule rule;
  rule.min_rounds = 3, rule.max_rounds = 40, rule.budget_s = 1000;
  const bench::Result r = bench::run(jobs, {}, rule, m.clock());
  CHECK(r.stop == bench::StopReason::max_rounds);
  CHECK(r.largest_spread().second == "noisy");

  FakeMachine quiet;
  const std::vector<bench::Job> steady = {quiet.job("steady", 0, [](std::size_t) { return 5.0; })};
  const bench::Result q = bench::run(steady, {}, rule, quiet.clock());
  CHECK(q.stop == bench::StopReason::converged);
  CHECK(q.rounds == 3);
  CHECK(q.job("steady").median_ms == doctest::Approx(5));
}

TEST_CASE("bench_timing: a ratio that is not watched does not hold the run") {
  FakeMachine m;
  const std::vector<bench::Job> jobs = {
      m.job("a", 0, [](std::size_t) { return 10.0; }),
      m.job("b", 1, [](std::size_t) { return 20.0; }),
      m.job("noisy", 2, [](std::size_t i) { return i % 2 == 0 ? 10.0 : 40.0; })};
  bench::StopRule rule;
  rule.min_rounds = 4, rule.max_rounds = 50, rule.budget_s = 1000;
  const bench::Result r =
      bench::run(jobs, {{"b/a", 1, 0}, {"noisy/a", 2, 0, /*watched=*/false}}, rule, m.clock());
  CHECK(r.stop == bench::StopReason::converged);
  CHECK(r.rounds == 4);
  CHECK(r.ratio("noisy/a").spread > 0.5);
  CHECK_FALSE(r.ratio("noisy/a").watched);
  CHECK(r.largest_spread().second == "b/a");
  // Watched, it would run to the limit.
  FakeMachine m2;
  const std::vector<bench::Job> jobs2 = {
      m2.job("a", 0, [](std::size_t) { return 10.0; }),
      m2.job("noisy", 1, [](std::size_t i) { return i % 2 == 0 ? 10.0 : 40.0; })};
  CHECK(bench::run(jobs2, {{"noisy/a", 1, 0}}, rule, m2.clock()).stop ==
        bench::StopReason::max_rounds);
}

TEST_CASE("bench_timing: bad rules and ratios are refused") {
  FakeMachine m;
  const std::vector<bench::Job> jobs = {m.job("a", 0, [](std::size_t) { return 1.0; })};
  bench::StopRule rule;
  rule.min_rounds = 0;
  CHECK_THROWS(bench::run(jobs, {}, rule, m.clock()));
  rule.min_rounds = 5, rule.max_rounds = 4;
  CHECK_THROWS(bench::run(jobs, {}, rule, m.clock()));
  CHECK_THROWS(bench::summarize(jobs, {{"x", 0, 3}}, std::vector<std::vector<double>>(1, {1.0})));
}

TEST_CASE("bench_timing: a job's time counts when the probes on both sides of it are quiet") {
  // Two jobs; round 0 runs a then b, round 1 b then a (round_order). Probes: before the first
  // job, between them, after the last.
  const std::vector<std::vector<double>> probes = {{1, 1, 5}, {5, 1, 1}, {1, 1, 1}};
  const auto quiet = bench::quiet_times(probes, 2, 2.0);
  REQUIRE(quiet.size() == 2);
  CHECK(bench::round_order(2, 0) == std::vector<std::size_t>{0, 1});
  CHECK(bench::round_order(2, 1) == std::vector<std::size_t>{1, 0});
  CHECK(quiet[0] == std::vector<bool>{true, true, true});    // a: (1, 1), (1, 1), (1, 1)
  CHECK(quiet[1] == std::vector<bool>{false, false, true});  // b: (1, 5), (5, 1), (1, 1)
  CHECK_THROWS(bench::quiet_times({{1, 1}}, 2, 2.0));        // one probe short

  // The statistics are over the quiet times, and a ratio over the rounds where both are quiet.
  const std::vector<bench::Job> jobs = {{"a", nullptr, [] {}}, {"b", nullptr, [] {}}};
  const std::vector<std::vector<double>> ms = {{10, 10, 10, 20}, {30, 80, 30, 60}};
  const std::vector<std::vector<bool>> flags = {{true, true, true, false},
                                                {true, false, true, true}};
  const bench::Result r = bench::summarize(jobs, {{"b/a", 1, 0}}, ms, flags);
  CHECK(r.job("a").counted == 3);
  CHECK(r.job("a").median_ms == doctest::Approx(10));
  CHECK(r.job("b").median_ms == doctest::Approx(30));
  CHECK(r.job("b").min_ms == doctest::Approx(30));
  CHECK(r.ratio("b/a").counted == 4);  // 2 quiet pairs, fewer than kMinQuietRounds: all rounds
  CHECK(r.ratio("b/a").quiet == std::vector<bool>{true, false, true, false});
  CHECK(r.ratio("b/a").median == doctest::Approx(3));  // of 3, 8, 3, 3
}

namespace {

// A machine whose host moves the two threads between close cores (a probe of 100) and distant
// ones (400): distant while `distant(now)`. On distant cores job a takes 12 ms instead of 10 and
// job b 48 instead of 30: the ratio b / a is 3 on close cores, 4 on distant ones.
struct MovingMachine : FakeMachine {
  std::function<bool(double)> distant;
  std::shared_ptr<bench::Probe> probe() {
    auto p = std::make_shared<bench::Probe>();
    p->what = "fake";
    p->measure = [this] {
      now_s += 1e-4;
      return distant(now_s) ? 400.0 : 100.0;
    };
    return p;
  }
  std::vector<bench::Job> jobs() {
    return {job("a", 0, [this](std::size_t) { return distant(now_s) ? 12.0 : 10.0; }),
            job("b", 1, [this](std::size_t) { return distant(now_s) ? 48.0 : 30.0; })};
  }
};

}  // namespace

TEST_CASE("bench_timing: with a probe, the times taken on distant cores are left out") {
  MovingMachine m;
  // Distant for the first 1.2 s (warm-up and the first rounds), then in every other 0.5 s.
  m.distant = [](double t) { return t < 1.2 || std::fmod(t, 1.0) >= 0.5; };
  bench::StopRule rule;
  rule.min_rounds = 40, rule.max_rounds = 60, rule.budget_s = 1000;
  rule.probe = m.probe();
  const auto jobs = m.jobs();
  const bench::Result r = bench::run(jobs, {{"b/a", 1, 0}}, rule, m.clock());
  CHECK(r.ratio("b/a").median == doctest::Approx(3));
  CHECK(r.job("a").median_ms == doctest::Approx(10));
  CHECK(r.job("b").median_ms == doctest::Approx(30));
  CHECK(r.ratio("b/a").counted < r.rounds);
  CHECK(r.ratio("b/a").counted >= bench::kMinQuietRounds);
  CHECK(rule.probe->fastest == doctest::Approx(100));
  CHECK(r.quiet_limit == doctest::Approx(100 * rule.probe->quiet_factor));
  REQUIRE(r.probes.size() == static_cast<std::size_t>(r.rounds));
  CHECK(r.probes[0].size() == 3);
  CHECK(r.quiet_summary().find("statistics over the quiet times") != std::string::npos);
  const nlohmann::json j = r.to_json();
  CHECK(j["probes"].size() == static_cast<std::size_t>(r.rounds));
  CHECK(j["jobs"][0]["quiet"].size() == static_cast<std::size_t>(r.rounds));

  // Without the probe the same machine mixes both: the ratio lies between 3 and 4.
  MovingMachine plain;
  plain.distant = m.distant;
  rule.probe = nullptr;
  const auto plain_jobs = plain.jobs();
  const bench::Result mixed = bench::run(plain_jobs, {{"b/a", 1, 0}}, rule, plain.clock());
  const std::vector<double>& v = mixed.ratio("b/a").values;
  CHECK(std::count(v.begin(), v.end(), 4.0) > 0);
  CHECK(mixed.quiet_summary().empty());
}

TEST_CASE("bench_timing: never a quiet time: the budget grows, then every round counts") {
  MovingMachine m;
  m.distant = [](double) { return true; };
  bench::StopRule rule;
  rule.min_rounds = 5, rule.max_rounds = 100000, rule.budget_s = 1;
  rule.probe = m.probe();
  rule.probe->fastest = 100;  // an earlier set of the program saw close cores
  const auto jobs = m.jobs();
  const bench::Result r = bench::run(jobs, {{"b/a", 1, 0}}, rule, m.clock());
  CHECK(r.stop == bench::StopReason::budget);
  CHECK(r.seconds > 2.9);  // quiet_budget_factor 3
  CHECK(r.seconds < 3.1);
  CHECK(r.ratio("b/a").median == doctest::Approx(4));
  CHECK(r.ratio("b/a").counted == r.rounds);
  CHECK(r.quiet_summary().find("FEWER than") != std::string::npos);
}

TEST_CASE("bench_timing: the core probe measures a round trip, quickly") {
  const std::shared_ptr<bench::Probe> probe = bench::core_probe();
  CHECK_FALSE(probe->what.empty());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    const auto before = std::chrono::steady_clock::now();
    const double ns = probe->measure();
    const double call_ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - before).count();
    CHECK(std::isfinite(ns));
    CHECK(ns >= 0);  // 0 with one thread
    // A round trip within the call (on a loaded machine one may take a whole time slice).
    CHECK(ns <= call_ns);
  }
  // Each call stops after about 5 ms, however the threads are placed.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

TEST_CASE("bench_timing: without a probe, two rounds may settle a ratio and the budget holds") {
  FakeMachine m;
  const std::vector<bench::Job> jobs = {m.job("a", 0, [](std::size_t) { return 10.0; }),
                                        m.job("b", 1, [](std::size_t) { return 20.0; })};
  bench::StopRule rule;
  rule.min_rounds = 2, rule.max_rounds = 100, rule.budget_s = 1000;
  const bench::Result r = bench::run(jobs, {{"b/a", 1, 0}}, rule, m.clock());
  CHECK(r.stop == bench::StopReason::converged);
  CHECK(r.rounds == 2);

  // A noisy ratio without a probe stops at budget_s, not quiet_budget_factor times it.
  FakeMachine m2;
  const std::vector<bench::Job> noisy = {
      m2.job("a", 0, [](std::size_t) { return 10.0; }),
      m2.job("b", 1, [](std::size_t i) { return i % 2 == 0 ? 15.0 : 25.0; })};
  rule.min_rounds = 1, rule.budget_s = 0.1, rule.min_warmup = 0, rule.max_warmup = 0;
  const bench::Result r2 = bench::run(noisy, {{"b/a", 1, 0}}, rule, m2.clock());
  CHECK(r2.stop == bench::StopReason::budget);
  CHECK(r2.rounds == 3);  // rounds of 25 and 35 ms: a fourth would end past 0.1 s
  CHECK(r2.seconds <= 0.1);
}
