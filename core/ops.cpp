// Printable names of the op kinds.
#include "core/ops.h"

namespace tinyformer {

const char* reduce_name(ReduceOp op) {
  static constexpr const char* names[] = {"sum", "mean", "max", "min"};
  return names[static_cast<int>(op)];
}

}  // namespace tinyformer
