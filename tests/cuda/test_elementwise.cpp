// CUDA parity of the elementwise ops: unary (forward and backward), binary and where, for every
// op, dtype and input layout (contiguous, transposed, sliced, broadcast), at odd sizes.
//
// The CPU backend has no bfloat16 kernels: a bfloat16 case runs the CPU in float32 on the same
// values (widening is exact) and rounds its result to bfloat16 once, as the GPU does.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "parity.h"

TF_PARITY_COVERS(unary);
TF_PARITY_COVERS(unary_backward);
TF_PARITY_COVERS(binary);
TF_PARITY_COVERS(where);

namespace tinyformer::parity {

namespace {

constexpr std::array kFloating = {DType::float32, DType::float64, DType::bfloat16};
constexpr std::array kLayouts = {Layout::contiguous, Layout::transposed, Layout::sliced,
                                 Layout::broadcast};
// One element, sizes below a warp, and counts that are no multiple of a block or of a vector.
const std::vector<Shape> kShapes = {{1, 1}, {7, 33}, {33, 1031}, {3, 5, 7}};

constexpr std::array kUnaryOps = {
    UnaryOp::neg,       UnaryOp::exp,  UnaryOp::log,       UnaryOp::sqrt, UnaryOp::rsqrt,
    UnaryOp::abs,       UnaryOp::tanh, UnaryOp::sigmoid,   UnaryOp::relu, UnaryOp::gelu,
    UnaryOp::gelu_tanh, UnaryOp::silu, UnaryOp::pow_scalar};
constexpr std::array kArithmetic = {BinaryOp::add, BinaryOp::sub,     BinaryOp::mul,
                                    BinaryOp::div, BinaryOp::maximum, BinaryOp::minimum};
constexpr std::array kComparisons = {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt,
                                     BinaryOp::le, BinaryOp::gt, BinaryOp::ge};

// t as the CPU computes with it (bfloat16 widened to float32; a copy, contiguous).
Tensor for_cpu(const Tensor& t) {
  return t.defined() && t.dtype() == DType::bfloat16 ? raw::to_dtype(t, DType::float32) : t;
}
// The CPU's result in the case's dtype.
Tensor as_dtype(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : raw::to_dtype(t, dtype);
}
// A CPU output for a case of `dtype`, filled with a sentinel as make_output's are.
Tensor cpu_output(const Shape& shape, DType dtype) {
  const DType d = cpu_dtype(dtype);
  const double sentinel = d == DType::boolean ? 1.0
                          : d == DType::int64 ? -12345.0
                                              : std::numeric_limits<double>::quiet_NaN();
  return full(shape, sentinel, {.dtype = d});
}

std::string label(const char* op, DType dtype, const Shape& shape, Layout layout) {
  return std::string(op) + " " + dtype_name(dtype) + " " + shape_str(shape) + " " +
         layout_name(layout);
}

// The same values in the same layout on both devices from explicit host values (contiguous).
Pair host_pair(const std::vector<double>& values, const Shape& shape, DType dtype) {
  const Tensor host = raw::to_dtype(from<double>(values, shape), dtype);
  return {host, raw::to_device(host, Device::cuda())};
}

// --- unary ---

// Inputs inside each op's domain (log, sqrt, rsqrt and fractional or negative powers need x > 0).
std::pair<double, double> unary_range(UnaryOp op, double alpha) {
  switch (op) {
    case UnaryOp::log:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt:
      return {0.1, 3.0};
    case UnaryOp::gelu:
    case UnaryOp::gelu_tanh:
      return {-4.0, 4.0};
    case UnaryOp::pow_scalar:
      return alpha > 0 && alpha == static_cast<double>(static_cast<int>(alpha))
                 ? std::pair{-2.0, 2.0}
                 : std::pair{0.1, 2.0};
    default:
      return {-3.0, 3.0};
  }
}

// The exponents of pow_scalar worth a case: each special-cased one, and pow() itself.
std::vector<double> alphas(UnaryOp op, bool backward) {
  if (op != UnaryOp::pow_scalar) return {0.0};
  if (backward) return {0.0, 1.0, 2.0, 1.5, -2.0};
  return {2.0, 1.0, 0.5, -1.0, 3.0, 1.5};
}

void check_unary(UnaryOp op, double alpha, const Shape& shape, DType dtype, Layout layout,
                 std::uint64_t seed) {
  const auto [lo, hi] = unary_range(op, alpha);
  const Pair x = make_pair(shape, dtype, layout, seed, lo, hi);
  const Pair out = make_output(shape, dtype);
  cuda_be().unary(op, x.cuda, out.cuda, alpha);
  const Tensor expected = cpu_output(shape, dtype);
  cpu_be().unary(op, for_cpu(x.cpu), expected, alpha);
  check_close(out.cuda, as_dtype(expected, dtype),
              label(unary_name(op), dtype, shape, layout) + " alpha " + std::to_string(alpha));
}

TEST_CASE("cuda parity: unary, every op, dtype and layout") {
  if (!gpu()) return;
  std::uint64_t seed = 1;
  for (UnaryOp op : kUnaryOps) {
    for (double alpha : alphas(op, false)) {
      for (DType dtype : kFloating) {
        for (Layout layout : kLayouts) {
          for (const Shape& shape : kShapes) check_unary(op, alpha, shape, dtype, layout, ++seed);
        }
      }
    }
  }
}

TEST_CASE("cuda parity: unary on int64 (neg and abs) and into a strided output") {
  if (!gpu()) return;
  // Negative values and INT64_MIN, whose negation wraps around.
  const Pair ints =
      host_pair({-5.0, 3.0, 0.0, -9223372036854775808.0, 7.0, -1.0}, {2, 3}, DType::int64);
  for (UnaryOp op : {UnaryOp::neg, UnaryOp::abs}) {
    for (Layout layout : kLayouts) check_unary(op, 0.0, {7, 33}, DType::int64, layout, 7);
    const Pair out = make_output({3, 2}, DType::int64);
    cuda_be().unary(op, ints.cuda.transpose(0, 1), out.cuda, 0.0);
    const Tensor expected = cpu_output({3, 2}, DType::int64);
    cpu_be().unary(op, ints.cpu.transpose(0, 1), expected, 0.0);
    check_close(out.cuda, expected, std::string(unary_name(op)) + " int64 negative");
  }
  // out: a transposed view; every element must be written through its stride.
  for (DType dtype : kFloating) {
    const Pair x = make_pair({33, 65}, dtype, Layout::contiguous, 3);
    const Pair out = make_pair({33, 65}, dtype, Layout::transposed, 4);
    cuda_be().unary(UnaryOp::gelu, x.cuda, out.cuda, 0.0);
    const Tensor expected = cpu_output({33, 65}, dtype);
    cpu_be().unary(UnaryOp::gelu, for_cpu(x.cpu), expected, 0.0);
    check_close(out.cuda, as_dtype(expected, dtype),
                label("gelu", dtype, {33, 65}, Layout::transposed));
  }
}

TEST_CASE("cuda parity: unary on large and misaligned contiguous inputs") {
  if (!gpu()) return;
  const Shape big = {3, 1000, 333};
  for (DType dtype : kFloating) {
    for (UnaryOp op : {UnaryOp::exp, UnaryOp::gelu})
      check_unary(op, 0.0, big, dtype, Layout::contiguous, 5);
    // A contiguous view one element into its storage: not aligned for vector loads.
    const Pair storage = make_pair({1 + 4099}, dtype, Layout::contiguous, 6);
    const Pair x = {storage.cpu.narrow(0, 1, 4099), storage.cuda.narrow(0, 1, 4099)};
    const Pair out = make_output({4099}, dtype);
    cuda_be().unary(UnaryOp::tanh, x.cuda, out.cuda, 0.0);
    const Tensor expected = cpu_output({4099}, dtype);
    cpu_be().unary(UnaryOp::tanh, for_cpu(x.cpu), expected, 0.0);
    check_close(out.cuda, as_dtype(expected, dtype),
                label("tanh", dtype, {4099}, Layout::contiguous) + " misaligned");
  }
}

// --- unary_backward ---

// grad and the saved tensor (x or y, whichever the op reads) in `layout`; out is contiguous.
void check_unary_backward(UnaryOp op, double alpha, const Shape& shape, DType dtype, Layout layout,
                          std::uint64_t seed) {
  const bool reads_x = unary_traits(op).reads == UnaryReads::x;
  const bool reads_y = unary_traits(op).reads == UnaryReads::y;
  // y = sqrt(x) is divided by: keep it away from 0.
  const auto [lo, hi] = reads_x               ? unary_range(op, alpha)
                        : op == UnaryOp::sqrt ? std::pair{0.2, 3.0}
                                              : std::pair{-2.0, 2.0};
  const Pair grad = make_pair(shape, dtype, layout, seed, -1.0, 1.0);
  const Pair saved = make_pair(shape, dtype, layout, seed + 1000, lo, hi);
  const Pair x = reads_x ? saved : Pair{};
  const Pair y = reads_y ? saved : Pair{};
  const Pair out = make_output(shape, dtype);
  cuda_be().unary_backward(op, grad.cuda, x.cuda, y.cuda, out.cuda, alpha);
  const Tensor expected = cpu_output(shape, dtype);
  cpu_be().unary_backward(op, for_cpu(grad.cpu), for_cpu(x.cpu), for_cpu(y.cpu), expected, alpha);
  check_close(
      out.cuda, as_dtype(expected, dtype),
      label(unary_name(op), dtype, shape, layout) + " backward alpha " + std::to_string(alpha));
}

TEST_CASE("cuda parity: unary_backward, every op, dtype and layout") {
  if (!gpu()) return;
  std::uint64_t seed = 100;
  for (UnaryOp op : kUnaryOps) {
    for (double alpha : alphas(op, true)) {
      for (DType dtype : kFloating) {
        for (Layout layout : kLayouts) {
          for (const Shape& shape : kShapes) {
            check_unary_backward(op, alpha, shape, dtype, layout, ++seed);
          }
        }
      }
    }
  }
  for (DType dtype : kFloating) {
    check_unary_backward(UnaryOp::gelu, 0.0, {3, 1000, 333}, dtype, Layout::contiguous, 9);
  }
}

// --- binary ---

// The layouts of (a, b) per case: each layout for both, and mixes (a bias add is contiguous a
// with broadcast b).
constexpr std::array<std::pair<Layout, Layout>, 7> kLayoutPairs = {{
    {Layout::contiguous, Layout::contiguous},
    {Layout::transposed, Layout::transposed},
    {Layout::sliced, Layout::sliced},
    {Layout::broadcast, Layout::broadcast},
    {Layout::contiguous, Layout::broadcast},
    {Layout::transposed, Layout::contiguous},
    {Layout::sliced, Layout::broadcast},
}};

void run_binary(BinaryOp op, const Pair& a, const Pair& b, DType dtype, const std::string& what) {
  const Shape& shape = a.cpu.shape();
  const DType out_dtype = is_comparison(op) ? DType::boolean : dtype;
  const Pair out = make_output(shape, out_dtype);
  cuda_be().binary(op, a.cuda, b.cuda, out.cuda);
  const Tensor expected = cpu_output(shape, out_dtype);
  cpu_be().binary(op, for_cpu(a.cpu), for_cpu(b.cpu), expected);
  check_close(out.cuda, as_dtype(expected, out_dtype), what);
}

void check_binary(BinaryOp op, DType dtype, const Shape& shape, std::pair<Layout, Layout> layouts,
                  std::uint64_t seed) {
  // Divisors stay away from 0 (int64 values are floor(7 |v|): 1 to 6 here).
  const double b_lo = op == BinaryOp::div ? 0.2 : -1.0;
  const Pair a = make_pair(shape, dtype, layouts.first, seed, -1.0, 1.0);
  const Pair b = make_pair(shape, dtype, layouts.second, seed + 1, b_lo, 1.0);
  const std::string what =
      label(binary_name(op), dtype, shape, layouts.first) + " with " + layout_name(layouts.second);
  run_binary(op, a, b, dtype, what);
  if (is_comparison(op) && layouts.first == layouts.second) {
    // b equal to a everywhere: the ties that separate lt from le.
    run_binary(op, a, make_pair(shape, dtype, layouts.first, seed, -1.0, 1.0), dtype,
               what + " (equal)");
  }
}

TEST_CASE("cuda parity: binary arithmetic, every op, dtype and layout") {
  if (!gpu()) return;
  std::uint64_t seed = 2000;
  for (BinaryOp op : kArithmetic) {
    for (DType dtype : {DType::float32, DType::float64, DType::bfloat16, DType::int64}) {
      for (const auto& layouts : kLayoutPairs) {
        for (const Shape& shape : kShapes) check_binary(op, dtype, shape, layouts, seed += 2);
      }
    }
  }
}

TEST_CASE("cuda parity: comparisons, every op, dtype and layout") {
  if (!gpu()) return;
  std::uint64_t seed = 3000;
  for (BinaryOp op : kComparisons) {
    for (DType dtype :
         {DType::float32, DType::float64, DType::bfloat16, DType::int64, DType::boolean}) {
      for (const auto& layouts : kLayoutPairs) {
        for (const Shape& shape : kShapes) check_binary(op, dtype, shape, layouts, seed += 2);
      }
    }
    // bfloat16 in a narrow range holds few distinct values: ties mixed with order.
    const Pair a = make_pair({33, 65}, DType::bfloat16, Layout::transposed, 5, 1.0, 1.05);
    const Pair b = make_pair({33, 65}, DType::bfloat16, Layout::sliced, 6, 1.0, 1.05);
    run_binary(op, a, b, DType::bfloat16, std::string(binary_name(op)) + " bfloat16 ties");
  }
}

TEST_CASE("cuda parity: binary with a broadcast scalar, large and misaligned inputs") {
  if (!gpu()) return;
  for (DType dtype : kFloating) {
    // b: one value broadcast to every element (all strides 0).
    const Pair a = make_pair({7, 33}, dtype, Layout::transposed, 11);
    const Pair one = make_pair({1, 1}, dtype, Layout::contiguous, 12);
    const Pair b = {raw::expand(one.cpu, {7, 33}, "test"), raw::expand(one.cuda, {7, 33}, "test")};
    for (BinaryOp op : kArithmetic)
      run_binary(op, a, b, dtype, std::string(binary_name(op)) + " scalar");
    // A bias add and a product at a size with many blocks per grid.
    const Shape big = {3, 1000, 333};
    run_binary(BinaryOp::add, make_pair(big, dtype, Layout::contiguous, 13),
               make_pair(big, dtype, Layout::broadcast, 14), dtype, "add large broadcast");
    run_binary(BinaryOp::mul, make_pair(big, dtype, Layout::contiguous, 15),
               make_pair(big, dtype, Layout::contiguous, 16), dtype, "mul large");
    // a one element into its storage (contiguous but not aligned for vectors), b aligned.
    const Pair storage = make_pair({4100}, dtype, Layout::contiguous, 17);
    const Pair shifted = {storage.cpu.narrow(0, 1, 4099), storage.cuda.narrow(0, 1, 4099)};
    run_binary(BinaryOp::sub, shifted, make_pair({4099}, dtype, Layout::contiguous, 18), dtype,
               "sub misaligned");
    run_binary(BinaryOp::lt, shifted, make_pair({4099}, dtype, Layout::contiguous, 19), dtype,
               "lt misaligned");
  }
}

TEST_CASE("cuda parity: maximum and minimum propagate NaN") {
  if (!gpu()) return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> av = {1.0, nan, 3.0, nan, -2.0, 0.5};
  const std::vector<double> bv = {nan, 2.0, 1.0, nan, -1.0, 0.5};
  for (DType dtype : kFloating) {
    const Pair a = host_pair(av, {2, 3}, dtype), b = host_pair(bv, {2, 3}, dtype);
    for (BinaryOp op : {BinaryOp::maximum, BinaryOp::minimum, BinaryOp::eq, BinaryOp::ne}) {
      run_binary(op, a, b, dtype, std::string(binary_name(op)) + " NaN");
      const Pair at = {a.cpu.transpose(0, 1), a.cuda.transpose(0, 1)};
      const Pair bt = {b.cpu.transpose(0, 1), b.cuda.transpose(0, 1)};
      run_binary(op, at, bt, dtype, std::string(binary_name(op)) + " NaN transposed");
    }
  }
}

// --- where ---

void check_where(DType dtype, const Shape& shape, Layout layout, std::uint64_t seed) {
  const Pair cond = make_pair(shape, DType::boolean, layout, seed);
  const Pair a = make_pair(shape, dtype, layout, seed + 1);
  const Pair b =
      make_pair(shape, dtype, layout == Layout::broadcast ? Layout::sliced : layout, seed + 2);
  const Pair out = make_output(shape, dtype);
  cuda_be().where(cond.cuda, a.cuda, b.cuda, out.cuda);
  const Tensor expected = cpu_output(shape, dtype);
  cpu_be().where(cond.cpu, for_cpu(a.cpu), for_cpu(b.cpu), expected);
  check_close(out.cuda, as_dtype(expected, dtype), label("where", dtype, shape, layout));
}

TEST_CASE("cuda parity: where, every dtype and layout") {
  if (!gpu()) return;
  std::uint64_t seed = 4000;
  for (DType dtype :
       {DType::float32, DType::float64, DType::bfloat16, DType::int64, DType::boolean}) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : kShapes) check_where(dtype, shape, layout, seed += 3);
    }
  }
  check_where(DType::float32, {3, 1000, 333}, Layout::contiguous, 5);
  check_where(DType::bfloat16, {3, 1000, 333}, Layout::broadcast, 6);
}

