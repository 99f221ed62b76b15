// Elementwise functions of two tensors on the CPU (arithmetic, maximum/minimum, comparisons)
// and where(). Inputs arrive already broadcast to the output's shape as stride-0 views; map()
// (strided.h) stages those through contiguous blocks, so a bias add or a multiply by a scalar
// runs the same vectorized loop as two contiguous tensors.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"

namespace tinyformer::cpu {

namespace {

// int64 arithmetic wraps around (two's complement) instead of overflowing, which C++ leaves
// undefined.
template <typename T, typename Op>
T wrapping(T a, T b, Op op) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(op(static_cast<std::uint64_t>(a), static_cast<std::uint64_t>(b)));
  } else {
    return op(a, b);
  }
}

// maximum and minimum propagate NaN, as PyTorch does (a plain a > b ? a : b would drop it).
template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

template <typename T>
void arithmetic_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const auto run = [&](auto f) { map<T, T, T>(out, {a, b}, f); };
  switch (op) {
    case BinaryOp::add:
      return run([](T x, T y) { return wrapping(x, y, [](auto p, auto q) { return p + q; }); });
    case BinaryOp::sub:
      return run([](T x, T y) { return wrapping(x, y, [](auto p, auto q) { return p - q; }); });
    case BinaryOp::mul:
      return run([](T x, T y) { return wrapping(x, y, [](auto p, auto q) { return p * q; }); });
    case BinaryOp::div:
      if constexpr (std::is_integral_v<T>) {
        // Integer division truncates toward zero. Dividing by zero (and INT64_MIN / -1) would
        // trap, so those lanes write 0 (or wrap) and a zero divisor throws afterwards.
        std::atomic<bool> by_zero{false};
        run([&by_zero](T x, T y) -> T {
          if (y == 0) {
            by_zero.store(true, std::memory_order_relaxed);
            return 0;
          }
          return y == -1 ? static_cast<T>(0ull - static_cast<std::uint64_t>(x)) : x / y;
        });
        TF_CHECK(!by_zero.load(), "div: integer division by zero");
        return;
      } else {
        return run([](T x, T y) { return x / y; });
      }
    case BinaryOp::maximum:
      return run([](T x, T y) { return is_nan(x) || x > y ? x : y; });
    case BinaryOp::minimum:
      return run([](T x, T y) { return is_nan(x) || x < y ? x : y; });
    default:
      break;
  }
  fail(binary_name(op), ": not an arithmetic op");
}

template <typename T>
void comparison_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const auto run = [&](auto f) { map<bool, T, T>(out, {a, b}, f); };
  switch (op) {
    case BinaryOp::eq:
      return run([](T x, T y) { return x == y; });
    case BinaryOp::ne:
      return run([](T x, T y) { return x != y; });
    case BinaryOp::lt:
      return run([](T x, T y) { return x < y; });
    case BinaryOp::le:
      return run([](T x, T y) { return x <= y; });
    case BinaryOp::gt:
      return run([](T x, T y) { return x > y; });
    case BinaryOp::ge:
      return run([](T x, T y) { return x >= y; });
    default:
      break;
  }
  fail(binary_name(op), ": not a comparison");
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
        a.dtype(), name, [&](auto tag) { comparison_kernel<decltype(tag)>(op, a, b, out); });
  } else {
    check_dtype(name, "the output", out, a.dtype());
    dispatch<float, double, std::int64_t>(
        a.dtype(), name, [&](auto tag) { arithmetic_kernel<decltype(tag)>(op, a, b, out); });
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
