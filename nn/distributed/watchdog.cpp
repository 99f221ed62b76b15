// The collectives' watchdog: a thread that sleeps until the operation in flight could have
// waited too long, and then hands it to the job's end.
#include "nn/distributed/watchdog.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/error.h"

namespace tinyformer::distributed {

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

double parse_timeout(std::string_view text, std::string_view what) {
  // from_chars: no spaces, no '+', all of the text.
  double seconds = NAN;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, seconds);
  TF_CHECK(ec == std::errc() && ptr == end && std::isfinite(seconds) && seconds >= 0, what,
           ": expected seconds, a number 0 or more (0: no timeout), got '", text, "'");
  return seconds;
}

double collective_timeout_from_environment() {
  const char* text = std::getenv(kCollectiveTimeoutVariable);
  return text == nullptr ? kDefaultCollectiveTimeout
                         : parse_timeout(text, kCollectiveTimeoutVariable);
}

Watchdog::Watchdog(Expired expired) : expired_(std::move(expired)) {}

Watchdog::~Watchdog() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (!thread_.joinable()) return;
  // `expired` ending the process through its static destructors would land here on the
  // watchdog's own thread, which cannot wait for itself.
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

void Watchdog::set_timeout(double seconds) {
  TF_CHECK(std::isfinite(seconds) && seconds >= 0,
           "collective timeout: expected seconds, a number 0 or more (0: no timeout), got ",
           seconds);
  {
    const std::lock_guard lock(mutex_);
    timeout_.store(seconds);
    if (seconds > 0 && !thread_.joinable() && !stop_) thread_ = std::thread([this] { run(); });
  }
  wake_.notify_all();
}

double Watchdog::timeout() const {
  return timeout_.load();
}

Watchdog::Scope::Scope(Watchdog& watchdog, const char* operation)
    : watchdog_(watchdog),
      outer_operation_(watchdog.operation_.load(std::memory_order_relaxed)),
      outer_start_(watchdog.start_.load(std::memory_order_relaxed)) {
  // The start first: whoever sees the operation sees its start, or a later one.
  watchdog_.start_.store(now_ns(), std::memory_order_relaxed);
  watchdog_.operation_.store(operation, std::memory_order_release);
}

Watchdog::Scope::~Scope() {
  // The outer operation first, then its (earlier) start, so that the inner one is never seen
  // with the outer one's start.
  watchdog_.operation_.store(outer_operation_, std::memory_order_release);
  if (outer_operation_ != nullptr) {
    watchdog_.start_.store(outer_start_, std::memory_order_relaxed);
  }
}

void Watchdog::run() {
  std::unique_lock lock(mutex_);
  std::int64_t fired_start = -1;  // the start of the operation `expired` last returned from
  while (!stop_) {
    const double timeout = timeout_.load();
    if (!(timeout > 0)) {
      wake_.wait(lock);
      continue;
    }
    const auto limit = static_cast<std::int64_t>(timeout * 1e9);
    // The time first: an operation that was not in flight then cannot expire before now + limit.
    const std::int64_t now = now_ns();
    const char* operation = operation_.load(std::memory_order_acquire);
    const std::int64_t start = start_.load(std::memory_order_relaxed);
    std::int64_t wake_at = now + limit;
    if (operation != nullptr && now - start >= limit && start != fired_start) {
      fired_start = start;
      lock.unlock();
      expired_(operation, static_cast<double>(now - start) * 1e-9);
      lock.lock();
      continue;
    }
    if (operation != nullptr && start != fired_start) wake_at = start + limit;
    wake_.wait_until(lock, Clock::time_point(std::chrono::nanoseconds(wake_at)));
  }
}

}  // namespace tinyformer::distributed
