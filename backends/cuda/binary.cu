// Elementwise functions of two tensors on the GPU (arithmetic, maximum/minimum, comparisons) and
// where(): one generic kernel over the op's functor from core/binary_math.h. Inputs arrive already
// broadcast to the output's shape as stride-0 views; map() (elementwise.cuh) runs the vectorized
// loop when every operand is contiguous and addresses each operand through its own strides
// otherwise, so a bias add reads the bias row in place.
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/strided.cuh"
#include "core/binary_math.h"

namespace tinyformer::cuda {

namespace {

// The device-side call of a BinaryMath functor M.
template <typename M>
struct Apply {
  M math;
  template <typename A>
  __device__ auto operator()(A x, A y) const {
    return math(x, y);
  }
};

// Integer division: a zero divisor's lane writes 0 and raises `*by_zero` (every such lane stores
// the same 1, so no atomic is needed).
template <typename M>
struct CheckedDiv {
  M math;
  std::int64_t* by_zero;
  __device__ std::int64_t operator()(std::int64_t x, std::int64_t y) const {
    if (M::divides_by_zero(y)) *by_zero = 1;
    return math(x, y);
  }
};

struct Select {
  template <typename T>
  __device__ T operator()(bool c, T x, T y) const {
    return c ? x : y;
  }
};

// out = op(a, b); T is the storage type of a and b, out is T or bool (comparisons).
template <typename T>
void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = binary_name(op);
  visit_binary<acc_t<T>>(op, [&](auto row, auto math) {
    using M = decltype(math);
    if constexpr (is_comparison(row.value)) {
      map<bool, T, T>(name, Widened<bool, Apply<M>>{{math}}, out, {a, b});
    } else if constexpr (std::is_same_v<T, bool>) {
      fail(name, ": expected numeric tensors, got bool");
    } else if constexpr (std::is_integral_v<T> && row.value == BinaryOp::div) {
      // The host must learn of a zero divisor to throw, so this op waits for its kernel:
      // integer division is rare (index arithmetic), and the error must not pass silently.
      const Tensor by_zero = zeros({1}, {.dtype = DType::int64, .device = out.device()});
      map<T, T, T>(name, CheckedDiv<M>{math, device_data<std::int64_t>(by_zero)}, out, {a, b});
      TF_CHECK(by_zero.item<std::int64_t>() == 0, "div: integer division by zero");
    } else {
      map<T, T, T>(name, Widened<T, Apply<M>>{{math}}, out, {a, b});
    }
  });
}

}  // namespace

// a, b, out: same shape (a and b broadcast views); out is bool for comparisons, else a's dtype.
void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = binary_name(op);
  require_same_shape(name, out, {a, b});
  TF_CHECK(a.dtype() == b.dtype(), name, ": dtypes differ: ", a.dtype(), " and ", b.dtype());
  if (is_comparison(op)) {
    check_dtype(name, "the output", out, DType::boolean);
    dispatch<float, double, bf16, std::int64_t, bool>(
        a.dtype(), name, [&](auto tag) { binary_kernel<decltype(tag)>(op, a, b, out); });
  } else {
    check_dtype(name, "the output", out, a.dtype());
    dispatch<float, double, bf16, std::int64_t>(
        a.dtype(), name, [&](auto tag) { binary_kernel<decltype(tag)>(op, a, b, out); });
  }
}

// cond (bool), a, b, out: same shape; out = cond ? a : b. The values are selected as stored
// (no conversion), so one kernel serves every dtype.
void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  require_same_shape("where", out, {cond, a, b});
  check_dtype("where", "the condition", cond, DType::boolean);
  check_dtype("where", "a", a, out.dtype());
  check_dtype("where", "b", b, out.dtype());
  dispatch<float, double, bf16, std::int64_t, bool>(out.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    map<T, bool, T, T>("where", Select{}, out, {cond, a, b});
  });
}

}  // namespace tinyformer::cuda
