// The CUDA backend-parity harness: every primitive op run on the GPU and on the CPU backend
// with the same inputs (the same values in the same layout: contiguous, transposed, sliced,
// broadcast), compared with a tolerance per dtype. Each family's cases live in
// test_<family>.cpp and declare the ops they cover with TF_PARITY_COVERS; test_coverage.cpp
// fails when an op of core/ops.def has no case. Without a GPU the cases skip themselves.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <string>

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tinyformer::parity {

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

// --- skipping ---

// True when a GPU can be used. When not, prints (once) why the CUDA cases are skipped. Every
// case starts with `if (!gpu()) return;`.
bool gpu();

Backend& cpu_be();
Backend& cuda_be();

// --- inputs ---

// How an input is laid out in memory; the values are the same in every layout.
enum class Layout {
  contiguous,
  transposed,  // the last two dims swapped in memory (a transpose view of a contiguous tensor)
  sliced,      // every other element along the last dim, rows padded, at an offset: no dims merge
  broadcast,   // the first dim has stride 0 (one row repeated)
};
const char* layout_name(Layout layout);

// An input for one case: the same values and the same layout on both devices.
struct Pair {
  Tensor cpu;
  Tensor cuda;
};

// Uniform values in [lo, hi) of `dtype` (float32, float64, bfloat16, int64 rounds them down,
// bool takes value > 0), laid out as `layout`, on both devices. Deterministic in `seed`.
Pair make_pair(const Shape& shape, DType dtype, Layout layout, std::uint64_t seed, double lo = -1.0,
               double hi = 1.0);
// A contiguous output of `shape` on both devices, filled with NaN (floating) or a sentinel so
// that a kernel that skips an element is caught.
Pair make_output(const Shape& shape, DType dtype);
// Same values on both devices from explicit host values (int64 indices, targets).
Pair make_from(const std::vector<std::int64_t>& values, const Shape& shape);

// --- bfloat16 cases ---
// The CPU backend has no bfloat16 kernels: a bfloat16 case runs the GPU in bfloat16 and the CPU
// in float32 on the same rounded values.

// The dtype the CPU computes a case in: float32 for a bfloat16 case.
DType cpu_dtype(DType dtype);
// The values of `host` (a CPU tensor) on both devices, the GPU's in `dtype`, contiguous. The
// conversion to bfloat16 runs on the GPU; the CPU side holds the rounded values.
Pair on_both(const Tensor& host, DType dtype);
// make_pair for any floating dtype: bfloat16 is converted on the GPU from float32 storage of the
// same layout; the CPU side holds the rounded values in float32, in that layout too.
Pair make_rounded_pair(const Shape& shape, DType dtype, Layout layout, std::uint64_t seed,
                       double lo = -1.0, double hi = 1.0);
// make_output with the GPU side in `dtype` and the CPU side in cpu_dtype(dtype).
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

// |cuda - cpu| <= atol + rtol * |cpu| for every element (NaN only where the CPU has NaN);
// reports the first mismatch with its index. Defaults per dtype: float64 1e-12, float32 1e-5
// (relative) and 1e-6 (absolute), bfloat16 2e-2 and 1e-2; integers and bools exactly.
void check_close(const Tensor& cuda, const Tensor& cpu, const std::string& what, double rtol = -1.0,
                 double atol = -1.0);
inline void check_close(const Pair& p, const std::string& what, double rtol = -1.0,
                        double atol = -1.0) {
  check_close(p.cuda, p.cpu, what, rtol, atol);
}

}  // namespace tinyformer::parity
