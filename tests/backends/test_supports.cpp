// Backend::supports() against the kernels: for every primitive op and dtype, a small call runs
// where supports() says yes and throws an Error where it says no, so the table each backend
// registers (and the dtype lists of error messages built from it) cannot drift from the dtypes
// its kernels dispatch on. The CPU always; the GPU where there is one.
#include <doctest/doctest.h>

#include <string>

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace {

using namespace tinyformer;

constexpr DType kAllDtypes[] = {DType::float32, DType::float64, DType::bfloat16, DType::int64,
                                DType::boolean};

// Runs `op` once on small tensors of `dtype` (zeros; int64 indices and targets where the op
// takes them) on `device`.
void run_op(Backend& b, Op op, DType dtype, Device device) {
  const auto make = [&](const Shape& shape, DType d) {
    return zeros(shape, {.dtype = d, .device = device});
  };
  const auto t = [&](const Shape& shape) { return make(shape, dtype); };
  const Tensor index = make({2}, DType::int64);
  switch (op) {
    case Op::fill:
      return b.fill(t({2}), 1.0);
    case Op::copy:
      return b.copy(t({2}), t({2}));
    case Op::arange:
      return b.arange(t({3}), 0.0, 1.0);
    case Op::random:  // bernoulli: the kind that takes every dtype the op does
      return b.random(t({4}), RandomKind::bernoulli, 1, 0, 0.5, 0.0);
    case Op::unary:
      return b.unary(UnaryOp::neg, t({2}), t({2}), 0.0);
    case Op::unary_backward:
      return b.unary_backward(UnaryOp::neg, t({2}), Tensor(), Tensor(), t({2}), 0.0);
    case Op::binary:  // a comparison: the kind that takes every dtype the op does
      return b.binary(BinaryOp::eq, t({2}), t({2}), make({2}, DType::boolean));
    case Op::where:
      return b.where(make({2}, DType::boolean), t({2}), t({2}), t({2}));
    case Op::reduce:
      return b.reduce(ReduceOp::sum, t({2, 3}), {1}, t({2, 1}));
    case Op::max_dim:
      return b.max_dim(t({2, 3}), 1, t({2, 1}), make({2, 1}, DType::int64));
    case Op::matmul:
      return b.matmul(t({1, 2, 3}), t({1, 3, 2}), t({1, 2, 2}));
    case Op::linear:
      return b.linear(t({2, 3}), t({4, 3}), t({4}), Epilogue::relu, t({2, 4}));
    case Op::linear_backward_epilogue:
      return b.linear_backward_epilogue(t({2, 3}), t({2, 3}), Epilogue::relu, t({2, 3}), t({3}));
    case Op::attention:
      return b.attention(t({2, 3, 4}), t({2, 5, 4}), t({2, 5, 2}), Tensor(), true, 0.5,
                         t({2, 3, 5}), t({2, 3, 2}));
    case Op::attention_backward:
      return b.attention_backward(t({2, 3, 2}), t({2, 3, 4}), t({2, 5, 4}), t({2, 5, 2}),
                                  t({2, 3, 5}), true, 0.5, t({2, 3, 4}), t({2, 5, 4}),
                                  t({2, 5, 2}));
    case Op::flash_attention:
      return b.flash_attention(t({2, 3, 4}), t({2, 5, 4}), t({2, 5, 2}), Tensor(), true, 0.5,
                               AttentionDropout{}, t({2, 3, 2}), t({2, 3}));
    case Op::flash_attention_backward:
      return b.flash_attention_backward(
          t({2, 3, 2}), t({2, 3, 4}), t({2, 5, 4}), t({2, 5, 2}), t({2, 3, 2}), t({2, 3}), Tensor(),
          true, 0.5, AttentionDropout{}, t({2, 3, 4}), t({2, 5, 4}), t({2, 5, 2}));
    case Op::softmax:
      return b.softmax(t({2, 3}), false, t({2, 3}));
    case Op::softmax_backward:
      return b.softmax_backward(t({2, 3}), t({2, 3}), false, t({2, 3}));
    case Op::layer_norm:
      return b.layer_norm(t({2, 3}), Tensor(), Tensor(), 1e-5, t({2, 3}), t({2}), t({2}));
    case Op::add_layer_norm:
      return b.add_layer_norm(t({2, 3}), t({2, 3}), Tensor(), Tensor(), 1e-5, t({2, 3}), t({2, 3}),
                              t({2}), t({2}));
    case Op::layer_norm_backward:
      return b.layer_norm_backward(t({2, 3}), t({2, 3}), Tensor(), t({2}), t({2}), t({2, 3}),
                                   Tensor(), Tensor());
    case Op::nll_loss:
      return b.nll_loss(t({2, 3}), index, -100, t({2}));
    case Op::nll_loss_backward:
      return b.nll_loss_backward(t({2}), index, -100, t({2, 3}));
    case Op::conv1d:
      return b.conv1d(t({1, 2, 4}), t({3, 2, 2}), Tensor(), 1, 0, t({1, 3, 3}));
    case Op::conv1d_backward:
      return b.conv1d_backward(t({1, 3, 3}), t({1, 2, 4}), t({3, 2, 2}), 1, 0, t({1, 2, 4}),
                               t({3, 2, 2}), Tensor());
    case Op::pool1d:
      return b.pool1d(PoolKind::max, t({1, 2, 4}), 2, 2, t({1, 2, 2}));
    case Op::pool1d_backward:
      return b.pool1d_backward(PoolKind::max, t({1, 2, 2}), t({1, 2, 4}), 2, 2, t({1, 2, 4}));
    case Op::index_select:
      return b.index_select(t({3, 2}), index, t({2, 2}));
    case Op::index_add:
      return b.index_add(t({2, 2}), index, t({3, 2}));
    case Op::adamw_step:
      return b.adamw_step(t({2}), t({2}), t({2}), t({2}), 0.1, 0.9, 0.999, 1e-8, 0.0, true, 0.1,
                          0.001);
    case Op::sum_squares:
      return b.sum_squares(t({3}), make({1}, DType::float64));
  }
}

void check_supports_matches_kernels(Device device) {
  Backend& b = backend(device);
  for (std::size_t i = 0; i < op_count; ++i) {
    const auto op = static_cast<Op>(i);
    for (DType dtype : kAllDtypes) {
      INFO(b.name() << " " << op_name(op) << " on " << dtype);
      if (b.supports(op, dtype)) {
        CHECK_NOTHROW(run_op(b, op, dtype, device));
      } else {
        CHECK_THROWS_AS(run_op(b, op, dtype, device), Error);
      }
    }
  }
}

}  // namespace

TEST_CASE("supports(): the CPU backend runs exactly the dtypes it declares") {
  check_supports_matches_kernels(Device::cpu());
}

TEST_CASE("supports(): the CUDA backend runs exactly the dtypes it declares") {
  if (!cuda_available()) {
    MESSAGE("no usable GPU: skipped");
    return;
  }
  check_supports_matches_kernels(Device::cuda());
}
