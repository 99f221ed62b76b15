// The elementwise ops, one formula per row of core/elementwise.def, in double.
//   unary:          out[i] = op(x[i])                                  x, out: same shape
//   unary_backward: out[i] = grad[i] * op'(x[i]), given x or y = op(x) (the row's `reads`)
//   binary:         out[i] = a[i] op b[i]      a, b already broadcast to out's shape
//   where:          out[i] = cond[i] ? a[i] : b[i]
// Every tensor may have any strides. int64 stays in integers (a double holds only 53 bits):
// arithmetic wraps around like two's complement, division truncates toward zero and a zero
// divisor throws. maximum and minimum propagate NaN.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

namespace {

// The standard normal distribution: Phi (its CDF) and phi (its density).
double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::numbers::sqrt2);
}
double normal_pdf(double x) {
  return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
}

// gelu_tanh's inner function u(x) = sqrt(2 / pi) (x + 0.044715 x^3).
double gelu_tanh_inner(double x) {
  return std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
}

// op(x); alpha is pow_scalar's exponent.
double unary_value(UnaryOp op, double x, double alpha) {
  switch (op) {
    case UnaryOp::neg:
      return -x;
    case UnaryOp::exp:
      return std::exp(x);
    case UnaryOp::log:
      return std::log(x);
    case UnaryOp::sqrt:
      return std::sqrt(x);
    case UnaryOp::rsqrt:
      return 1.0 / std::sqrt(x);
    case UnaryOp::abs:
      return std::abs(x);
    case UnaryOp::tanh:
      return std::tanh(x);
    case UnaryOp::sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::relu:
      return x < 0.0 ? 0.0 : x;  // NaN passes through
    case UnaryOp::gelu:
      return x * normal_cdf(x);
    case UnaryOp::gelu_tanh:
      return 0.5 * x * (1.0 + std::tanh(gelu_tanh_inner(x)));
    case UnaryOp::silu:  // x sigmoid(x)
      return x / (1.0 + std::exp(-x));
    case UnaryOp::pow_scalar:
      return std::pow(x, alpha);
  }
  fail("unary: unknown op ", static_cast<int>(op));
}

// d op / dx at x, where y = op(x) (both are known here, whichever the backend would read).
double unary_derivative(UnaryOp op, double x, double y, double alpha) {
  switch (op) {
    case UnaryOp::neg:
      return -1.0;
    case UnaryOp::exp:
      return y;
    case UnaryOp::log:
      return 1.0 / x;
    case UnaryOp::sqrt:
      return 1.0 / (2.0 * y);
    case UnaryOp::rsqrt:
      return -0.5 * y * y * y;
    case UnaryOp::abs:
      return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0);
    case UnaryOp::tanh:
      return 1.0 - y * y;
    case UnaryOp::sigmoid:
      return y * (1.0 - y);
    case UnaryOp::relu:
      return y > 0.0 ? 1.0 : 0.0;
    case UnaryOp::gelu:
      return normal_cdf(x) + x * normal_pdf(x);
    case UnaryOp::gelu_tanh: {
      const double t = std::tanh(gelu_tanh_inner(x));
      const double du = std::sqrt(2.0 / std::numbers::pi) * (1.0 + 3.0 * 0.044715 * x * x);
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
    }
    case UnaryOp::silu: {  // s + x s (1 - s), s = sigmoid(x)
      const double s = 1.0 / (1.0 + std::exp(-x));
      return s + x * s * (1.0 - s);
    }
    case UnaryOp::pow_scalar:
      return alpha == 0.0 ? 0.0 : alpha * std::pow(x, alpha - 1.0);
  }
  fail("unary_backward: unknown op ", static_cast<int>(op));
}

// Two's complement wrap-around for int64 (C++ leaves signed overflow undefined).
std::int64_t wrap(std::uint64_t v) {
  return static_cast<std::int64_t>(v);
}

