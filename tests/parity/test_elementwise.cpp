// Parity of the elementwise ops against the reference backend: unary (forward and backward),
// binary and where, for every row of core/elementwise.def, dtype and input layout (contiguous,
// transposed, sliced, broadcast), at odd sizes. The cases are built from the table rows (each
// row's domain gives its inputs, its int64 flag whether int64 is run), so a new row is tested
// without a new line here; test_coverage.cpp checks that every row has its cases.
//
// A bfloat16 case runs the reference in float32 on the same values (widening is exact) and
// compares with bfloat16's tolerance.
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
#include "parity/parity.h"

TF_PARITY_COVERS(unary);
TF_PARITY_COVERS(unary_backward);
TF_PARITY_COVERS(binary);
TF_PARITY_COVERS(where);

namespace tinyformer::parity {

// --- the cases, from the table rows ---

namespace {

// The inputs a row's domain allows: any real, or x > 0 kept away from 0.
std::pair<double, double> domain_range(UnaryDomain domain) {
  return domain == UnaryDomain::positive ? std::pair{0.1, 3.0} : std::pair{-3.0, 3.0};
}

// The exponents of pow_scalar worth a case: each one the backends special-case, and pow()
// itself; 0 (unused) for every other row.
std::vector<double> alphas(UnaryOp op, bool backward) {
  if (op != UnaryOp::pow_scalar) return {0.0};
  if (backward) return {0.0, 1.0, 2.0, 1.5, -2.0};
  return {2.0, 1.0, 0.5, -1.0, 3.0, 1.5};
}

}  // namespace

std::vector<UnaryCase> unary_cases(bool backward) {
  std::vector<UnaryCase> cases;
  for (UnaryOp op : unary_ops) {
    const UnaryTraits& row = unary_traits(op);
    // The backward reads x (drawn from the domain) or y = op(x): y in the positive domain is
    // divided by (sqrt), so it stays away from 0 too.
    auto [lo, hi] = domain_range(row.domain);
    if (backward && row.reads != UnaryReads::x) {
      std::tie(lo, hi) =
          row.domain == UnaryDomain::positive ? std::pair{0.2, 3.0} : std::pair{-2.0, 2.0};
    }
    for (double alpha : alphas(op, backward)) {
      for (DType dtype : floating_dtypes()) cases.push_back({op, alpha, dtype, lo, hi});
    }
    // int64 values from [-50, 50): negative values too, where abs and neg differ.
    if (!backward && row.int64 && supports(DType::int64)) {
      cases.push_back({op, 0.0, DType::int64, -50.0, 50.0});
    }
  }
  return cases;
}

std::vector<BinaryCase> binary_cases() {
  std::vector<BinaryCase> cases;
  for (BinaryOp op : binary_ops) {
    std::vector<DType> dtypes = floating_dtypes();
    if (supports(DType::int64)) dtypes.push_back(DType::int64);
    if (is_comparison(op) && supports(DType::boolean)) dtypes.push_back(DType::boolean);
    for (DType dtype : dtypes) {
      const bool ints = dtype == DType::int64;
      // Divisors stay away from 0 (an int64 zero divisor is an error, tested on its own).
      const double b_lo = op == BinaryOp::div ? (ints ? 1.0 : 0.2) : (ints ? -50.0 : -1.0);
      cases.push_back({op, dtype, ints ? -50.0 : -1.0, ints ? 50.0 : 1.0, b_lo, ints ? 50.0 : 1.0});
    }
  }
  return cases;
}

namespace {

constexpr std::array kLayouts = {Layout::contiguous, Layout::transposed, Layout::sliced,
                                 Layout::broadcast};
// One element, sizes below a warp, and counts that are no multiple of a block or of a vector.
const std::vector<Shape> kShapes = {{1, 1}, {7, 33}, {33, 1031}, {3, 5, 7}};

// t as the reference computes with it (bfloat16 widened to float32; a copy, contiguous).
Tensor for_ref(const Tensor& t) {
  return t.defined() && t.dtype() == DType::bfloat16 ? raw::to_dtype(t, DType::float32) : t;
}
// The reference's result in the case's dtype.
Tensor as_dtype(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : raw::to_dtype(t, dtype);
}
// A reference output for a case of `dtype`, filled with a sentinel as make_output's are.
Tensor ref_output(const Shape& shape, DType dtype) {
  const DType d = ref_dtype(dtype);
  const double sentinel = d == DType::boolean ? 1.0
                          : d == DType::int64 ? -12345.0
                                              : std::numeric_limits<double>::quiet_NaN();
  return full(shape, sentinel, {.dtype = d});
}

std::string label(const char* op, DType dtype, const Shape& shape, Layout layout) {
  return std::string(op) + " " + dtype_name(dtype) + " " + shape_str(shape) + " " +
         layout_name(layout);
}

// The same values in the same layout on both sides from explicit host values (contiguous).
Pair host_pair(const std::vector<double>& values, const Shape& shape, DType dtype) {
  const Tensor host = raw::to_dtype(from<double>(values, shape), dtype);
  return {host, to_dev(host)};
}

// --- unary ---

void check_unary(UnaryOp op, double alpha, const Shape& shape, DType dtype, Layout layout,
                 std::uint64_t seed, double lo, double hi) {
  const Pair x = make_pair(shape, dtype, layout, seed, lo, hi);
  const Pair out = make_output(shape, dtype);
  dev().unary(op, x.dev, out.dev, alpha);
  const Tensor expected = ref_output(shape, dtype);
  ref().unary(op, for_ref(x.ref), expected, alpha);
  check_close(out.dev, as_dtype(expected, dtype),
              label(unary_name(op), dtype, shape, layout) + " alpha " + std::to_string(alpha));
}

TEST_CASE("parity: unary, every table row, dtype and layout") {
  if (!available()) return;
  std::uint64_t seed = 1;
  for (const UnaryCase& c : unary_cases(false)) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : kShapes) {
        check_unary(c.op, c.alpha, shape, c.dtype, layout, ++seed, c.lo, c.hi);
      }
    }
  }
}

