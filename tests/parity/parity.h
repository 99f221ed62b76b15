// The backend-parity harness: every primitive op run on a backend under test (the target) and on
// the reference backend (backends/reference, plain loops in double) with the same inputs, in the
// same layout (contiguous, transposed, sliced, broadcast), compared with a tolerance per dtype.
//
// The case files (test_<family>.cpp in this folder) are compiled into each backend's test
// executable: test_backends runs them on the CPU backend, test_cuda on the CUDA backend. The
// executable says which backend with one definition of target() (tests/backends/parity_target.cpp,
// tests/cuda/parity_target.cpp). A case file declares the ops it covers with TF_PARITY_COVERS and
// builds its elementwise cases from the rows of core/elementwise.def; test_coverage.cpp fails when
// an op or a row has no case. Where the target cannot run (no GPU) the cases skip themselves.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace tinyformer::parity {

// --- the backend under test ---

struct Target {
  const char* name;  // as messages print it: "CPU", "CUDA"
  Backend& (*backend)();
  Device device;
  bool (*usable)();           // false where it cannot run here (no GPU)
  std::vector<DType> dtypes;  // the dtypes its kernels take
};
// Defined once per test executable.
const Target& target();

// True when the target can run. When not, prints (once) why its parity cases are skipped. Every
// case starts with `if (!available()) return;`.
bool available();
// The backend under test, the reference backend, and the target's device.
Backend& dev();
Backend& ref();
Device device();
// Whether the target takes `dtype`, and the subset of `dtypes` it takes.
bool supports(DType dtype);
std::vector<DType> supported(std::initializer_list<DType> dtypes);
// The target's floating dtypes (float32, float64, and bfloat16 where it has it).
std::vector<DType> floating_dtypes();

// A copy of a host tensor on the target's device (always a new storage, also on the CPU).
Tensor to_dev(const Tensor& host);

// --- coverage ---

std::set<std::string>& covered_ops();
struct Covers {
  explicit Covers(const char* op) { covered_ops().insert(op); }
};
#define TF_PARITY_CONCAT_(a, b) a##b
#define TF_PARITY_CONCAT(a, b) TF_PARITY_CONCAT_(a, b)
// Declares that this file holds parity cases for primitive op `op` (a name from core/ops.def).
#define TF_PARITY_COVERS(op) \
  static const ::tinyformer::parity::Covers TF_PARITY_CONCAT(tf_parity_covers_, __LINE__)(#op)

// The elementwise cases, as data (test_elementwise.cpp builds them from the table rows and runs
// them; test_coverage.cpp checks that every row has one per dtype it takes).
struct UnaryCase {
  UnaryOp op;
  double alpha;  // pow_scalar's exponent
  DType dtype;
  double lo, hi;  // the inputs' range (inside the row's domain)
};
struct BinaryCase {
  BinaryOp op;
  DType dtype;
  double a_lo, a_hi, b_lo, b_hi;
};
std::vector<UnaryCase> unary_cases(bool backward);
std::vector<BinaryCase> binary_cases();

// --- inputs ---

// How an input is laid out in memory; the values are the same in every layout.
enum class Layout {
  contiguous,
  transposed,  // the last two dims swapped in memory (a transpose view of a contiguous tensor)
  sliced,      // every other element along the last dim, rows padded, at an offset: no dims merge
  broadcast,   // the first dim has stride 0 (one row repeated)
};
const char* layout_name(Layout layout);

// An input for one case: the same values in the same layout for the reference backend (on the
// CPU) and for the target (on its device).
struct Pair {
  Tensor ref;
  Tensor dev;
};

// Uniform values in [lo, hi) of `dtype` (float32, float64, bfloat16, int64 rounds them down,
// bool takes value > 0), laid out as `layout`, on both sides. Deterministic in `seed`.
Pair make_pair(const Shape& shape, DType dtype, Layout layout, std::uint64_t seed, double lo = -1.0,
               double hi = 1.0);
// A contiguous output of `shape` on both sides, filled with NaN (floating) or a sentinel so that
// a kernel that skips an element is caught.
Pair make_output(const Shape& shape, DType dtype);
// Same values on both sides from explicit host values (int64 indices, targets).
Pair make_from(const std::vector<std::int64_t>& values, const Shape& shape);
// A host tensor on both sides, contiguous.
Pair on_both(const Tensor& host);

// --- bfloat16 cases ---
// A bfloat16 case gives the target bfloat16 tensors and the reference the same (exactly
// widened) values in float32, so that the reference's result is rounded once, to float32; the
// comparison widens the target's bfloat16 result and uses bfloat16's tolerance.

// The dtype the reference computes a case of `dtype` in: float32 for a bfloat16 case.
DType ref_dtype(DType dtype);
// The values of `host` (a CPU tensor) on both sides, the target's in `dtype`, contiguous.
Pair on_both(const Tensor& host, DType dtype);
// make_pair for any floating dtype: bfloat16 is converted on the target's device from float32
// storage of the same layout; the reference side holds the rounded values in float32, in that
// layout too.
Pair make_rounded_pair(const Shape& shape, DType dtype, Layout layout, std::uint64_t seed,
                       double lo = -1.0, double hi = 1.0);
// make_output with the target side in `dtype` and the reference side in ref_dtype(dtype).
Pair make_rounded_output(const Shape& shape, DType dtype);

// --- errors ---

// The message of the Error `f` throws, or "(no error)" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// --- comparing ---

// |dev - ref| <= atol + rtol * |ref| for every element (NaN only where the reference has NaN);
// reports the first mismatch with its index. A bfloat16 `dev` against a float32 `ref` compares
// in float32. Defaults per dtype (of dev): float64 1e-12, float32 1e-5 (relative) and 1e-6
// (absolute), bfloat16 2e-2 and 1e-2; integers and bools exactly.
void check_close(const Tensor& dev, const Tensor& ref, const std::string& what, double rtol = -1.0,
                 double atol = -1.0);
inline void check_close(const Pair& p, const std::string& what, double rtol = -1.0,
                        double atol = -1.0) {
  check_close(p.dev, p.ref, what, rtol, atol);
}

}  // namespace tinyformer::parity
