// The entry point of the multi-process suite: started by `mpirun -np 2` (run_mpi.sh), it joins
// the job before the cases run and leaves it after; every rank runs every case, so the
// collectives inside them meet. The exit status is the worst of all ranks'.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "nn/distributed/distributed.h"

int main(int argc, char** argv) {
  namespace dist = tinyformer::distributed;
  dist::init();
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