TEST_CASE("parity: unary on int64 at INT64_MIN and into a strided output") {
  if (!available()) return;
  // Negative values and INT64_MIN, whose negation wraps around.
  const Pair ints =
      host_pair({-5.0, 3.0, 0.0, -9223372036854775808.0, 7.0, -1.0}, {2, 3}, DType::int64);
  for (UnaryOp op : unary_ops) {
    if (!unary_traits(op).int64) continue;
    const Pair out = make_output({3, 2}, DType::int64);
    dev().unary(op, ints.dev.transpose(0, 1), out.dev, 0.0);
    const Tensor expected = ref_output({3, 2}, DType::int64);
    ref().unary(op, ints.ref.transpose(0, 1), expected, 0.0);
    check_close(out.dev, expected, std::string(unary_name(op)) + " int64 negative");
  }
  // out: a transposed view; every element must be written through its stride.
  for (DType dtype : floating_dtypes()) {
    const Pair x = make_pair({33, 65}, dtype, Layout::contiguous, 3);
    const Pair out = make_pair({33, 65}, dtype, Layout::transposed, 4);
    dev().unary(UnaryOp::gelu, x.dev, out.dev, 0.0);
    const Tensor expected = ref_output({33, 65}, dtype);
    ref().unary(UnaryOp::gelu, for_ref(x.ref), expected, 0.0);
    check_close(out.dev, as_dtype(expected, dtype),
                label("gelu", dtype, {33, 65}, Layout::transposed));
  }
}

TEST_CASE("parity: unary on large and misaligned contiguous inputs") {
  if (!available()) return;
  const Shape big = {3, 1000, 333};
  for (DType dtype : floating_dtypes()) {
    for (UnaryOp op : {UnaryOp::exp, UnaryOp::gelu})
      check_unary(op, 0.0, big, dtype, Layout::contiguous, 5, -3.0, 3.0);
    // A contiguous view one element into its storage: not aligned for vector loads.
    const Pair storage = make_pair({1 + 4099}, dtype, Layout::contiguous, 6);
    const Pair x = {storage.ref.narrow(0, 1, 4099), storage.dev.narrow(0, 1, 4099)};
    const Pair out = make_output({4099}, dtype);
    dev().unary(UnaryOp::tanh, x.dev, out.dev, 0.0);
    const Tensor expected = ref_output({4099}, dtype);
    ref().unary(UnaryOp::tanh, for_ref(x.ref), expected, 0.0);
    check_close(out.dev, as_dtype(expected, dtype),
                label("tanh", dtype, {4099}, Layout::contiguous) + " misaligned");
  }
}

