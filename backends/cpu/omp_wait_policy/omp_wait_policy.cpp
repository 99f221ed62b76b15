// libtinyformer_omp_wait_policy: sets GOMP_SPINCOUNT to a brief spin, unless the user set it or
// OMP_WAIT_POLICY, before libgomp reads its environment: an idle OpenMP worker spins for about as
// long as waking it from sleep would cost, then sleeps (docs/threading.md has the measurements).
//
// Why a brief spin. A worker that sleeps at once (passive waiting) is woken at the start of the
// next parallel region, which in a virtual machine goes through the hypervisor and costs tens of
// microseconds, paid by every op of a layer that follows the op before it by a few microseconds.
// A worker that spins long (libgomp's own default, about 300,000 pauses: milliseconds) takes the
// time slices of any other program that wants the core. Spinning for about the wake-up's cost and
// then sleeping bounds both: it never wastes more than the wake-up it might save (the rule of
// spin-then-block waiting). kBriefSpin is the count of pause instructions that lasts about as
// long as one wake-up; a pause's length differs between CPUs, so the match is approximate.
// benchmark_ops's section "parallel region after 5 us" shows what a wake-up costs
// (docs/threading.md).
//
// libgomp reads its variables once, in its own initializer, so a constructor inside
// libtinyformer (which needs libgomp, and is therefore initialized after it) is too late, and so
// is the executable's .preinit_array (the C library's initializer, which runs next, resets the
// environment to the one the process started with). This library depends on the C library
// alone and is the last entry of libtinyformer's DT_NEEDED list, after libgomp; glibc's loader
// then runs its initializer after the C library's and before libgomp's. The test
// omp_wait_policy_default (tests/CMakeLists.txt) checks the outcome with OMP_DISPLAY_ENV: libgomp
// reports GOMP_SPINCOUNT 1000 unless OMP_WAIT_POLICY or GOMP_SPINCOUNT was given.
#include <cstdlib>

namespace {

constexpr const char* kBriefSpin = "1000";

bool set_by_library = false;

__attribute__((constructor)) void choose_brief_spin() {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    set_by_library = setenv("GOMP_SPINCOUNT", kBriefSpin, 0) == 0;
  }
}

}  // namespace

// Whether this library chose the spin count (the user had set neither variable). libtinyformer
// calls it for its runtime report, which also keeps the library among its needed ones under
// --as-needed.
extern "C" __attribute__((visibility("default"))) int tinyformer_omp_wait_policy_set_by_library() {
  return set_by_library ? 1 : 0;
}
