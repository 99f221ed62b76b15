// When a CPU loop is worth handing to the OpenMP team.
//
// A parallel region wakes the team's idle threads and ends at a barrier where the calling thread
// waits for the last of them. Idle threads spin briefly and then sleep (the library's default,
// docs/threading.md); a region that follows some work on the calling thread alone for longer
// than that spin, as a pass can follow an op's bookkeeping, finds them asleep and pays for waking
// them, which in a virtual machine goes through the hypervisor and can cost more than a short
// copy takes on one thread (benchmark_ops's section "parallel region after 5 us" shows it;
// docs/threading.md). A pass over n elements gains n * c * (1 - 1/T) from T threads (c: one
// thread's time per element), so it goes parallel only above n = wake / (c * (1 - 1/T)): the
// grain.
//
// The grain is fixed for the process, not measured at run time: the wake-up varies several-fold
// from one moment to the next (with what else runs, and whether a worker has gone to sleep yet),
// and a measured grain would move with it. It is kPassiveGrain elements when idle threads sleep
// at once (OMP_WAIT_POLICY=passive, GOMP_SPINCOUNT=0), kBriefSpinGrain when they spin briefly
// first (the library's default GOMP_SPINCOUNT=1000, any count up to 10000: inside a layer the
// next op usually finds them still awake), and kMinParallelGrain when they keep spinning
// (OMP_WAIT_POLICY=active, a longer GOMP_SPINCOUNT, or libgomp's own default where the library
// did not set one), where waking costs about a microsecond; TINYFORMER_PARALLEL_GRAIN=<elements>
// sets it. A kernel whose elements each cost `cost` streaming elements (a read and a write of a
// float) passes that cost.
//
// The grain decides only how many threads run a loop, never what it computes: every loop that
// uses it gives the same bits on any number of threads (reductions combine fixed blocks in a
// fixed order).
#pragma once

#include <cstdint>
#include <string>

namespace tinyformer::cpu {

inline constexpr std::int64_t kMinParallelGrain = std::int64_t{1} << 15;
inline constexpr std::int64_t kBriefSpinGrain = std::int64_t{1} << 17;
inline constexpr std::int64_t kPassiveGrain = std::int64_t{1} << 19;

// Elements of a streaming pass below which a loop stays on the calling thread.
std::int64_t parallel_grain();

// Whether a pass over `elements`, each costing `cost` streaming elements, goes to the team: at
// least parallel_grain() of work, more than one thread, not already inside a parallel region.
bool parallel_worth(std::int64_t elements, std::int64_t cost = 1);

// Threads for such a pass: OpenMP's maximum, or 1 where parallel_worth() says no.
int pass_threads(std::int64_t elements, std::int64_t cost = 1);

// The grain and where it comes from, for runtime_info().
std::string parallel_grain_info();

// How idle OpenMP threads wait, as libgomp took it at start-up (backends/cpu/omp_wait_policy/),
// for runtime_info().
std::string wait_policy_info();

// Overrides the grain for this process (tests: the threaded paths at small sizes, the same
// results on either side of it); 0 goes back to the configured one.
void set_parallel_grain(std::int64_t grain);

}  // namespace tinyformer::cpu
