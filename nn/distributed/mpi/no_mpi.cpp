// nn/distributed/distributed.h in a build without MPI: a single process is a world of one, and
// anything that would communicate says that the build has no MPI.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "nn/distributed/distributed.h"
#include "nn/distributed/watchdog.h"

namespace tinyformer::distributed {

namespace {
[[noreturn]] void no_mpi(const char* op) {
  fail(op,
       ": this build has no MPI, so it cannot train across processes (install Open MPI, e.g. "
       "apt-get install libopenmpi-dev openmpi-bin, and configure with -DTINYFORMER_MPI=ON)");
}
}  // namespace

struct Work::State {};

bool available() {
  return false;
}
bool launched() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}
void init() {
  no_mpi("init");
}
bool is_initialized() {
  return false;
}
int rank() {
  return 0;
}
int world_size() {
  return 1;
}
int local_rank() {
  return 0;
}
int local_world_size() {
  return 1;
}
// A world of one never waits for another process; the setting is kept for what asks for it.
namespace {
double g_timeout = -1;  // -1: not set
}
void set_collective_timeout(double seconds) {
  TF_CHECK(std::isfinite(seconds) && seconds >= 0,
           "collective timeout: expected seconds, a number 0 or more (0: no timeout), got ",
           seconds);
  g_timeout = seconds;
}
double collective_timeout() {
  return g_timeout >= 0 ? g_timeout : collective_timeout_from_environment();
}
void shutdown() {}
void abort(std::string_view message, int status) {
  std::fprintf(stderr, "rank 0: %.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::_Exit(status);
}
bool Work::test() {
  return true;
}
void Work::wait() {}
void barrier() {
  no_mpi("barrier");
}
void broadcast(const Tensor&, int) {
  no_mpi("broadcast");
}
void all_reduce(const Tensor&, Reduction) {
  no_mpi("all_reduce");
}
Work all_reduce_async(const Tensor&, Reduction) {
  no_mpi("all_reduce");
}
std::string broadcast_string(const std::string&, int) {
  no_mpi("broadcast_string");
}
std::int64_t all_reduce_max(std::int64_t) {
  no_mpi("all_reduce_max");
}
std::int64_t all_reduce_min(std::int64_t) {
  no_mpi("all_reduce_min");
}

}  // namespace tinyformer::distributed
