// Every primitive op of core/ops.def has a CUDA parity case (runs with or without a GPU).
#include <string>

#include "core/ops.h"
#include "parity.h"

TEST_CASE("coverage: every primitive op has a CUDA parity case") {
  const auto& covered = tinyformer::parity::covered_ops();
  std::string missing;
  for (const char* op : tinyformer::op_names) {
    if (!covered.contains(op)) missing += std::string(missing.empty() ? "" : ", ") + op;
  }
  INFO("ops of core/ops.def without a case in tests/cuda: ", missing);
  CHECK(missing.empty());
  // And no case claims an op that does not exist (a typo would hide a missing case).
  for (const auto& name : covered) {
    bool known = false;
    for (const char* op : tinyformer::op_names) known = known || name == op;
    INFO("tests/cuda covers an op that core/ops.def does not list: ", name);
    CHECK(known);
  }
}