// --- unary_backward ---

// grad and the saved tensor (x or y, whichever the row reads) in `layout`; out is contiguous.
void check_unary_backward(UnaryOp op, double alpha, const Shape& shape, DType dtype, Layout layout,
                          std::uint64_t seed, double lo, double hi) {
  const UnaryReads reads = unary_traits(op).reads;
  const Pair grad = make_pair(shape, dtype, layout, seed, -1.0, 1.0);
  const Pair saved = make_pair(shape, dtype, layout, seed + 1000, lo, hi);
  const Pair x = reads == UnaryReads::x ? saved : Pair{};
  const Pair y = reads == UnaryReads::y ? saved : Pair{};
  const Pair out = make_output(shape, dtype);
  dev().unary_backward(op, grad.dev, x.dev, y.dev, out.dev, alpha);
  const Tensor expected = ref_output(shape, dtype);
  ref().unary_backward(op, for_ref(grad.ref), for_ref(x.ref), for_ref(y.ref), expected, alpha);
  check_close(
      out.dev, as_dtype(expected, dtype),
      label(unary_name(op), dtype, shape, layout) + " backward alpha " + std::to_string(alpha));
}

TEST_CASE("parity: unary_backward, every table row, dtype and layout") {
  if (!available()) return;
  std::uint64_t seed = 100;
  for (const UnaryCase& c : unary_cases(true)) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : kShapes) {
        check_unary_backward(c.op, c.alpha, shape, c.dtype, layout, ++seed, c.lo, c.hi);
      }
    }
  }
  for (DType dtype : floating_dtypes()) {
    check_unary_backward(UnaryOp::gelu, 0.0, {3, 1000, 333}, dtype, Layout::contiguous, 9, -3.0,
                         3.0);
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
  const Shape& shape = a.ref.shape();
  const DType out_dtype = is_comparison(op) ? DType::boolean : dtype;
  const Pair out = make_output(shape, out_dtype);
  dev().binary(op, a.dev, b.dev, out.dev);
  const Tensor expected = ref_output(shape, out_dtype);
  ref().binary(op, for_ref(a.ref), for_ref(b.ref), expected);
  check_close(out.dev, as_dtype(expected, out_dtype), what);
}

void check_binary(const BinaryCase& c, const Shape& shape, std::pair<Layout, Layout> layouts,
                  std::uint64_t seed) {
  const Pair a = make_pair(shape, c.dtype, layouts.first, seed, c.a_lo, c.a_hi);
  const Pair b = make_pair(shape, c.dtype, layouts.second, seed + 1, c.b_lo, c.b_hi);
  const std::string what = label(binary_name(c.op), c.dtype, shape, layouts.first) + " with " +
                           layout_name(layouts.second);
  run_binary(c.op, a, b, c.dtype, what);
  if (is_comparison(c.op) && layouts.first == layouts.second) {
    // b equal to a everywhere: the ties that separate lt from le.
    run_binary(c.op, a, make_pair(shape, c.dtype, layouts.first, seed, c.a_lo, c.a_hi), c.dtype,
               what + " (equal)");
  }
}

TEST_CASE("parity: binary, every table row, dtype and layout") {
  if (!available()) return;
  std::uint64_t seed = 2000;
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& layouts : kLayoutPairs) {
      for (const Shape& shape : kShapes) check_binary(c, shape, layouts, seed += 2);
    }
  }
  if (supports(DType::bfloat16)) {
    // bfloat16 in a narrow range holds few distinct values: ties mixed with order.
    for (BinaryOp op : binary_ops) {
      if (!is_comparison(op)) continue;
      const Pair a = make_pair({33, 65}, DType::bfloat16, Layout::transposed, 5, 1.0, 1.05);
      const Pair b = make_pair({33, 65}, DType::bfloat16, Layout::sliced, 6, 1.0, 1.05);
      run_binary(op, a, b, DType::bfloat16, std::string(binary_name(op)) + " bfloat16 ties");
    }
  }
}

