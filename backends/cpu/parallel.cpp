// OpenMP's wait policy and the parallel grain (backends/cpu/parallel.h).
#include "backends/cpu/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

#include "core/error.h"

#if TINYFORMER_OMP_WAIT_POLICY_LIBRARY
// backends/cpu/omp_wait_policy/omp_wait_policy.cpp (a library of its own; shared builds only).
extern "C" int tinyformer_omp_wait_policy_set_by_library();
#else
extern "C" inline int tinyformer_omp_wait_policy_set_by_library() {
  return 0;
}
#endif

namespace tinyformer::cpu {

namespace {

std::string lower(const char* s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Whether libgomp's idle threads sleep: OMP_WAIT_POLICY=passive (the library sets it when the
// user set neither variable), or GOMP_SPINCOUNT=0. Without either, and with active, they spin.
bool threads_sleep_when_idle() {
  if (tinyformer_omp_wait_policy_set_by_library() != 0) return true;
  if (const char* spin = std::getenv("GOMP_SPINCOUNT")) {
    return std::string(spin) == "0";
  }
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy != nullptr && lower(policy) == "passive";
}

struct Configured {
  std::int64_t grain;
  std::string source;
};

Configured configure() {
  if (const char* env = std::getenv("TINYFORMER_PARALLEL_GRAIN")) {
    char* end = nullptr;
    const long long value = std::strtoll(env, &end, 10);
    TF_CHECK(end != env && *end == '\0' && value > 0,
             "TINYFORMER_PARALLEL_GRAIN: expected a positive number of elements, got '", env, "'");
    return {value, "TINYFORMER_PARALLEL_GRAIN"};
  }
  if (threads_sleep_when_idle()) return {kPassiveGrain, "idle threads sleep"};
  return {kMinParallelGrain, "idle threads spin"};
}

const Configured& configured() {
  static const Configured c = configure();
  return c;
}

std::atomic<std::int64_t> override_grain{0};

}  // namespace

std::int64_t parallel_grain() {
  const std::int64_t forced = override_grain.load(std::memory_order_relaxed);
  return forced > 0 ? forced : configured().grain;
}

bool parallel_worth(std::int64_t elements, std::int64_t cost) {
  if (omp_in_parallel() || omp_get_max_threads() == 1) return false;
  return elements * std::max<std::int64_t>(cost, 1) >= parallel_grain();
}

int pass_threads(std::int64_t elements, std::int64_t cost) {
  return parallel_worth(elements, cost) ? omp_get_max_threads() : 1;
}

std::string wait_policy_info() {
  if (tinyformer_omp_wait_policy_set_by_library() != 0)
    return "passive waiting (the library's default; OMP_WAIT_POLICY=active to spin)";
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return std::string("OMP_WAIT_POLICY=") + (policy != nullptr ? policy : "(unset)");
}

std::string parallel_grain_info() {
  const std::int64_t forced = override_grain.load(std::memory_order_relaxed);
  const std::string source = forced > 0 ? "set_parallel_grain" : configured().source;
  return "passes under " + std::to_string(parallel_grain()) + " elements stay on one thread (" +
         source + ")";
}

void set_parallel_grain(std::int64_t grain) {
  TF_CHECK(grain >= 0, "set_parallel_grain: expected a grain >= 0 (0: the configured one), got ",
           grain);
  override_grain.store(grain, std::memory_order_relaxed);
}

}  // namespace tinyformer::cpu
