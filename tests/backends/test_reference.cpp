// The reference backend against values worked out by hand: it is the other backends' source of
// expected values, so it is checked on its own too (the parity cases then hold every backend to
// it, and a CPU kernel that agrees with it on thousands of inputs is a second, independent
// implementation of the same formula).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/reference/reference_backend.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace {

using namespace tinyformer;

Backend& ref() {
  return reference_backend();
}

Tensor f64(const std::vector<double>& v, const Shape& shape) {
  return from<double>(v, shape);
}

std::vector<double> values(const Tensor& t) {
  return raw::to_dtype(raw::contiguous(t), DType::float64).to_vector<double>();
}

}  // namespace

TEST_CASE("reference: name, and elementwise ops at known points") {
  CHECK(std::string(ref().name()) == "reference");
  const Tensor x = f64({0.0, 1.0, -2.0}, {3});
  Tensor y = empty({3}, {.dtype = DType::float64});
  ref().unary(UnaryOp::exp, x, y, 0.0);
  CHECK(values(y)[0] == 1.0);
  CHECK(values(y)[1] == doctest::Approx(std::exp(1.0)).epsilon(1e-15));
  ref().unary(UnaryOp::sigmoid, x, y, 0.0);
  CHECK(values(y)[0] == 0.5);
  ref().unary(UnaryOp::gelu, x, y, 0.0);  // x Phi(x): Phi(1) = 0.841344746...
  CHECK(values(y)[0] == 0.0);
  CHECK(values(y)[1] == doctest::Approx(0.8413447460685429).epsilon(1e-14));
  ref().unary(UnaryOp::relu, x, y, 0.0);
  CHECK(values(y) == std::vector<double>{0.0, 1.0, 0.0});
  ref().unary(UnaryOp::pow_scalar, x, y, 3.0);
  CHECK(values(y) == std::vector<double>{0.0, 1.0, -8.0});
  // d tanh = 1 - y^2, from y; d abs = sign(x), 0 at 0.
  const Tensor g = f64({2.0, 2.0, 2.0}, {3});
  ref().unary_backward(UnaryOp::tanh, g, Tensor(), f64({0.0, 0.5, -1.0}, {3}), y, 0.0);
  CHECK(values(y) == std::vector<double>{2.0, 1.5, 0.0});
  ref().unary_backward(UnaryOp::abs, g, x, Tensor(), y, 0.0);
  CHECK(values(y) == std::vector<double>{0.0, 2.0, -2.0});
  // A transposed input is read through its strides.
  const Tensor m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mt = empty({3, 2}, {.dtype = DType::float64});
  ref().unary(UnaryOp::neg, m.transpose(0, 1), mt, 0.0);
  CHECK(values(mt) == std::vector<double>{-1, -4, -2, -5, -3, -6});
}

TEST_CASE("reference: int64 division truncates, wraps, and rejects a zero divisor; NaN wins") {
  const Tensor a = from<std::int64_t>({7, -7, std::numeric_limits<std::int64_t>::min()}, {3});
  const Tensor b = from<std::int64_t>({-2, 2, -1}, {3});
  Tensor q = empty({3}, {.dtype = DType::int64});
  ref().binary(BinaryOp::div, a, b, q);
  CHECK(q.to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{-3, -3, std::numeric_limits<std::int64_t>::min()});
  const Tensor zero = from<std::int64_t>({1, 0, 1}, {3});
  CHECK_THROWS_WITH_AS(ref().binary(BinaryOp::div, a, zero, q), "div: integer division by zero",
                       Error);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor out = empty({2}, {.dtype = DType::float64});
  ref().binary(BinaryOp::maximum, f64({nan, 1.0}, {2}), f64({1.0, nan}, {2}), out);
  CHECK(std::isnan(values(out)[0]));
  CHECK(std::isnan(values(out)[1]));
  Tensor flags = empty({2}, {.dtype = DType::boolean});
  ref().binary(BinaryOp::le, f64({1.0, 2.0}, {2}), f64({1.0, 1.0}, {2}), flags);
  CHECK(flags.to_vector<bool>() == std::vector<bool>{true, false});
  CHECK_THROWS_AS(ref().binary(BinaryOp::add, a, f64({1, 2, 3}, {3}), q), Error);
}

