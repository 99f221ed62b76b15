// Elementwise ops. Each forward validates, broadcasts and calls the backend; the backward sits
// right below it. Broadcast inputs get gradients of the broadcast shape: the engine sums them
// back to each input's shape (autograd::sum_to), so no op here has to.
#include "autograd/elementwise.h"

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

namespace {

void check_pair(const Tensor& a, const Tensor& b, const char* op) {
  TF_CHECK(a.defined() && b.defined(), op, ": expected defined tensors, got an undefined Tensor");
  TF_CHECK(a.device() == b.device(), op, ": tensors are on different devices: ", a.device(),
           " and ", b.device());
  TF_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", a.dtype(), " and ", b.dtype(),
           " (no type promotion: convert one side with .to(), docs/pytorch.md)");
}

Tensor scalar_like(const Tensor& t, double value) {
  return scalar_tensor(value, {.dtype = t.dtype(), .device = t.device()});
}

// A tensor and a double, brought to one dtype for a comparison: the tensor's, unless an int64 or
// bool tensor meets a value its dtype cannot hold exactly; then both in float64.
std::pair<Tensor, Tensor> comparison_operands(const Tensor& t, double value) {
  TF_CHECK(t.defined(), "comparison: expected a defined tensor, got an undefined Tensor");
  const DType dtype = t.dtype();
  bool exact = is_floating(dtype);
  if (dtype == DType::int64) {
    // [-2^63, 2^63): the doubles that convert to an int64 without overflow.
    exact = value >= -9223372036854775808.0 && value < 9223372036854775808.0 &&
            static_cast<double>(static_cast<std::int64_t>(value)) == value;
  } else if (dtype == DType::boolean) {
    exact = value == 0.0 || value == 1.0;
  }
  if (exact) return {t, scalar_like(t, value)};
  return {t.to(DType::float64),
          scalar_tensor(value, {.dtype = DType::float64, .device = t.device()})};
}

// out[i] = op(a[i], b[i]) over the broadcast shape; no graph.
Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  check_pair(a, b, name);
  TF_CHECK(a.dtype() != DType::boolean || is_comparison(op), name,
           ": expected numeric tensors, got bool");
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out =
      empty(shape, {.dtype = is_comparison(op) ? DType::boolean : a.dtype(), .device = a.device()});
  if (out.numel() > 0) {
    backend(a.device()).binary(op, raw::expand(a, shape, name), raw::expand(b, shape, name), out);
  }
  return out;
}

// y = op(x); no graph.
Tensor unary_raw(UnaryOp op, const Tensor& x, double alpha) {
  const char* name = unary_name(op);
  TF_CHECK(x.defined(), name, ": expected a defined tensor, got an undefined Tensor");
  TF_CHECK(is_floating(x.dtype()) || (unary_traits(op).int64 && x.dtype() == DType::int64), name,
           ": expected a floating tensor, got ", x.dtype());
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) backend(x.device()).unary(op, x, out, alpha);
  return out;
}

}  // namespace

// y = op(x); the backward multiplies g by op'(x) (core/unary_math.h, in the backend).
Tensor unary(UnaryOp op, const Tensor& x, double alpha) {
  Tensor y = unary_raw(op, x, alpha);
  // Save only what the derivative reads, so the graph holds no more memory than it must.
  const UnaryReads reads = unary_traits(op).reads;
  Tensor saved_x = reads == UnaryReads::x ? save(x) : Tensor();
  Tensor saved_y = reads == UnaryReads::y ? save(y) : Tensor();
  return record(unary_name(op), y, {x}, [op, alpha, saved_x, saved_y](const Tensor& g) {
    Tensor gx = empty(g.shape(), {.dtype = g.dtype(), .device = g.device()});
    backend(g.device()).unary_backward(op, g, saved_x, saved_y, gx, alpha);
    return std::vector<Tensor>{gx};
  });
}

// d(a + b) = (g, g)
Tensor add(const Tensor& a, const Tensor& b) {
  return record("add", binary_raw(BinaryOp::add, a, b), {a, b}, [](const Tensor& g) {
    return std::vector<Tensor>{g, g};
  });
}

// d(a - b) = (g, -g)
Tensor sub(const Tensor& a, const Tensor& b) {
  return record("sub", binary_raw(BinaryOp::sub, a, b), {a, b}, [](const Tensor& g) {
    return std::vector<Tensor>{g, neg(g)};
  });
}

// d(a * b) = (g * b, g * a)
Tensor mul(const Tensor& a, const Tensor& b) {
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor sa = gb ? save(a) : Tensor(), sb = ga ? save(b) : Tensor();
  return record("mul", binary_raw(BinaryOp::mul, a, b), {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sb.defined() ? mul(g, sb) : Tensor(),
                               sa.defined() ? mul(g, sa) : Tensor()};
  });
}

// d(a / b) = (g / b, -g * a / b^2)
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor sa = b.requires_grad() ? save(a) : Tensor(), sb = save(b);
  return record("div", binary_raw(BinaryOp::div, a, b), {a, b}, [sa, sb](const Tensor& g) {
    Tensor ga = div(g, sb);
    Tensor gb = sa.defined() ? neg(div(mul(ga, sa), sb)) : Tensor();
    return std::vector<Tensor>{ga, gb};
  });
}

