// The collectives' watchdog on its own, without MPI: it fires for an operation that waits past
// the timeout (with its name and the seconds waited), never for one that ends in time or with
// no timeout, and the timeout's settings and text are checked.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <tinyformer/tinyformer.h>

#include "nn/distributed/watchdog.h"

namespace tf = tinyformer;
namespace dist = tinyformer::distributed;
using namespace std::chrono_literals;

namespace {

// What the watchdog reported, read from the test's thread.
struct Reports {
  std::mutex mutex;
  int count = 0;
  std::string operation;
  double seconds = 0;

  dist::Watchdog::Expired callback() {
    return [this](const char* name, double waited) {
      const std::lock_guard lock(mutex);
      ++count;
      operation = name;
      seconds = waited;
    };
  }
  int reports() {
    const std::lock_guard lock(mutex);
    return count;
  }
  // Waits up to 10 s (a loaded machine) for the first report.
  bool wait_for_one() {
    for (int i = 0; i < 1000 && reports() == 0; ++i) std::this_thread::sleep_for(10ms);
    return reports() > 0;
  }
};

}  // namespace

TEST_CASE("watchdog: an operation that waits past the timeout is reported once, by name") {
  Reports reports;
  dist::Watchdog watchdog(reports.callback());
  watchdog.set_timeout(0.2);
  CHECK(watchdog.timeout() == doctest::Approx(0.2));
  {
    const dist::Watchdog::Scope scope(watchdog, "barrier");
    REQUIRE(reports.wait_for_one());
    std::this_thread::sleep_for(300ms);  // still in flight: no second report for it
  }
  CHECK(reports.reports() == 1);
  CHECK(reports.operation == "barrier");
  CHECK(reports.seconds >= 0.2);
  CHECK(reports.seconds < 5);
  // The next operation that waits too long is reported again.
  {
    const dist::Watchdog::Scope scope(watchdog, "broadcast");
    for (int i = 0; i < 1000 && reports.reports() < 2; ++i) std::this_thread::sleep_for(10ms);
  }
  CHECK(reports.reports() == 2);
  CHECK(reports.operation == "broadcast");
}

TEST_CASE("watchdog: operations that end in time, or with no timeout, are never reported") {
  Reports reports;
  dist::Watchdog watchdog(reports.callback());
  watchdog.set_timeout(1.0);
  // Many short operations, longer together than the timeout.
  for (int i = 0; i < 30; ++i) {
    const dist::Watchdog::Scope scope(watchdog, "all_reduce");
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(1200ms);  // idle: nothing in flight
  CHECK(reports.reports() == 0);
  // Timeout 0: no limit.
  watchdog.set_timeout(0);
  {
    const dist::Watchdog::Scope scope(watchdog, "barrier");
    std::this_thread::sleep_for(300ms);
  }
  CHECK(reports.reports() == 0);
  // A timeout set while an operation waits applies to it.
  {
    const dist::Watchdog::Scope scope(watchdog, "all_reduce_max");
    watchdog.set_timeout(0.1);
    REQUIRE(reports.wait_for_one());
  }
  CHECK(reports.operation == "all_reduce_max");
}

TEST_CASE("watchdog: nested operations: the inner one while it lasts, then the outer one") {
  Reports reports;
  dist::Watchdog watchdog(reports.callback());
  watchdog.set_timeout(0.3);
  const dist::Watchdog::Scope outer(watchdog, "broadcast");
  {
    const dist::Watchdog::Scope inner(watchdog, "the GPU communicator's set-up");
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE(reports.wait_for_one());
  CHECK(reports.operation == "broadcast");
  CHECK(reports.seconds >= 0.3);
}

TEST_CASE("watchdog: timeouts are seconds, 0 or more") {
  dist::Watchdog watchdog([](const char*, double) {});
  CHECK_THROWS_WITH_AS(watchdog.set_timeout(-1),
                       "collective timeout: expected seconds, a number 0 or more (0: no timeout), "
                       "got -1",
                       tf::Error);
  CHECK_THROWS_AS(watchdog.set_timeout(NAN), tf::Error);
  CHECK(dist::parse_timeout("0", "x") == 0);
  CHECK(dist::parse_timeout("2.5", "x") == 2.5);
  CHECK(dist::parse_timeout("600", "x") == 600);
  CHECK(dist::parse_timeout("1e3", "x") == 1000);
  for (const char* bad : {"", "-1", "+5", "abc", "5s", " 5", "nan", "inf", "1e999"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(dist::parse_timeout(bad, "TINYFORMER_COLLECTIVE_TIMEOUT"),
                         ("TINYFORMER_COLLECTIVE_TIMEOUT: expected seconds, a number 0 or more (0: "
                          "no timeout), got '" +
                          std::string(bad) + "'")
                             .c_str(),
                         tf::Error);
  }
}

TEST_CASE("collective timeout: the environment's, else 600 s, unless set") {
  const char* saved = std::getenv(dist::kCollectiveTimeoutVariable);
  const std::string saved_value = saved != nullptr ? saved : "";
  unsetenv(dist::kCollectiveTimeoutVariable);
  CHECK(dist::collective_timeout() == dist::kDefaultCollectiveTimeout);
  CHECK(dist::kDefaultCollectiveTimeout == 600);
  setenv(dist::kCollectiveTimeoutVariable, "7.5", 1);
  CHECK(dist::collective_timeout() == 7.5);
  setenv(dist::kCollectiveTimeoutVariable, "soon", 1);
  CHECK_THROWS_WITH_AS(dist::collective_timeout(),
                       "TINYFORMER_COLLECTIVE_TIMEOUT: expected seconds, a number 0 or more (0: "
                       "no timeout), got 'soon'",
                       tf::Error);
  CHECK_THROWS_AS(dist::set_collective_timeout(-2), tf::Error);
  dist::set_collective_timeout(3);  // set: the environment no longer counts
  CHECK(dist::collective_timeout() == 3);
  if (saved != nullptr) {
    setenv(dist::kCollectiveTimeoutVariable, saved_value.c_str(), 1);
  } else {
    unsetenv(dist::kCollectiveTimeoutVariable);
  }
}
