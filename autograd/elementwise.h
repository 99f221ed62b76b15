// Elementwise ops with NumPy broadcasting, and the arithmetic operators on tensors.
#pragma once

#include "core/ops.h"
#include "core/tensor.h"

namespace tinyformer {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // the gradient goes to a where a >= b
Tensor minimum(const Tensor& a, const Tensor& b);  // the gradient goes to a where a <= b

// Any unary op of core/elementwise.def, differentiable; alpha is pow_scalar's exponent.
Tensor unary(UnaryOp op, const Tensor& x, double alpha = 0.0);

// One function per row of core/elementwise.def, named after it: neg(x), exp(x), log(x),
// sqrt(x), rsqrt(x), abs(x), tanh(x), sigmoid(x), relu(x), gelu(x) (exact), gelu_tanh(x), ...
// A row whose public function takes a parameter has a TF_UNARY_BY_HAND_<row> line here and is
// declared by hand below (pow_scalar: pow(x, exponent)).
#define TF_UNARY_BY_HAND_pow_scalar ~,
#define TF_UNARY_SECOND(a, b, ...) b
#define TF_UNARY_SECOND_OF(...) TF_UNARY_SECOND(__VA_ARGS__)
// `declaration` unless TF_UNARY_BY_HAND_<name> is defined (as "~,", which shifts it out).
#define TF_UNARY_UNLESS_BY_HAND(name, declaration) \
  TF_UNARY_SECOND_OF(TF_UNARY_BY_HAND_##name, declaration, ~)
#define TF_UNARY(name, reads, domain, int64) \
  TF_UNARY_UNLESS_BY_HAND(name, Tensor name(const Tensor& x);)
#include "core/elementwise.def"

// pow_scalar: x^exponent.
Tensor pow(const Tensor& x, double exponent);
enum class GeluApproximation { none, tanh };
// none: x * Phi(x) (exact, with erf), as gelu(x); tanh: the tanh approximation of Hendrycks &
// Gimpel, as gelu_tanh(x).
Tensor gelu(const Tensor& x, GeluApproximation approximate);

// Comparisons (the comparison rows of core/elementwise.def) give boolean tensors and have no
// gradient. The operators below call them.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

// cond (boolean) ? a : b, all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` where mask (boolean, broadcastable to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// Operators; a double operand becomes a scalar of the tensor's dtype and device.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// Comparison operators: a == b, a != b, a < b, a <= b, a > b, a >= b, between two tensors
// (broadcast, same dtype) or a tensor and a double on either side; bool results, no gradient,
// as PyTorch. A double is compared in the tensor's dtype, except that an int64 or bool tensor
// meets a value it cannot hold exactly (x < 0.5, mask == 2) in float64, so the answer is the
// mathematical one rather than the one of a truncated value.
#define TF_COMPARISON_OPERATORS(X) X(eq, ==) X(ne, !=) X(lt, <) X(le, <=) X(gt, >) X(ge, >=)
#define TF_DECLARE_COMPARISON(name, symbol)                 \
  Tensor operator symbol(const Tensor& a, const Tensor& b); \
  Tensor operator symbol(const Tensor& a, double b);        \
  Tensor operator symbol(double a, const Tensor& b);
TF_COMPARISON_OPERATORS(TF_DECLARE_COMPARISON)
#undef TF_DECLARE_COMPARISON

}  // namespace tinyformer
