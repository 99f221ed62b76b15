// The entry point of the multi-process suite: started by `mpirun -np 2` (run_mpi.sh), it joins
// the job before the cases run and leaves it after; every rank runs every case, so the
// collectives inside them meet. The exit status is the worst of all ranks'.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "nn/distributed/distributed.h"

int main(int argc, char** argv) {
  namespace dist = tinyformer::distributed;
  dist::init();
  // For the GPU cases (test_nccl.cpp): NCCL refuses two ranks of one host on the same GPU, and
  // a test machine may have one. A host id of its own per rank makes each rank look like a
  // separate machine to NCCL, which then connects them over its socket transport on loopback.
  const std::string host_id = "tinyformer-test-rank-" + std::to_string(dist::rank());
  setenv("NCCL_HOSTID", host_id.c_str(), 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_P2P_DISABLE", "1", 0);
  setenv("NCCL_SHM_DISABLE", "1", 0);
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) {
    dist::shutdown();
    return status;
  }
  const auto worst = dist::all_reduce_max(status);
  dist::shutdown();
  return static_cast<int>(worst);
}
