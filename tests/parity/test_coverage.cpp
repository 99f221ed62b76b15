// Every primitive op of core/ops.def, and every row of core/elementwise.def in every dtype the
// target takes, has a parity case. Runs in each executable that holds the cases (so per
// backend), with or without a GPU: the cases are declared and built without running them.
#include <string>
#include <vector>

#include "core/ops.h"
#include "parity/parity.h"

namespace tinyformer::parity {

namespace {

// "a, b" of the names, for the failure message.
void append(std::string& list, const std::string& name) {
  list += (list.empty() ? "" : ", ") + name;
}

}  // namespace

TEST_CASE("coverage: every primitive op has a parity case") {
  const auto& covered = covered_ops();
  std::string missing;
  for (const char* op : op_names) {
    if (!covered.contains(op)) append(missing, op);
  }
  INFO("ops of core/ops.def without a parity case for the ", std::string(target().name),
       " backend: ", missing);
  CHECK(missing.empty());
  // And no case claims an op that does not exist (a typo would hide a missing case).
  for (const auto& name : covered) {
    bool known = false;
    for (const char* op : op_names) known = known || name == op;
    INFO("tests/parity covers an op that core/ops.def does not list: ", name);
    CHECK(known);
  }
}

TEST_CASE("coverage: every row of the elementwise table has a parity case in each dtype") {
  std::string missing;
  const std::vector<UnaryCase> forward = unary_cases(false), backward = unary_cases(true);
  auto has_unary = [](const std::vector<UnaryCase>& cases, UnaryOp op, DType dtype) {
    for (const UnaryCase& c : cases) {
      if (c.op == op && c.dtype == dtype) return true;
    }
    return false;
  };
  for (UnaryOp op : unary_ops) {
    std::vector<DType> dtypes = floating_dtypes();
    for (DType dtype : dtypes) {
      if (!has_unary(forward, op, dtype)) {
        append(missing, std::string("unary ") + unary_name(op) + " " + dtype_name(dtype));
      }
      if (!has_unary(backward, op, dtype)) {
        append(missing, std::string("unary_backward ") + unary_name(op) + " " + dtype_name(dtype));
      }
    }
    if (unary_traits(op).int64 && supports(DType::int64) && !has_unary(forward, op, DType::int64)) {
      append(missing, std::string("unary ") + unary_name(op) + " int64");
    }
  }
  const std::vector<BinaryCase> binary = binary_cases();
  for (BinaryOp op : binary_ops) {
    std::vector<DType> dtypes =
        supported({DType::float32, DType::float64, DType::bfloat16, DType::int64});
    if (is_comparison(op) && supports(DType::boolean)) dtypes.push_back(DType::boolean);
    for (DType dtype : dtypes) {
      bool found = false;
      for (const BinaryCase& c : binary) found = found || (c.op == op && c.dtype == dtype);
      if (!found)
        append(missing, std::string("binary ") + binary_name(op) + " " + dtype_name(dtype));
    }
  }
  INFO("rows of core/elementwise.def without a parity case for the ", std::string(target().name),
       " backend: ", missing);
  CHECK(missing.empty());
}

}  // namespace tinyformer::parity