TEST_CASE("parity: int64 division truncates toward zero, negative divisors, INT64_MIN / -1") {
  if (!available()) return;
  const Pair a =
      host_pair({7.0, -7.0, 7.0, -7.0, -9223372036854775808.0, 5.0}, {2, 3}, DType::int64);
  const Pair b = host_pair({2.0, 2.0, -2.0, -2.0, -1.0, 7.0}, {2, 3}, DType::int64);
  run_binary(BinaryOp::div, a, b, DType::int64, "div int64 signs");
  run_binary(BinaryOp::div, {a.ref.transpose(0, 1), a.dev.transpose(0, 1)},
             {b.ref.transpose(0, 1), b.dev.transpose(0, 1)}, DType::int64,
             "div int64 signs transposed");
}

TEST_CASE("parity: binary with a broadcast scalar, large and misaligned inputs") {
  if (!available()) return;
  for (DType dtype : floating_dtypes()) {
    // b: one value broadcast to every element (all strides 0).
    const Pair a = make_pair({7, 33}, dtype, Layout::transposed, 11);
    const Pair one = make_pair({1, 1}, dtype, Layout::contiguous, 12);
    const Pair b = {raw::expand(one.ref, {7, 33}, "test"), raw::expand(one.dev, {7, 33}, "test")};
    for (BinaryOp op : binary_ops)
      run_binary(op, a, b, dtype, std::string(binary_name(op)) + " scalar");
    // A bias add and a product at a size with many blocks per grid.
    const Shape big = {3, 1000, 333};
    run_binary(BinaryOp::add, make_pair(big, dtype, Layout::contiguous, 13),
               make_pair(big, dtype, Layout::broadcast, 14), dtype, "add large broadcast");
    run_binary(BinaryOp::mul, make_pair(big, dtype, Layout::contiguous, 15),
               make_pair(big, dtype, Layout::contiguous, 16), dtype, "mul large");
    // a one element into its storage (contiguous but not aligned for vectors), b aligned.
    const Pair storage = make_pair({4100}, dtype, Layout::contiguous, 17);
    const Pair shifted = {storage.ref.narrow(0, 1, 4099), storage.dev.narrow(0, 1, 4099)};
    run_binary(BinaryOp::sub, shifted, make_pair({4099}, dtype, Layout::contiguous, 18), dtype,
               "sub misaligned");
    run_binary(BinaryOp::lt, shifted, make_pair({4099}, dtype, Layout::contiguous, 19), dtype,
               "lt misaligned");
  }
}

TEST_CASE("parity: binary written over its first operand (out is a)") {
  // core/ops.def allows out == a (contiguous), as the autograd engine's in-place sum of
  // gradients uses it: sizes below and past a vector, and one with many blocks per grid.
  if (!available()) return;
  std::uint64_t seed = 2500;
  for (DType dtype : floating_dtypes()) {
    if (dtype == DType::bfloat16 && !dev().supports(Op::binary, dtype)) continue;
    for (const Shape& shape : {Shape{7}, Shape{33, 65}, Shape{3, 1000, 333}}) {
      for (BinaryOp op : {BinaryOp::add, BinaryOp::mul}) {
        const Pair a = make_pair(shape, dtype, Layout::contiguous, seed++);
        const Pair b = make_pair(shape, dtype, Layout::contiguous, seed++);
        const Tensor expected = ref_output(shape, dtype);
        ref().binary(op, for_ref(a.ref), for_ref(b.ref), expected);
        dev().binary(op, a.dev, b.dev, a.dev);
        check_close(a.dev, as_dtype(expected, dtype),
                    label(binary_name(op), dtype, shape, Layout::contiguous) + " in place");
      }
    }
  }
}