namespace {
// maximum/minimum: the gradient goes to a where `a_wins` (a >= b, or a <= b), else to b.
Tensor extremum(BinaryOp op, BinaryOp a_wins_op, const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(op, a, b);
  Tensor a_wins = autograd::needs_grad({a, b}) ? binary_raw(a_wins_op, a, b) : Tensor();
  return record(binary_name(op), out, {a, b}, [a_wins](const Tensor& g) {
    Tensor zero = scalar_like(g, 0.0);
    return std::vector<Tensor>{where(a_wins, g, zero), where(a_wins, zero, g)};
  });
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::maximum, BinaryOp::ge, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::minimum, BinaryOp::le, a, b);
}

Tensor eq(const Tensor& a, const Tensor& b) {
  return binary_raw(BinaryOp::eq, a, b);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return binary_raw(BinaryOp::ne, a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return binary_raw(BinaryOp::lt, a, b);
}
Tensor le(const Tensor& a, const Tensor& b) {
  return binary_raw(BinaryOp::le, a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return binary_raw(BinaryOp::gt, a, b);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return binary_raw(BinaryOp::ge, a, b);
}

// neg(x), exp(x), ...: one per row of core/elementwise.def (see autograd/elementwise.h).
#define TF_UNARY(name, reads, domain, int64) \
  TF_UNARY_UNLESS_BY_HAND(                   \
      name, Tensor name(const Tensor& x) { return unary(UnaryOp::name, x); })
#include "core/elementwise.def"

Tensor pow(const Tensor& x, double exponent) {
  return unary(UnaryOp::pow_scalar, x, exponent);
}
Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return unary(approximate == GeluApproximation::tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu, x);
}

// d where(c, a, b) = (none, g where c, g where not c)
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_pair(a, b, "where");
  TF_CHECK(cond.defined() && cond.dtype() == DType::boolean,
           "where: expected a bool condition, got ",
           cond.defined() ? dtype_name(cond.dtype()) : "an undefined Tensor");
  TF_CHECK(cond.device() == a.device(), "where: the condition is on ", cond.device(),
           ", the values on ", a.device());
  const Shape shape =
      broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), "where"), "where");
  Tensor out = empty(shape, {.dtype = a.dtype(), .device = a.device()});
  if (out.numel() > 0) {
    backend(a.device())
        .where(raw::expand(cond, shape, "where"), raw::expand(a, shape, "where"),
               raw::expand(b, shape, "where"), out);
  }
  // Only the inputs that require a gradient get one: masked_fill's value, a constant, gets none.
  Tensor c = save(cond);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return record("where", out, {a, b}, [c, ga, gb](const Tensor& g) {
    Tensor zero = scalar_like(g, 0.0);
    return std::vector<Tensor>{ga ? where(c, g, zero) : Tensor(),
                               gb ? where(c, zero, g) : Tensor()};
  });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  TF_CHECK(x.defined(), "masked_fill: expected a defined tensor, got an undefined Tensor");
  TF_CHECK(mask.defined() && mask.dtype() == DType::boolean,
           "masked_fill: expected a bool mask, got ",
           mask.defined() ? dtype_name(mask.dtype()) : "an undefined Tensor");
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  TF_CHECK(shape == x.shape(), "masked_fill: the mask ", shape_str(mask.shape()),
           " does not broadcast to the tensor's shape ", shape_str(x.shape()));
  return where(mask, scalar_like(x, value), x);
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator-(const Tensor& x) {
  return neg(x);
}
Tensor operator+(const Tensor& a, double b) {
  return add(a, scalar_like(a, b));
}
Tensor operator-(const Tensor& a, double b) {
  return sub(a, scalar_like(a, b));
}
Tensor operator*(const Tensor& a, double b) {
  return mul(a, scalar_like(a, b));
}
Tensor operator/(const Tensor& a, double b) {
  return div(a, scalar_like(a, b));
}
Tensor operator+(double a, const Tensor& b) {
  return add(scalar_like(b, a), b);
}
Tensor operator-(double a, const Tensor& b) {
  return sub(scalar_like(b, a), b);
}
Tensor operator*(double a, const Tensor& b) {
  return mul(scalar_like(b, a), b);
}
Tensor operator/(double a, const Tensor& b) {
  return div(scalar_like(b, a), b);
}

#define TF_DEFINE_COMPARISON(name, symbol)                   \
  Tensor operator symbol(const Tensor& a, const Tensor& b) { \
    return name(a, b);                                       \
  }                                                          \
  Tensor operator symbol(const Tensor& a, double b) {        \
    const auto [t, s] = comparison_operands(a, b);           \
    return name(t, s);                                       \
  }                                                          \
  Tensor operator symbol(double a, const Tensor& b) {        \
    const auto [tensor, scalar] = comparison_operands(b, a); \
    return name(scalar, tensor);                             \
  }
TF_COMPARISON_OPERATORS(TF_DEFINE_COMPARISON)
#undef TF_DEFINE_COMPARISON

}  // namespace tinyformer
