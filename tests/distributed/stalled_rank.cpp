// A job in which rank 1 stops calling collectives (it sleeps) while rank 0 waits for it in a
// barrier: the collectives' watchdog must end the whole job, naming the rank, the collective and
// the seconds waited, once the timeout (TINYFORMER_COLLECTIVE_TIMEOUT, or the seconds given as
// the argument, as --collective-timeout sets it) has passed. Run by expect_failure.sh.
#include <unistd.h>

#include <cstdlib>

#include "nn/distributed/distributed.h"

int main(int argc, char** argv) {
  namespace dist = tinyformer::distributed;
  if (argc > 1) dist::set_collective_timeout(std::atof(argv[1]));
  dist::init();
  if (dist::rank() == 1) ::sleep(300);  // far beyond the test's time limit
  dist::barrier();                      // rank 0 waits here
  dist::shutdown();
  return 0;
}