std::int64_t integer_binary(BinaryOp op, std::int64_t a, std::int64_t b) {
  const auto ua = static_cast<std::uint64_t>(a), ub = static_cast<std::uint64_t>(b);
  switch (op) {
    case BinaryOp::add:
      return wrap(ua + ub);
    case BinaryOp::sub:
      return wrap(ua - ub);
    case BinaryOp::mul:
      return wrap(ua * ub);
    case BinaryOp::div:
      TF_CHECK(b != 0, "div: integer division by zero");
      return b == -1 ? wrap(0 - ua) : a / b;  // truncates toward zero; INT64_MIN / -1 wraps
    case BinaryOp::maximum:
      return a > b ? a : b;
    case BinaryOp::minimum:
      return a < b ? a : b;
    default:
      break;
  }
  fail(binary_name(op), ": not an arithmetic op");
}

double floating_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
    case BinaryOp::maximum:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : (a > b ? a : b);
    case BinaryOp::minimum:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : (a < b ? a : b);
    default:
      break;
  }
  fail(binary_name(op), ": not an arithmetic op");
}

// a op b for a comparison; int64 operands are compared as integers.
template <typename T>
bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::eq:
      return a == b;
    case BinaryOp::ne:
      return a != b;
    case BinaryOp::lt:
      return a < b;
    case BinaryOp::le:
      return a <= b;
    case BinaryOp::gt:
      return a > b;
    case BinaryOp::ge:
      return a >= b;
    default:
      break;
  }
  fail(binary_name(op), ": not a comparison");
}

}  // namespace

void ReferenceBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  check_unary_args(op, x, out, *this);
  const char* name = unary_name(op);
  if (x.dtype() == DType::int64) {
    TF_CHECK(unary_traits(op).int64, name, ": unsupported dtype int64 (expected a floating dtype)");
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t v = get_int(x, i);
      const bool negate = op == UnaryOp::neg || v < 0;  // abs negates the negative values
      set_int(out, i, negate ? wrap(0 - static_cast<std::uint64_t>(v)) : v);
    }
    return;
  }
  TF_CHECK(is_floating(x.dtype()), name, ": unsupported dtype ", x.dtype());
  for (std::int64_t i = 0; i < x.numel(); ++i) set(out, i, unary_value(op, get(x, i), alpha));
}

void ReferenceBackend::unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x,
                                      const Tensor& y, const Tensor& out, double alpha) {
  check_unary_backward_args(op, grad, x, y, out, *this);
  TF_CHECK(is_floating(out.dtype()), unary_name(op), " backward: unsupported dtype ", out.dtype());
  const UnaryReads reads = unary_traits(op).reads;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    // Only the tensor the row reads is given; the other one is not needed by the formula.
    const double xv = reads == UnaryReads::x ? get(x, i) : std::nan("");
    const double yv = reads == UnaryReads::y ? get(y, i) : std::nan("");
    // A zero derivative gives a zero gradient, even against an infinite incoming one.
    const double d = unary_derivative(op, xv, yv, alpha);
    set(out, i, d == 0.0 ? 0.0 : get(grad, i) * d);
  }
}

void ReferenceBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = binary_name(op);
  check_same_shape(name, out, {a, b}, *this);
  TF_CHECK(a.dtype() == b.dtype(), name, ": dtypes differ: ", a.dtype(), " and ", b.dtype());
  const bool integers = a.dtype() == DType::int64;
  if (is_comparison(op)) {
    check_dtype(name, "the output", out, DType::boolean);
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      const bool r =
          integers ? compare(op, get_int(a, i), get_int(b, i)) : compare(op, get(a, i), get(b, i));
      set(out, i, r ? 1.0 : 0.0);
    }
    return;
  }
  check_dtype(name, "the output", out, a.dtype());
  TF_CHECK(a.dtype() != DType::boolean, name, ": unsupported dtype bool");
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    if (integers) {
      set_int(out, i, integer_binary(op, get_int(a, i), get_int(b, i)));
    } else {
      set(out, i, floating_binary(op, get(a, i), get(b, i)));
    }
  }
}

void ReferenceBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b,
                             const Tensor& out) {
  check_same_shape("where", out, {cond, a, b}, *this);
  check_dtype("where", "the condition", cond, DType::boolean);
  check_dtype("where", "a", a, out.dtype());
  check_dtype("where", "b", b, out.dtype());
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const Tensor& chosen = get(cond, i) != 0.0 ? a : b;
    if (out.dtype() == DType::int64) {
      set_int(out, i, get_int(chosen, i));
    } else {
      set(out, i, get(chosen, i));
    }
  }
}

}  // namespace tinyformer::reference