// --- bad input (on a GPU: the checks run before any kernel) ---

TEST_CASE("cuda: elementwise ops reject bad input with an Error") {
  if (!gpu()) return;
  const Pair x = make_pair({3, 4}, DType::float32, Layout::contiguous, 1);
  const Pair wrong_shape = make_output({4, 3}, DType::float32);
  const Pair f64 = make_output({3, 4}, DType::float64);
  const Pair flags = make_output({3, 4}, DType::boolean);
  CHECK_THROWS_AS(cuda_be().unary(UnaryOp::exp, x.cuda, wrong_shape.cuda, 0.0), Error);
  CHECK_THROWS_AS(cuda_be().unary(UnaryOp::exp, x.cuda, f64.cuda, 0.0), Error);
  // A CPU tensor handed to the GPU backend is refused, not dereferenced.
  CHECK_THROWS_AS(
      cuda_be().unary(UnaryOp::exp, x.cpu, make_output({3, 4}, DType::float32).cuda, 0.0), Error);
  const Pair ints = make_pair({3, 4}, DType::int64, Layout::contiguous, 2);
  CHECK_THROWS_AS(
      cuda_be().unary(UnaryOp::exp, ints.cuda, make_output({3, 4}, DType::int64).cuda, 0.0), Error);
  CHECK_THROWS_AS(cuda_be().unary_backward(UnaryOp::exp, x.cuda, Tensor(), Tensor(),
                                           make_output({3, 4}, DType::float32).cuda, 0.0),
                  Error);
  CHECK_THROWS_AS(cuda_be().binary(BinaryOp::add, x.cuda, f64.cuda, f64.cuda), Error);
  CHECK_THROWS_AS(cuda_be().binary(BinaryOp::lt, x.cuda, x.cuda, f64.cuda), Error);
  CHECK_THROWS_AS(cuda_be().where(x.cuda, x.cuda, x.cuda, make_output({3, 4}, DType::float32).cuda),
                  Error);
  CHECK_THROWS_AS(cuda_be().where(flags.cuda, x.cuda, f64.cuda, f64.cuda), Error);
  // Integer division by zero is reported, as on the CPU.
  const Pair zeros_b = host_pair(std::vector<double>(12, 0.0), {3, 4}, DType::int64);
  CHECK_THROWS_AS(cuda_be().binary(BinaryOp::div, ints.cuda, zeros_b.cuda,
                                   make_output({3, 4}, DType::int64).cuda),
                  Error);
  CHECK_THROWS_AS(
      cpu_be().binary(BinaryOp::div, ints.cpu, zeros_b.cpu, make_output({3, 4}, DType::int64).cpu),
      Error);
}

}  // namespace

}  // namespace tinyformer::parity
