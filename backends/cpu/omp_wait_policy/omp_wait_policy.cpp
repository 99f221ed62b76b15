// libtinyformer_omp_wait_policy: sets OMP_WAIT_POLICY=passive, unless the user set it, before
// libgomp reads its environment, so that idle OpenMP workers sleep instead of spinning on cores
// that other programs need (README, "Threading").
//
// libgomp reads OMP_WAIT_POLICY once, in its own initializer, so a constructor inside
// libtinyformer (which needs libgomp, and is therefore initialized after it) is too late, and so
// is the executable's .preinit_array (the C library's initializer, which runs next, resets the
// environment to the one the process started with). This library depends on the C library
// alone and is the last entry of libtinyformer's DT_NEEDED list, after libgomp; glibc's loader
// then runs its initializer after the C library's and before libgomp's. The test
// omp_wait_policy_default (tests/CMakeLists.txt) checks the outcome with OMP_DISPLAY_ENV: libgomp
// reports GOMP_SPINCOUNT 0 (passive) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT was given.
#include <cstdlib>

namespace {
bool set_by_library = false;

__attribute__((constructor)) void choose_passive_waiting() {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    set_by_library = setenv("OMP_WAIT_POLICY", "passive", 0) == 0;
  }
}
}  // namespace

// Whether this library chose passive waiting (the user had set neither variable). libtinyformer
// calls it for its runtime report, which also keeps the library among its needed ones under
// --as-needed.
extern "C" __attribute__((visibility("default"))) int tinyformer_omp_wait_policy_set_by_library() {
  return set_by_library ? 1 : 0;
}
