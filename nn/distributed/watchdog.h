// The collectives' watchdog: one thread per process that notices when a blocking collective has
// waited longer than a timeout for the other processes (one of them stalled, or they called
// different collectives) and ends the job, instead of letting it hang. distributed.h's
// collectives use it; it knows nothing of MPI and is tested on its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>

namespace tinyformer::distributed {

// The timeout of a job's collectives unless told otherwise: long enough for rank 0 to evaluate,
// save a checkpoint or draw a plot while the others wait for it (PyTorch's NCCL default too).
inline constexpr double kDefaultCollectiveTimeout = 600;

// A timeout in seconds read from text (a flag, an environment variable): a finite number, 0 or
// more, 0 meaning none. Anything else is an Error naming `what`, e.g.
// "TINYFORMER_COLLECTIVE_TIMEOUT: expected seconds, a number 0 or more (0: no timeout), got 'x'".
double parse_timeout(std::string_view text, std::string_view what);

// The environment's TINYFORMER_COLLECTIVE_TIMEOUT (parse_timeout's rules) when it is set, else
// kDefaultCollectiveTimeout.
inline constexpr const char* kCollectiveTimeoutVariable = "TINYFORMER_COLLECTIVE_TIMEOUT";
double collective_timeout_from_environment();

// Watches one operation at a time, the one the calling thread is blocked in (the processes of a
// job make their MPI calls from one thread). Entering and leaving an operation costs a clock read
// and a few atomic stores; the thread, started with the first timeout above 0, sleeps until the
// operation in flight could expire, so it wakes about once per timeout.
class Watchdog {
 public:
  // Runs on the watchdog's thread when `operation` has waited `seconds` >= the timeout; it is
  // meant to end the process (MPI_Abort). Should it return, the watchdog goes on watching
  // without firing again for the same operation.
  using Expired = std::function<void(const char* operation, double seconds)>;
  explicit Watchdog(Expired expired);
  // Stops the thread and waits for it.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Seconds an operation may wait before `expired` runs; 0: no limit. Throws Error for a
  // negative or non-finite value.
  void set_timeout(double seconds);
  double timeout() const;

  // Marks `operation` (a string that outlives the scope, a literal) as in flight on the calling
  // thread from construction to destruction. Scopes nest: the inner one is watched while it
  // lasts, then the outer one again from its own start.
  class Scope {
   public:
    Scope(Watchdog& watchdog, const char* operation);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog& watchdog_;
    const char* outer_operation_;
    std::int64_t outer_start_;
  };

 private:
  void run();

  Expired expired_;
  std::atomic<const char*> operation_{nullptr};  // in flight, or null
  std::atomic<std::int64_t> start_{0};           // its start, steady clock nanoseconds
  std::atomic<double> timeout_{0};
  mutable std::mutex mutex_;  // guards stop_ and the thread's start; the condition's wait
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tinyformer::distributed
