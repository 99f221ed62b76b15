// Elementwise functions of two tensors on the CPU (arithmetic, maximum/minimum, comparisons)
// and where(): one generic loop over the op's functor from core/binary_math.h. Inputs arrive
// already broadcast to the output's shape as stride-0 views; map() (strided.h) reads an input that
// is constant along the rows (a scalar, a row's mask) once per row, so a bias add, a multiply by a
// scalar or a masked fill runs a vectorized loop as two contiguous tensors do.
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/binary_math.h"

namespace tinyformer::cpu {

namespace {

// out = op(a, b): the op's functor from core/binary_math.h in map()'s loop.
template <typename T>
void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_binary<T>(op, [&](auto row, auto math) {
    using Math = decltype(math);
    if constexpr (is_comparison(row.value)) {
      map<bool, T, T>(out, {a, b}, math);
    } else if constexpr (std::is_same_v<T, bool>) {
      fail(binary_name(op), ": expected numeric tensors, got bool");
    } else if constexpr (std::is_integral_v<T> && row.value == BinaryOp::div) {
      // A zero divisor's lane writes 0; the error is thrown after the loop (an exception cannot
      // leave an OpenMP region).
      std::atomic<bool> by_zero{false};
      map<T, T, T>(out, {a, b}, [&by_zero, math](T x, T y) {
        if (Math::divides_by_zero(y)) by_zero.store(true, std::memory_order_relaxed);
        return math(x, y);
      });
      TF_CHECK(!by_zero.load(), "div: integer division by zero");
    } else {
      map<T, T, T>(out, {a, b}, math);
    }
  });
}

}  // namespace

// a, b, out: same shape (a and b broadcast views); out is bool for comparisons, else a's dtype.
void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = binary_name(op);
  check_same_shape(name, out, {a, b});
  TF_CHECK(a.dtype() == b.dtype(), name, ": dtypes differ: ", a.dtype(), " and ", b.dtype());
  if (is_comparison(op)) {
    check_dtype(name, "the output", out, DType::boolean);
    dispatch<float, double, std::int64_t, bool>(
        a.dtype(), name, [&](auto tag) { binary_kernel<decltype(tag)>(op, a, b, out); });
  } else {
    check_dtype(name, "the output", out, a.dtype());
    dispatch<float, double, std::int64_t>(
        a.dtype(), name, [&](auto tag) { binary_kernel<decltype(tag)>(op, a, b, out); });
  }
}

// cond (bool), a, b, out: same shape; out = cond ? a : b.
void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_shape("where", out, {cond, a, b});
  check_dtype("where", "the condition", cond, DType::boolean);
  check_dtype("where", "a", a, out.dtype());
  check_dtype("where", "b", b, out.dtype());
  dispatch<float, double, std::int64_t, bool>(out.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    map<T, bool, T, T>(out, {cond, a, b}, [](bool c, T x, T y) { return c ? x : y; });
  });
}

}  // namespace tinyformer::cpu
