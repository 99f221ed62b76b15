// A job in which rank 1 throws while rank 0 waits for it in a collective: the uncaught
// exception must end the whole job with rank 1's message (distributed::init's terminate
// handler calls MPI_Abort), not leave rank 0 waiting. Run by expect_failure.sh.
#include <stdexcept>

#include "nn/distributed/distributed.h"

int main() {
  namespace dist = tinyformer::distributed;
  dist::init();
  if (dist::rank() == 1) throw std::runtime_error("rank one failed on purpose");
  dist::barrier();  // never completes: rank 1 does not come
  dist::shutdown();
  return 0;
}
