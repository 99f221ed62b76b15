// Elementwise functions of two tensors on the GPU (arithmetic, maximum/minimum, comparisons) and
// where(). Inputs arrive already broadcast to the output's shape as stride-0 views; map()
// (elementwise.cuh) runs the vectorized loop when every operand is contiguous and addresses
// each operand through its own strides otherwise, so a bias add reads the bias row in place.
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/strided.cuh"

namespace tinyformer::cuda {

namespace {

// int64 arithmetic wraps around (two's complement), as on the CPU.
template <typename A, typename Op>
__device__ inline A wrapping(A x, A y, Op op) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(op(static_cast<std::uint64_t>(x), static_cast<std::uint64_t>(y)));
  } else {
    return op(x, y);
  }
}

template <typename A>
__device__ inline bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

// --- arithmetic functors: A is the arithmetic type (float for bfloat16) ---

struct Plus {
  template <typename U>
  __device__ U operator()(U p, U q) const {
    return p + q;
  }
};
struct Minus {
  template <typename U>
  __device__ U operator()(U p, U q) const {
    return p - q;
  }
};
struct Times {
  template <typename U>
  __device__ U operator()(U p, U q) const {
    return p * q;
  }
};

struct Add {
  template <typename A>
  __device__ A operator()(A x, A y) const {
    return wrapping(x, y, Plus{});
  }
};
struct Sub {
  template <typename A>
  __device__ A operator()(A x, A y) const {
    return wrapping(x, y, Minus{});
  }
};
struct Mul {
  template <typename A>
  __device__ A operator()(A x, A y) const {
    return wrapping(x, y, Times{});
  }
};
struct Div {
  template <typename A>
  __device__ A operator()(A x, A y) const {
    return x / y;
  }
};
// Integer division truncates toward zero. A zero divisor would trap, so its lane writes 0 and
// raises `*by_zero` (every such lane stores the same 1, so no atomic is needed); INT64_MIN / -1
// wraps.
struct IntDiv {
  std::int64_t* by_zero;
  __device__ std::int64_t operator()(std::int64_t x, std::int64_t y) const {
    if (y == 0) {
      *by_zero = 1;
      return 0;
    }
    return y == -1 ? static_cast<std::int64_t>(0ull - static_cast<std::uint64_t>(x)) : x / y;
  }
};
// maximum and minimum propagate NaN, as PyTorch does (a plain x > y ? x : y would drop it).
struct Maximum {
  template <typename A>
  __device__ A operator()(A x, A y) const {
    return is_nan(x) || x > y ? x : y;
  }
};
struct Minimum {
  template <typename A>
  __device__ A operator()(A x, A y) const {
    return is_nan(x) || x < y ? x : y;
  }
};

// --- comparisons (bool results) ---

struct Eq {
  template <typename A>
  __device__ bool operator()(A x, A y) const {
    return x == y;
  }
};
struct Ne {
  template <typename A>
  __device__ bool operator()(A x, A y) const {
    return x != y;
  }
};
struct Lt {
  template <typename A>
  __device__ bool operator()(A x, A y) const {
    return x < y;
  }
};
struct Le {
  template <typename A>
  __device__ bool operator()(A x, A y) const {
    return x <= y;
  }
};
struct Gt {
  template <typename A>
  __device__ bool operator()(A x, A y) const {
    return x > y;
  }
};
struct Ge {
  template <typename A>
  __device__ bool operator()(A x, A y) const {
    return x >= y;
  }
};

struct Select {
  template <typename T>
  __device__ T operator()(bool c, T x, T y) const {
    return c ? x : y;
  }
};

// out = op(a, b); T is the storage type of a, b and out.
template <typename T>
void arithmetic_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = binary_name(op);
  const auto run = [&](auto fn) { map<T, T, T>(name, Widened<T, decltype(fn)>{fn}, out, {a, b}); };
  switch (op) {
    case BinaryOp::add:
      return run(Add{});
    case BinaryOp::sub:
      return run(Sub{});
    case BinaryOp::mul:
      return run(Mul{});
    case BinaryOp::div:
      if constexpr (std::is_integral_v<T>) {
        // The host must learn of a zero divisor to throw, so this op waits for its kernel:
        // integer division is rare (index arithmetic), and the error must not pass silently.
        const Tensor by_zero = zeros({1}, {.dtype = DType::int64, .device = out.device()});
        run(IntDiv{device_data<std::int64_t>(by_zero)});
        TF_CHECK(by_zero.item<std::int64_t>() == 0, "div: integer division by zero");
        return;
      } else {
        return run(Div{});
      }
    case BinaryOp::maximum:
      return run(Maximum{});
    case BinaryOp::minimum:
      return run(Minimum{});
    default:
      break;
  }
  fail(binary_name(op), ": not an arithmetic op");
}

// out (bool) = op(a, b).
template <typename T>
void comparison_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = binary_name(op);
  const auto run = [&](auto fn) {
    map<bool, T, T>(name, Widened<bool, decltype(fn)>{fn}, out, {a, b});
  };
  switch (op) {
    case BinaryOp::eq:
      return run(Eq{});
    case BinaryOp::ne:
      return run(Ne{});
    case BinaryOp::lt:
      return run(Lt{});
    case BinaryOp::le:
      return run(Le{});
    case BinaryOp::gt:
      return run(Gt{});
    case BinaryOp::ge:
      return run(Ge{});
    default:
      break;
  }
  fail(binary_name(op), ": not a comparison");
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
        a.dtype(), name, [&](auto tag) { comparison_kernel<decltype(tag)>(op, a, b, out); });
  } else {
    check_dtype(name, "the output", out, a.dtype());
    dispatch<float, double, bf16, std::int64_t>(
        a.dtype(), name, [&](auto tag) { arithmetic_kernel<decltype(tag)>(op, a, b, out); });
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