TEST_CASE("reference: reductions, max_dim's first maximum, matmul, softmax, layer_norm") {
  const Tensor x = f64({1, 5, 5, 2, 0, -1}, {2, 3});
  Tensor rows = empty({2, 1}, {.dtype = DType::float64});
  ref().reduce(ReduceOp::mean, x, {1}, rows);
  CHECK(values(rows) == std::vector<double>{11.0 / 3, 1.0 / 3});
  Tensor all = empty({1, 1}, {.dtype = DType::float64});
  ref().reduce(ReduceOp::min, x, {0, 1}, all);
  CHECK(values(all) == std::vector<double>{-1});
  Tensor v = empty({2, 1}, {.dtype = DType::float64}), i = empty({2, 1}, {.dtype = DType::int64});
  ref().max_dim(x, 1, v, i);
  CHECK(values(v) == std::vector<double>{5, 2});
  CHECK(i.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});  // the first 5

  // [1 2; 3 4] @ [5 6; 7 8] = [19 22; 43 50], with b broadcast over a batch of two.
  Tensor prod = empty({2, 2, 2}, {.dtype = DType::float64});
  const Tensor a2 = f64({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2});
  ref().matmul(a2, f64({5, 6, 7, 8}, {1, 2, 2}), prod);
  CHECK(values(prod) == std::vector<double>{19, 22, 43, 50, 5, 6, 7, 8});

  // Equal logits share the probability; a -inf logit gets none.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor p = empty({1, 4}, {.dtype = DType::float64});
  ref().softmax(f64({3, 3, -inf, 3}, {1, 4}), false, p);
  CHECK(values(p) == std::vector<double>{1.0 / 3, 1.0 / 3, 0, 1.0 / 3});

  // x = [1, 2, 3]: mean 2, variance 2/3.
  Tensor y = empty({1, 3}, {.dtype = DType::float64}), mean = empty({1}, {.dtype = DType::float64}),
         rstd = empty({1}, {.dtype = DType::float64});
  ref().layer_norm(f64({1, 2, 3}, {1, 3}), Tensor(), f64({10, 10, 10}, {3}), 0.0, y, mean, rstd);
  CHECK(values(mean)[0] == 2.0);
  CHECK(values(rstd)[0] == doctest::Approx(std::sqrt(1.5)).epsilon(1e-15));
  CHECK(values(y)[0] == doctest::Approx(10 - std::sqrt(1.5)).epsilon(1e-15));
  CHECK(values(y)[1] == 10.0);
}

TEST_CASE("reference: nll_loss, conv1d, pooling, indexing, adamw_step, random, copy") {
  // nll_loss: the ignored row is 0; a target out of range names its row.
  const Tensor lp = f64({-1, -2, -3, -4}, {2, 2});
  Tensor loss = empty({2}, {.dtype = DType::float64});
  ref().nll_loss(lp, from<std::int64_t>({1, -100}, {2}), -100, loss);
  CHECK(values(loss) == std::vector<double>{2, 0});
  CHECK_THROWS_WITH_AS(ref().nll_loss(lp, from<std::int64_t>({0, 2}, {2}), -100, loss),
                       doctest::Contains("row 1"), Error);

  // conv1d of [1 2 3] with kernel [1 1], padding 1: [1 3 5 3], plus the bias 0.5.
  Tensor c = empty({1, 1, 4}, {.dtype = DType::float64});
  ref().conv1d(f64({1, 2, 3}, {1, 1, 3}), f64({1, 1}, {1, 1, 2}), f64({0.5}, {1}), 1, 1, c);
  CHECK(values(c) == std::vector<double>{1.5, 3.5, 5.5, 3.5});

  // Average pooling over full windows only: [1 2 3 4 5] with kernel 2, stride 2 -> [1.5 3.5].
  Tensor pooled = empty({1, 1, 2}, {.dtype = DType::float64});
  ref().pool1d(PoolKind::average, f64({1, 2, 3, 4, 5}, {1, 1, 5}), 2, 2, pooled);
  CHECK(values(pooled) == std::vector<double>{1.5, 3.5});

  // index_add adds every repeat.
  Tensor table = zeros({2, 2}, {.dtype = DType::float64});
  ref().index_add(f64({1, 2, 3, 4, 5, 6}, {3, 2}), from<std::int64_t>({1, 1, 0}, {3}), table);
  CHECK(values(table) == std::vector<double>{5, 6, 4, 6});

  // One AdamW step from m = v = 0: the update is lr * g / (|g| + eps) after bias correction.
  const Tensor param = f64({1.0}, {1}), m = f64({0.0}, {1}), vv = f64({0.0}, {1});
  ref().adamw_step(param, f64({0.5}, {1}), m, vv, 0.1, 0.9, 0.999, 0.0, 0.0, true, 0.1, 0.001);
  CHECK(values(param)[0] == doctest::Approx(0.9).epsilon(1e-14));
  CHECK(values(m)[0] == doctest::Approx(0.05).epsilon(1e-14));

  // The same numbers as the CPU backend, bit for bit, for every kind.
  for (RandomKind kind : {RandomKind::normal, RandomKind::uniform, RandomKind::bernoulli,
                          RandomKind::scaled_bernoulli}) {
    Tensor r = empty({37}), c_draw = empty({37});
    const double b = kind == RandomKind::scaled_bernoulli ? 1.0 / 0.25 : 1.0;
    ref().random(r, kind, 5, 3, 0.25, b);
    backend(Device::cpu()).random(c_draw, kind, 5, 3, 0.25, b);
    CHECK(r.to_vector<float>() == c_draw.to_vector<float>());
  }

  // Float to int64 truncates toward zero; NaN becomes 0.
  Tensor ints = empty({3}, {.dtype = DType::int64});
  ref().copy(f64({-2.7, 2.7, std::nan("")}, {3}), ints);
  CHECK(ints.to_vector<std::int64_t>() == std::vector<std::int64_t>{-2, 2, 0});
}