TEST_CASE("parity: maximum and minimum propagate NaN") {
  if (!available()) return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> av = {1.0, nan, 3.0, nan, -2.0, 0.5};
  const std::vector<double> bv = {nan, 2.0, 1.0, nan, -1.0, 0.5};
  for (DType dtype : floating_dtypes()) {
    const Pair a = host_pair(av, {2, 3}, dtype), b = host_pair(bv, {2, 3}, dtype);
    for (BinaryOp op : {BinaryOp::maximum, BinaryOp::minimum, BinaryOp::eq, BinaryOp::ne}) {
      run_binary(op, a, b, dtype, std::string(binary_name(op)) + " NaN");
      const Pair at = {a.ref.transpose(0, 1), a.dev.transpose(0, 1)};
      const Pair bt = {b.ref.transpose(0, 1), b.dev.transpose(0, 1)};
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
  dev().where(cond.dev, a.dev, b.dev, out.dev);
  const Tensor expected = ref_output(shape, dtype);
  ref().where(cond.ref, for_ref(a.ref), for_ref(b.ref), expected);
  check_close(out.dev, as_dtype(expected, dtype), label("where", dtype, shape, layout));
}

TEST_CASE("parity: where, every dtype and layout") {
  if (!available()) return;
  std::uint64_t seed = 4000;
  for (DType dtype :
       supported({DType::float32, DType::float64, DType::bfloat16, DType::int64, DType::boolean})) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : kShapes) check_where(dtype, shape, layout, seed += 3);
    }
  }
  check_where(DType::float32, {3, 1000, 333}, Layout::contiguous, 5);
  if (supports(DType::bfloat16)) check_where(DType::bfloat16, {3, 1000, 333}, Layout::broadcast, 6);
}

// --- bad input (the checks run before any kernel) ---

TEST_CASE("parity: elementwise ops reject bad input with an Error, as the reference does") {
  if (!available()) return;
  const Pair x = make_pair({3, 4}, DType::float32, Layout::contiguous, 1);
  const Pair wrong_shape = make_output({4, 3}, DType::float32);
  const Pair f64 = make_output({3, 4}, DType::float64);
  const Pair flags = make_output({3, 4}, DType::boolean);
  CHECK_THROWS_AS(dev().unary(UnaryOp::exp, x.dev, wrong_shape.dev, 0.0), Error);
  CHECK_THROWS_AS(dev().unary(UnaryOp::exp, x.dev, f64.dev, 0.0), Error);
  // A CPU tensor handed to a GPU backend is refused, not dereferenced.
  if (!device().is_cpu()) {
    CHECK_THROWS_AS(dev().unary(UnaryOp::exp, x.ref, make_output({3, 4}, DType::float32).dev, 0.0),
                    Error);
  }
  const Pair ints = make_pair({3, 4}, DType::int64, Layout::contiguous, 2);
  CHECK_THROWS_AS(dev().unary(UnaryOp::exp, ints.dev, make_output({3, 4}, DType::int64).dev, 0.0),
                  Error);
  CHECK_THROWS_AS(dev().unary_backward(UnaryOp::exp, x.dev, Tensor(), Tensor(),
                                       make_output({3, 4}, DType::float32).dev, 0.0),
                  Error);
  CHECK_THROWS_AS(dev().binary(BinaryOp::add, x.dev, f64.dev, f64.dev), Error);
  CHECK_THROWS_AS(dev().binary(BinaryOp::lt, x.dev, x.dev, f64.dev), Error);
  CHECK_THROWS_AS(dev().where(x.dev, x.dev, x.dev, make_output({3, 4}, DType::float32).dev), Error);
  CHECK_THROWS_AS(dev().where(flags.dev, x.dev, f64.dev, f64.dev), Error);
  // Integer division by zero is reported, by the reference too.
  const Pair zeros_b = host_pair(std::vector<double>(12, 0.0), {3, 4}, DType::int64);
  CHECK_THROWS_AS(
      dev().binary(BinaryOp::div, ints.dev, zeros_b.dev, make_output({3, 4}, DType::int64).dev),
      Error);
  CHECK_THROWS_AS(
      ref().binary(BinaryOp::div, ints.ref, zeros_b.ref, make_output({3, 4}, DType::int64).ref),
      Error);
}

}  // namespace

}  // namespace tinyformer::parity
