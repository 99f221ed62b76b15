// Printable names of the op kinds.
#include "core/ops.h"

namespace tinyformer {

const char* unary_name(UnaryOp op) {
  static constexpr const char* names[] = {"neg",  "exp",     "log",  "sqrt", "rsqrt",     "abs",
                                          "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "pow"};
  return names[static_cast<int>(op)];
}

const char* binary_name(BinaryOp op) {
  static constexpr const char* names[] = {"add", "sub", "mul", "div", "maximum", "minimum",
                                          "eq",  "ne",  "lt",  "le",  "gt",      "ge"};
  return names[static_cast<int>(op)];
}

const char* reduce_name(ReduceOp op) {
  static constexpr const char* names[] = {"sum", "mean", "max", "min"};
  return names[static_cast<int>(op)];
}

}  // namespace tinyformer
