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

// GOMP_SPINCOUNT as libgomp reads it: a count of pause instructions, with an optional k, M, G or
// T suffix (thousands to 10^12), or "infinite"; -1 when unset or unreadable.
long double spin_count_from_environment() {
  const char* env = std::getenv("GOMP_SPINCOUNT");
  if (env == nullptr) return -1;
  const std::string text = lower(env);
  if (text == "infinite" || text == "infinity") return 1e30L;
  char* end = nullptr;
  const unsigned long long count = std::strtoull(env, &end, 10);
  if (end == env) return -1;
  long double scale = 1;
  switch (std::tolower(static_cast<unsigned char>(*end))) {
    case 'k':
      scale = 1e3L;
      ++end;
      break;
    case 'm':
      scale = 1e6L;
      ++end;
      break;
    case 'g':
      scale = 1e9L;
      ++end;
      break;
    case 't':
      scale = 1e12L;
      ++end;
      break;
    default:
      break;
  }
  return *end == '\0' ? static_cast<long double>(count) * scale : -1;
}

// The longest spin that still counts as brief: about a quarter of a millisecond of pauses, ten
// times the library's default (omp_wait_policy.cpp).
constexpr long double kBriefSpinLimit = 10000;

// How libgomp's idle threads wait after a parallel region.
enum class Waiting {
  sleep,         // at once: OMP_WAIT_POLICY=passive, or GOMP_SPINCOUNT=0
  brief_spin,    // a spin of up to kBriefSpinLimit pauses, then sleep (the library's default)
  keep_spinning  // OMP_WAIT_POLICY=active, a longer spin, or libgomp's default of milliseconds
};

Waiting idle_threads() {
  if (tinyformer_omp_wait_policy_set_by_library() != 0) return Waiting::brief_spin;
  const long double spin = spin_count_from_environment();
  if (spin == 0) return Waiting::sleep;
  if (spin > 0) return spin <= kBriefSpinLimit ? Waiting::brief_spin : Waiting::keep_spinning;
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy != nullptr && lower(policy) == "passive" ? Waiting::sleep : Waiting::keep_spinning;
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
  switch (idle_threads()) {
    case Waiting::sleep:
      return {kPassiveGrain, "idle threads sleep at once"};
    case Waiting::brief_spin:
      return {kBriefSpinGrain, "idle threads spin briefly"};
    case Waiting::keep_spinning:
      break;
  }
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
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (tinyformer_omp_wait_policy_set_by_library() != 0) {
    return std::string("idle threads spin briefly, then sleep (GOMP_SPINCOUNT=") + spin +
           ", the library's default; OMP_WAIT_POLICY=passive to sleep at once)";
  }
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  std::string out = std::string("OMP_WAIT_POLICY=") + (policy != nullptr ? policy : "(unset)");
  if (spin != nullptr) out += std::string(", GOMP_SPINCOUNT=") + spin;
  return out;
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
