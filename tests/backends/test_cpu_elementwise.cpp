// The CPU backend's memory-bound kernels (copy, random, unary, binary, reduce, index, loss)
// against the reference backend (plain loops in double precision), on contiguous, transposed,
// sliced and broadcast (stride-0) views of odd sizes, including sizes large enough to run on
// threads, with the CPU's own tolerances (tighter than the shared parity harness's); and the
// CPU's own rules: special values, error messages, thread-count independence.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "backends/reference/reference_backend.h"
#include "core/backend.h"
#include "core/tensor.h"

namespace {

using namespace tinyformer;

Backend& cpu() {
  return backend(Device::cpu());
}
Backend& ref() {
  return reference_backend();
}

// --- reading and making tensors without the kernels under test ---

// The element at storage position `at` (in elements) of t's storage.
double element(const Tensor& t, std::int64_t at) {
  const char* base = static_cast<const char*>(t.storage()->data());
  switch (t.dtype()) {
    case DType::float32:
      return reinterpret_cast<const float*>(base)[at];
    case DType::float64:
      return reinterpret_cast<const double*>(base)[at];
    case DType::int64:
      return static_cast<double>(reinterpret_cast<const std::int64_t*>(base)[at]);
    case DType::boolean:
      return reinterpret_cast<const bool*>(base)[at] ? 1.0 : 0.0;
    case DType::bfloat16:
      return static_cast<float>(reinterpret_cast<const bfloat16*>(base)[at]);
  }
  return 0;
}

// Storage positions of t's elements in row-major order, walked through t's strides.
std::vector<std::int64_t> positions(const Tensor& t) {
  std::vector<std::int64_t> at(static_cast<std::size_t>(t.numel()));
  Shape index(t.shape().size(), 0);
  std::int64_t pos = t.offset();
  for (auto& a : at) {
    a = pos;
    for (std::int64_t d = t.dim(); d-- > 0;) {
      pos += t.stride(d);
      if (++index[d] < t.size(d)) break;
      pos -= t.size(d) * t.stride(d);
      index[d] = 0;
    }
  }
  return at;
}

// t's values in row-major order, read without the kernels under test.
std::vector<double> values(const Tensor& t) {
  const auto at = positions(t);
  std::vector<double> v(at.size());
  for (std::size_t i = 0; i < at.size(); ++i) v[i] = element(t, at[i]);
  return v;
}

// Deterministic values in [lo, hi) (a 64-bit LCG), rounded to multiples of `quantum` when it is
// non-zero (so comparisons meet ties).
std::vector<double> pseudo_random(std::int64_t n, std::uint64_t seed, double lo, double hi,
                                  double quantum = 0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) / 9007199254740992.0;
    if (quantum > 0) x = std::floor(x / quantum) * quantum;
  }
  return v;
}

// A fresh contiguous tensor of `dtype` holding v (rounded to the dtype).
Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType dtype) {
  switch (dtype) {
    case DType::float32:
      return from(std::vector<float>(v.begin(), v.end()), shape);
    case DType::float64:
      return from(v, shape);
    case DType::int64: {
      std::vector<std::int64_t> w(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) w[i] = std::llround(v[i]);
      return from(w, shape);
    }
    case DType::boolean: {
      std::vector<bool> w(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) w[i] = v[i] != 0;
      return from(w, shape);
    }
    case DType::bfloat16:
      break;
  }
  return {};
}

enum class Layout { contiguous, transposed, sliced, broadcast, per_row, scalar };
const char* layout_name(Layout l) {
  const char* names[] = {"contiguous", "transposed", "sliced", "broadcast", "per_row", "scalar"};
  return names[static_cast<int>(l)];
}
constexpr Layout kLayouts[] = {Layout::contiguous, Layout::transposed, Layout::sliced,
                               Layout::broadcast};

// A view of `shape` laid out as `layout` over a storage of pseudo-random values in [lo, hi):
// transposed reverses the dims of a contiguous base, sliced takes every other element of the
// last dim from offset (1, ..., 1) of a larger base, broadcast repeats one slice along dim 0,
// per_row one value along the last dim (a [..., 1] tensor expanded: a row's mask or scale), scalar
// one value everywhere. kLayouts: the four that every test walks.
Tensor make_view(const Shape& shape, Layout layout, DType dtype, std::uint64_t seed, double lo,
                 double hi, double quantum = 0) {
  const auto fresh = [&](const Shape& s) {
    return tensor_of(pseudo_random(shape_numel(s), seed, lo, hi, quantum), s, dtype);
  };
  switch (layout) {
    case Layout::contiguous:
      return fresh(shape);
    case Layout::transposed: {
      Tensor base = fresh(Shape(shape.rbegin(), shape.rend()));
      Shape strides(base.strides().rbegin(), base.strides().rend());
      return raw::as_strided(base, shape, strides, 0);
    }
    case Layout::sliced: {
      Shape big = shape;
      for (auto& d : big) d += 1;
      big.back() = 2 * shape.back() + 2;
      Tensor base = fresh(big);
      Shape strides = base.strides();
      const std::int64_t offset = std::accumulate(strides.begin(), strides.end(), std::int64_t{0});
      strides.back() *= 2;
      return raw::as_strided(base, shape, strides, offset);
    }
    case Layout::broadcast: {
      Shape small = shape;
      small[0] = 1;
      Tensor base = fresh(small);
      Shape strides = base.strides();
      strides[0] = 0;
      return raw::as_strided(base, shape, strides, 0);
    }
    case Layout::per_row: {
      Shape small = shape;
      small.back() = 1;
      Tensor base = fresh(small);
      Shape strides = base.strides();
      strides.back() = 0;
      return raw::as_strided(base, shape, strides, 0);
    }
    case Layout::scalar:
      return raw::as_strided(fresh({1}), shape, Shape(shape.size(), 0), 0);
  }
  return {};
}

// Odd sizes, and one large enough (> 32K elements) to run on several threads.
const std::vector<Shape> kShapes = {{1}, {7}, {33}, {3, 5}, {2, 3, 7}, {41, 1003}};

// The large cases test the threaded paths, which do not depend on the dtype: float32 only,
// to keep the suite fast.
bool large(const Shape& shape) {
  return shape_numel(shape) > 32768;
}

struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance(DType dtype) {
  return dtype == DType::float32 ? Tolerance{2e-6, 1e-6} : Tolerance{1e-13, 1e-14};
}

// Checks got against want elementwise (NaN matches NaN) and reports the first mismatch.
void check_close(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const bool ok = both_nan || got[i] == want[i] ||
                    std::abs(got[i] - want[i]) <= tol.atol + tol.rtol * std::abs(want[i]);
    if (!ok && bad++ == 0) first = i;
  }
  INFO("first mismatch at ", first, ": got ", bad ? got[first] : 0.0, ", want ",
       bad ? want[first] : 0.0, " (", bad, " of ", got.size(), " differ)");
  CHECK(bad == 0);
}

// The value a kernel writing dtype should produce for the exact result v.
double round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::float32:
      return static_cast<float>(v);
    case DType::boolean:
      return v != 0 ? 1 : 0;
    default:
      return v;
  }
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs f with the OpenMP thread count set to n, restoring it afterwards.
template <typename F>
void with_threads(int n, F&& f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(before);
}

constexpr DType kFloating[] = {DType::float32, DType::float64};

// t widened to float64 by the reference backend (exactly), for expected values computed and
// kept in double; int64 and bool tensors are returned as they are.
Tensor widened(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return t;
  Tensor wide = empty(t.shape(), {.dtype = DType::float64});
  ref().copy(t, wide);
  return wide;
}

}  // namespace

// --- fill, copy, arange ---

TEST_CASE("cpu fill writes every element of a view of any dtype and nothing else") {
  for (DType dtype : {DType::float32, DType::float64, DType::int64, DType::boolean}) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
        CAPTURE(dtype);
        CAPTURE(layout_name(layout));
        Tensor view = make_view(shape, layout, dtype, 1, -3, 3);
        // The base storage, seen whole, to check that elements outside the view are unchanged.
        const auto capacity =
            static_cast<std::int64_t>(view.storage()->nbytes() / element_size(dtype));
        Tensor whole = raw::as_strided(view, {capacity}, {1}, 0);
        std::vector<double> want = values(whole);
        cpu().fill(view, 2.75);
        const double v = dtype == DType::int64 ? 2 : round_to(dtype, 2.75);
        for (std::int64_t at : positions(view)) want[at] = v;
        check_close(values(whole), want, {0, 0});
      }
    }
  }
}

TEST_CASE("cpu copy converts between every pair of dtypes") {
  const std::vector<double> in = {0, 1, -1, 2.5, -2.5, 0.25, 7, -1e6, 3e9};
  for (DType from_dtype : {DType::float32, DType::float64, DType::int64, DType::boolean}) {
    for (DType to_dtype : {DType::float32, DType::float64, DType::int64, DType::boolean}) {
      CAPTURE(from_dtype);
      CAPTURE(to_dtype);
      Tensor src = tensor_of(in, {3, 3}, from_dtype);
      Tensor dst = empty({3, 3}, {.dtype = to_dtype});
      cpu().copy(src, dst);
      std::vector<double> want = values(src);
      for (double& w : want) {
        w = to_dtype == DType::int64 ? std::trunc(w) : round_to(to_dtype, w);
      }
      check_close(values(dst), want, {0, 0});
    }
  }
  // Floating -> int64 saturates out-of-range values and maps NaN to 0 instead of trapping.
  Tensor odd = from<double>({std::nan(""), 1e300, -1e300, -7.9}, {4});
  Tensor ints = empty({4}, {.dtype = DType::int64});
  cpu().copy(odd, ints);
  CHECK(ints.data<std::int64_t>()[0] == 0);
  CHECK(ints.data<std::int64_t>()[1] == std::numeric_limits<std::int64_t>::max());
  CHECK(ints.data<std::int64_t>()[2] == std::numeric_limits<std::int64_t>::min());
  CHECK(ints.data<std::int64_t>()[3] == -7);
}

TEST_CASE("cpu copy reads and writes any strides") {
  for (DType dtype : kFloating) {
    for (const Shape& shape : kShapes) {
      for (Layout src_layout : kLayouts) {
        for (Layout dst_layout : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
          CAPTURE(dtype);
          CAPTURE(shape_str(shape));
          CAPTURE(layout_name(src_layout));
          CAPTURE(layout_name(dst_layout));
          Tensor src = make_view(shape, src_layout, dtype, 2, -5, 5);
          Tensor dst = make_view(shape, dst_layout, DType::float64, 3, 0, 1);
          cpu().copy(src, dst);
          check_close(values(dst), values(src), {0, 0});
        }
      }
    }
  }
  CHECK(contains(error_of([] { cpu().copy(empty({2, 3}), empty({3, 2})); }), "copy"));
}

TEST_CASE("cpu arange writes start + i * step") {
  for (DType dtype : {DType::float32, DType::float64, DType::int64}) {
    for (std::int64_t n : {1, 7, 40000}) {
      Tensor out = empty({n}, {.dtype = dtype});
      cpu().arange(out, 3, dtype == DType::int64 ? 2 : 0.5);
      std::vector<double> want(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) {
        want[i] = round_to(dtype, 3 + static_cast<double>(i) * (dtype == DType::int64 ? 2 : 0.5));
      }
      check_close(values(out), want, {0, 0});
    }
  }
  CHECK(contains(error_of([] { cpu().arange(empty({3}, {.dtype = DType::boolean}), 0, 1); }),
                 "arange"));
}

// --- random ---

TEST_CASE("cpu random draws the right distributions") {
  const std::int64_t n = 200000;
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    Tensor normal = empty({n}, {.dtype = dtype});
    cpu().random(normal, RandomKind::normal, 42, 0, 1.5, 2.0);
    const auto v = values(normal);
    double mean = 0, var = 0;
    for (double x : v) mean += x;
    mean /= n;
    for (double x : v) var += (x - mean) * (x - mean);
    var /= n;
    CHECK(mean == doctest::Approx(1.5).epsilon(0.02));
    CHECK(std::sqrt(var) == doctest::Approx(2.0).epsilon(0.01));

    Tensor uniform = empty({n}, {.dtype = dtype});
    cpu().random(uniform, RandomKind::uniform, 42, 0, -1, 3);
    const auto u = values(uniform);
    CHECK(*std::min_element(u.begin(), u.end()) >= -1);
    CHECK(*std::max_element(u.begin(), u.end()) < 3);
    CHECK(std::accumulate(u.begin(), u.end(), 0.0) / n == doctest::Approx(1.0).epsilon(0.01));
  }
  for (DType dtype : {DType::float32, DType::float64, DType::int64, DType::boolean}) {
    Tensor coin = empty({n}, {.dtype = dtype});
    cpu().random(coin, RandomKind::bernoulli, 7, 0, 0.3, 0);
    const auto c = values(coin);
    CHECK(std::all_of(c.begin(), c.end(), [](double x) { return x == 0 || x == 1; }));
    CHECK(std::accumulate(c.begin(), c.end(), 0.0) / n == doctest::Approx(0.3).epsilon(0.02));
  }
  CHECK(contains(error_of([] {
                   cpu().random(empty({3}, {.dtype = DType::int64}), RandomKind::normal, 1, 0, 0,
                                1);
                 }),
                 "random"));
  CHECK(contains(error_of([] { cpu().random(empty({3}), RandomKind::bernoulli, 1, 0, 1.5, 0); }),
                 "bernoulli"));
  // scaled_bernoulli: the 0/1 draw of the same seed and offset times b rounded to the dtype.
  for (DType dtype : {DType::float32, DType::float64, DType::bfloat16}) {
    CAPTURE(dtype);
    const double b = 1.0 / 0.7;
    Tensor coin = empty({n}, {.dtype = dtype}), scaled = empty({n}, {.dtype = dtype});
    cpu().random(coin, RandomKind::bernoulli, 7, 5, 0.7, 0);
    cpu().random(scaled, RandomKind::scaled_bernoulli, 7, 5, 0.7, b);
    Tensor b_rounded = full({1}, b, {.dtype = dtype});
    const double kept_value = values(b_rounded)[0];
    const auto c = values(coin), s = values(scaled);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < c.size(); ++i) wrong += s[i] != c[i] * kept_value;
    CHECK(wrong == 0);
    CHECK(std::accumulate(c.begin(), c.end(), 0.0) / n == doctest::Approx(0.7).epsilon(0.02));
  }
  CHECK(contains(error_of([] {
                   cpu().random(empty({3}, {.dtype = DType::int64}), RandomKind::scaled_bernoulli,
                                1, 0, 0.5, 2);
                 }),
                 "scaled_bernoulli"));
  CHECK(contains(error_of([] {
                   cpu().random(empty({3}), RandomKind::scaled_bernoulli, 1, 0, 0.5,
                                std::numeric_limits<double>::infinity());
                 }),
                 "scaled_bernoulli expects a finite value b, got inf"));
  CHECK(contains(
      error_of([] { cpu().random(empty({3}), RandomKind::scaled_bernoulli, 1, 0, -0.5, 2); }),
      "scaled_bernoulli expects a probability a in [0, 1], got -0.5"));
}

TEST_CASE("cpu random: element i depends only on (seed, offset + i)") {
  for (DType dtype : kFloating) {
    for (RandomKind kind : {RandomKind::normal, RandomKind::uniform, RandomKind::bernoulli,
                            RandomKind::scaled_bernoulli}) {
      CAPTURE(dtype);
      CAPTURE(static_cast<int>(kind));
      const std::int64_t n = 70001, k = 33333;  // k splits the elements of one Philox counter
      const auto draw = [&](const Shape& shape, std::uint64_t seed, std::uint64_t offset) {
        Tensor t = empty(shape, {.dtype = dtype});
        cpu().random(t, kind, seed, offset, 0.25, 1);
        return t;
      };
      Tensor all = draw({n}, 123, 1001);
      // The same numbers drawn in two pieces, the second with the offset advanced by k.
      std::vector<double> pieces = values(draw({k}, 123, 1001)),
                          tail = values(draw({n - k}, 123, 1001 + k));
      pieces.insert(pieces.end(), tail.begin(), tail.end());
      check_close(values(all), pieces, {0, 0});
      // The thread count changes nothing.
      Tensor single;
      with_threads(1, [&] { single = draw({n}, 123, 1001); });
      check_close(values(single), values(all), {0, 0});
      // A different seed gives different numbers.
      CHECK(values(draw({n}, 124, 1001)) != values(all));
      // A strided output receives element i at its row-major position i.
      Tensor grid = make_view({301, 231}, Layout::transposed, dtype, 0, 0, 1);
      cpu().random(grid, kind, 123, 1001, 0.25, 1);
      const auto g = values(grid), a = values(all);
      CHECK(std::equal(g.begin(), g.end(), a.begin()));
    }
  }
}

// --- unary ---

namespace {
// Inputs from the row's domain; integer powers also take negative inputs.
bool needs_positive(UnaryOp op, double alpha) {
  return unary_traits(op).domain == UnaryDomain::positive &&
         !(op == UnaryOp::pow_scalar && alpha == std::round(alpha));
}

std::vector<double> alphas(UnaryOp op) {
  return op == UnaryOp::pow_scalar ? std::vector<double>{2, 3, 0.5, -1, -1.5, 1, 0}
                                   : std::vector<double>{0};
}
}  // namespace

TEST_CASE("cpu unary matches the reference on every layout") {
  for (UnaryOp op : unary_ops) {
    for (double alpha : alphas(op)) {
      for (DType dtype : kFloating) {
        for (const Shape& shape : kShapes) {
          for (Layout layout : kLayouts) {
            if (large(shape) && (dtype != DType::float32 || alpha != alphas(op)[0])) continue;
            CAPTURE(unary_name(op));
            CAPTURE(alpha);
            CAPTURE(dtype);
            CAPTURE(shape_str(shape));
            CAPTURE(layout_name(layout));
            const bool positive = needs_positive(op, alpha);
            Tensor x = make_view(shape, layout, dtype, 5, positive ? 0.1 : -4, 4);
            Tensor y = empty(shape, {.dtype = dtype});
            cpu().unary(op, x, y, alpha);
            const Tensor want = empty(shape, {.dtype = DType::float64});
            ref().unary(op, widened(x), want, alpha);
            Tolerance tol = tolerance(dtype);
            if (dtype == DType::float32) tol.rtol = 4e-6;  // float libm: a few ulp
            check_close(values(y), values(want), tol);
          }
        }
      }
    }
  }
}

TEST_CASE("cpu unary on int64: neg and abs") {
  Tensor x = from<std::int64_t>({-3, 0, 5, std::numeric_limits<std::int64_t>::min()}, {4});
  Tensor y = empty({4}, {.dtype = DType::int64});
  cpu().unary(UnaryOp::neg, x, y, 0);
  CHECK(y.data<std::int64_t>()[0] == 3);
  CHECK(y.data<std::int64_t>()[2] == -5);
  cpu().unary(UnaryOp::abs, x, y, 0);
  CHECK(y.data<std::int64_t>()[0] == 3);
  CHECK(y.data<std::int64_t>()[1] == 0);
  CHECK(contains(error_of([&] { cpu().unary(UnaryOp::exp, x, y, 0); }), "exp"));
  CHECK(contains(error_of([] { cpu().unary(UnaryOp::relu, empty({2}), empty({3}), 0); }), "relu"));
}

TEST_CASE("cpu unary_backward matches grad * op'(x)") {
  for (UnaryOp op : unary_ops) {
    for (double alpha : alphas(op)) {
      for (DType dtype : kFloating) {
        for (const Shape& shape : {Shape{7}, Shape{3, 5}, Shape{41, 1003}}) {
          for (Layout layout : kLayouts) {
            if (large(shape) && (dtype != DType::float32 || alpha != alphas(op)[0])) continue;
            CAPTURE(unary_name(op));
            CAPTURE(alpha);
            CAPTURE(dtype);
            CAPTURE(shape_str(shape));
            CAPTURE(layout_name(layout));
            const bool positive = needs_positive(op, alpha);
            // x away from the kinks of abs and relu, where the derivative jumps.
            Tensor x = make_view(shape, Layout::contiguous, dtype, 8, positive ? 0.1 : -4, 4);
            if (!positive) {
              cpu().binary(BinaryOp::add, x,
                           raw::expand(scalar_tensor(0.01, {.dtype = dtype}), shape, "test"), x);
            }
            Tensor y = empty(shape, {.dtype = dtype});
            cpu().unary(op, x, y, alpha);
            Tensor grad = make_view(shape, layout, dtype, 9, -2, 2);
            Tensor out = empty(shape, {.dtype = dtype});
            cpu().unary_backward(op, grad, x, y, out, alpha);
            // The reference's derivative at x, from its own y = op(x) in double.
            const Tensor x64 = widened(x), y64 = empty(shape, {.dtype = DType::float64});
            const Tensor want = empty(shape, {.dtype = DType::float64});
            ref().unary(op, x64, y64, alpha);
            ref().unary_backward(op, widened(grad), x64, y64, want, alpha);
            Tolerance tol = tolerance(dtype);
            if (dtype == DType::float32) tol = {2e-5, 1e-5};  // derivatives via float y
            check_close(values(out), values(want), tol);
          }
        }
      }
    }
  }
}

TEST_CASE("cpu unary_backward needs the operand core/ops.def names") {
  Tensor g = empty({3});
  Tensor out = empty({3});
  CHECK(contains(error_of([&] { cpu().unary_backward(UnaryOp::exp, g, g, Tensor(), out, 0); }),
                 "exp"));
  CHECK(contains(error_of([&] { cpu().unary_backward(UnaryOp::log, g, Tensor(), g, out, 0); }),
                 "log"));
  cpu().fill(g, 1.5);
  cpu().unary_backward(UnaryOp::neg, g, Tensor(), Tensor(), out, 0);
  CHECK(out.data<float>()[2] == -1.5f);
}

// --- binary, where ---

TEST_CASE("cpu binary matches the reference on every layout pair") {
  const std::pair<Layout, Layout> pairs[] = {
      {Layout::contiguous, Layout::contiguous}, {Layout::transposed, Layout::sliced},
      {Layout::contiguous, Layout::broadcast},  {Layout::broadcast, Layout::transposed},
      {Layout::per_row, Layout::contiguous},    {Layout::contiguous, Layout::scalar},
      {Layout::scalar, Layout::per_row},        {Layout::per_row, Layout::sliced}};
  for (BinaryOp op : binary_ops) {
    for (DType dtype : {DType::float32, DType::float64, DType::int64}) {
      for (const Shape& shape : kShapes) {
        for (const auto& entry : pairs) {
          const auto& la = std::get<0>(entry);
          const auto& lb = std::get<1>(entry);
          if (large(shape) && dtype != DType::float32) continue;
          CAPTURE(binary_name(op));
          CAPTURE(dtype);
          CAPTURE(shape_str(shape));
          CAPTURE(layout_name(la));
          CAPTURE(layout_name(lb));
          // Values on a grid of 0.5 (whole numbers for int64), so comparisons meet equal
          // pairs; b avoids zero so int64 division is defined.
          const double q = dtype == DType::int64 ? 1 : 0.5;
          Tensor a = make_view(shape, la, dtype, 11, -4, 4, q);
          Tensor b = make_view(shape, lb, dtype, 12, 1, 5, q);
          if (op == BinaryOp::sub || op == BinaryOp::lt)
            b = make_view(shape, lb, dtype, 13, -4, 4, q);
          if (op == BinaryOp::div) {
            b = make_view(shape, lb, dtype, 14, 1, 5, q);  // positive divisors
          }
          Tensor out = empty(shape, {.dtype = is_comparison(op) ? DType::boolean : dtype});
          cpu().binary(op, a, b, out);
          // The reference computes in double (integers exactly) and rounds once to out's dtype.
          const Tensor want = empty(shape, {.dtype = out.dtype()});
          ref().binary(op, a, b, want);
          check_close(values(out), values(want), {0, 0});  // exactly rounded, like the reference
        }
      }
    }
  }
}

TEST_CASE("cpu binary: scalar broadcast, NaN, bool comparisons and errors") {
  // A stride-0 scalar against a large contiguous tensor (x * 0.5).
  Tensor x = make_view({100000}, Layout::contiguous, DType::float32, 3, -1, 1);
  Tensor half = raw::expand(scalar_tensor(0.5), {100000}, "test");
  Tensor out = empty({100000});
  cpu().binary(BinaryOp::mul, x, half, out);
  auto want = values(x);
  for (double& w : want) w *= 0.5;
  check_close(values(out), want, {0, 0});

  const double nan = std::nan("");
  Tensor a = from<double>({nan, 1, 2}, {3}), b = from<double>({1, nan, 3}, {3});
  Tensor m = empty({3}, {.dtype = DType::float64});
  cpu().binary(BinaryOp::maximum, a, b, m);
  CHECK(std::isnan(m.data<double>()[0]));
  CHECK(std::isnan(m.data<double>()[1]));
  CHECK(m.data<double>()[2] == 3);
  cpu().binary(BinaryOp::minimum, a, b, m);
  CHECK(std::isnan(m.data<double>()[0]));
  CHECK(std::isnan(m.data<double>()[1]));
  CHECK(m.data<double>()[2] == 2);

  Tensor p = from<bool>({true, false, true}, {3}), r = from<bool>({true, true, false}, {3});
  Tensor eq = empty({3}, {.dtype = DType::boolean});
  cpu().binary(BinaryOp::eq, p, r, eq);
  CHECK(values(eq) == std::vector<double>{1, 0, 0});

  CHECK(contains(error_of([&] { cpu().binary(BinaryOp::add, p, r, eq); }), "add"));
  CHECK(contains(error_of([&] { cpu().binary(BinaryOp::add, a, x, m); }), "add"));
  CHECK(contains(error_of([&] { cpu().binary(BinaryOp::lt, a, b, m); }), "lt"));
  Tensor i = from<std::int64_t>({4, 5}, {2}), zero = from<std::int64_t>({2, 0}, {2});
  Tensor iq = empty({2}, {.dtype = DType::int64});
  CHECK(contains(error_of([&] { cpu().binary(BinaryOp::div, i, zero, iq); }), "division by zero"));
}

TEST_CASE("cpu where picks a or b by a broadcast condition") {
  for (DType dtype : {DType::float32, DType::float64, DType::int64, DType::boolean}) {
    for (const Shape& shape : kShapes) {
      // The condition in every layout against values strided and broadcast, then a masked fill
      // as models run it: a condition per row, a scalar and a contiguous tensor, either way round.
      const std::tuple<Layout, Layout, Layout> cases[] = {
          {Layout::contiguous, Layout::transposed, Layout::broadcast},
          {Layout::broadcast, Layout::transposed, Layout::broadcast},
          {Layout::sliced, Layout::transposed, Layout::broadcast},
          {Layout::per_row, Layout::scalar, Layout::contiguous},
          {Layout::per_row, Layout::contiguous, Layout::scalar},
          {Layout::scalar, Layout::per_row, Layout::contiguous},
          {Layout::per_row, Layout::per_row, Layout::sliced}};
      for (const auto& entry : cases) {
        const auto& lc = std::get<0>(entry);
        const auto& la = std::get<1>(entry);
        const auto& lb = std::get<2>(entry);
        CAPTURE(dtype);
        CAPTURE(shape_str(shape));
        CAPTURE(layout_name(lc));
        CAPTURE(layout_name(la));
        CAPTURE(layout_name(lb));
        Tensor cond = make_view(shape, lc, DType::boolean, 21, 0, 2, 1);
        Tensor a = make_view(shape, la, dtype, 22, -3, 3, 1);
        Tensor b = make_view(shape, lb, dtype, 23, -3, 3, 1);
        Tensor out = empty(shape, {.dtype = dtype});
        cpu().where(cond, a, b, out);
        const Tensor want = empty(shape, {.dtype = dtype});
        ref().where(cond, a, b, want);
        check_close(values(out), values(want), {0, 0});
      }
    }
  }
  // Linformer's backward: the heads' view [B, H, n, d] of a [B, n, H, d] gradient (rows of d, the
  // rows of a plane not adjacent), a condition per (B, n) and a scalar, either way round.
  for (DType dtype : {DType::float32, DType::float64}) {
    const Shape shape{3, 4, 5, 16};
    Tensor bnhd = make_view({3, 5, 4, 16}, Layout::contiguous, dtype, 24, -3, 3, 1);
    Tensor heads = bnhd.permute({0, 2, 1, 3});
    Tensor rows = make_view({3, 1, 5, 1}, Layout::contiguous, DType::boolean, 25, 0, 2, 1);
    Tensor cond = rows.expand(shape);
    Tensor fill = make_view(shape, Layout::scalar, dtype, 26, -3, 3, 1);
    for (bool fill_first : {true, false}) {
      CAPTURE(dtype);
      CAPTURE(fill_first);
      const Tensor& a = fill_first ? fill : heads;
      const Tensor& b = fill_first ? heads : fill;
      Tensor out = empty(shape, {.dtype = dtype});
      cpu().where(cond, a, b, out);
      const Tensor want = empty(shape, {.dtype = dtype});
      ref().where(cond, a, b, want);
      check_close(values(out), values(want), {0, 0});
    }
  }
  CHECK(contains(error_of([] { cpu().where(empty({2}), empty({2}), empty({2}), empty({2})); }),
                 "where"));
}

// --- reductions ---

TEST_CASE("cpu reduce matches the reference over every set of dims and layout") {
  const std::vector<std::pair<Shape, std::vector<Shape>>> cases = {
      {{7}, {{0}, {}}},
      {{3, 5}, {{0}, {1}, {0, 1}, {-1}}},
      {{5, 6, 7}, {{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}}},
      {{41, 1003}, {{0}, {1}, {0, 1}}},
      // Few outputs, long reductions: the reduced range is split into blocks.
      {{600, 300}, {{0}}},
      {{3, 40000}, {{1}}},
      {{200, 200}, {{0, 1}}}};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
    for (DType dtype : {DType::float32, DType::float64, DType::int64}) {
      if (op == ReduceOp::mean && dtype == DType::int64) continue;
      for (const auto& entry : cases) {
        const auto& shape = std::get<0>(entry);
        const auto& dim_sets = std::get<1>(entry);
        for (const Shape& dims : dim_sets) {
          for (Layout layout : kLayouts) {
            if (large(shape) && (dtype != DType::float32 || layout == Layout::sliced)) continue;
            CAPTURE(reduce_name(op));
            CAPTURE(dtype);
            CAPTURE(shape_str(shape));
            CAPTURE(shape_str(dims));
            CAPTURE(layout_name(layout));
            // Positive values: the float sums have no cancellation to blur the tolerance.
            Tensor x = make_view(shape, layout, dtype, 31, 0.5, 1.5 + (dtype == DType::int64) * 9);
            Shape out_shape = shape;
            for (std::int64_t d : dims) {
              out_shape[static_cast<std::size_t>(d < 0 ? d + x.dim() : d)] = 1;
            }
            Tensor out = empty(out_shape, {.dtype = dtype});
            cpu().reduce(op, x, dims, out);
            const Tensor x64 = widened(x), want = empty(out_shape, {.dtype = x64.dtype()});
            ref().reduce(op, x64, dims, want);
            const Tolerance tol = dtype == DType::float32   ? Tolerance{2e-6, 0}
                                  : dtype == DType::float64 ? Tolerance{1e-12, 0}
                                                            : Tolerance{0, 0};
            check_close(values(out), values(want), tol);
          }
        }
      }
    }
  }
}

TEST_CASE("cpu reduce: float sums stay accurate, results ignore the thread count") {
  // 2^22 copies of 0.1f: a float accumulator would drift by about 1%.
  const std::int64_t n = std::int64_t{1} << 22;
  Tensor x = empty({n});
  cpu().fill(x, 0.1);
  Tensor total = empty({1});
  cpu().reduce(ReduceOp::sum, x, {0}, total);
  CHECK(total.data<float>()[0] == doctest::Approx(static_cast<double>(0.1f) * n).epsilon(1e-6));

  Tensor y = make_view({2000, 300}, Layout::contiguous, DType::float32, 5, -1, 1);
  for (const Shape& dims : {Shape{0}, Shape{1}, Shape{0, 1}}) {
    Shape out_shape = {dims.size() == 1 && dims[0] == 1 ? 2000 : 1,
                       dims.size() == 1 && dims[0] == 0 ? 300 : 1};
    Tensor many = empty(out_shape), one = empty(out_shape);
    cpu().reduce(ReduceOp::sum, y, dims, many);
    with_threads(1, [&] { cpu().reduce(ReduceOp::sum, y, dims, one); });
    CHECK(values(many) == values(one));
  }
}

TEST_CASE("cpu reduce: NaN propagates through max and min, empty dims, errors") {
  Tensor x = from<float>({1, std::nanf(""), 3, 4, 5, 6}, {2, 3});
  Tensor out = empty({2, 1});
  cpu().reduce(ReduceOp::max, x, {1}, out);
  CHECK(std::isnan(out.data<float>()[0]));
  CHECK(out.data<float>()[1] == 6);
  cpu().reduce(ReduceOp::min, x, {1}, out);
  CHECK(std::isnan(out.data<float>()[0]));
  CHECK(out.data<float>()[1] == 4);

  Tensor none = empty({0, 3});
  Tensor sums = empty({1, 3});
  cpu().reduce(ReduceOp::sum, none, {0}, sums);
  CHECK(values(sums) == std::vector<double>{0, 0, 0});
  CHECK(contains(error_of([&] { cpu().reduce(ReduceOp::max, none, {0}, sums); }), "max"));
  CHECK(contains(error_of([&] { cpu().reduce(ReduceOp::sum, x, {1}, empty({2})); }), "sum"));
  CHECK(contains(error_of([&] { cpu().reduce(ReduceOp::sum, x, {2}, out); }), "sum"));
  CHECK(contains(error_of([&] { cpu().reduce(ReduceOp::sum, x, {1, 1}, out); }), "more than once"));
  Tensor b = from<bool>({true, false}, {2});
  CHECK(contains(
      error_of([&] { cpu().reduce(ReduceOp::sum, b, {0}, empty({1}, {.dtype = DType::boolean})); }),
      "sum"));
}

TEST_CASE("cpu max_dim returns the first maximum and its index") {
  for (DType dtype : {DType::float32, DType::float64, DType::int64}) {
    for (const Shape& shape : {Shape{7}, Shape{3, 5}, Shape{5, 6, 7}, Shape{41, 1003}}) {
      for (std::int64_t dim = -1; dim < static_cast<std::int64_t>(shape.size()); ++dim) {
        for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
          CAPTURE(dtype);
          CAPTURE(shape_str(shape));
          CAPTURE(dim);
          CAPTURE(layout_name(layout));
          // Whole numbers in [0, 4): plenty of ties.
          Tensor x = make_view(shape, layout, dtype, 41, 0, 4, 1);
          const auto d = static_cast<std::size_t>(dim < 0 ? dim + x.dim() : dim);
          Shape out_shape = shape;
          out_shape[d] = 1;
          Tensor vals = empty(out_shape, {.dtype = dtype});
          Tensor idx = empty(out_shape, {.dtype = DType::int64});
          cpu().max_dim(x, dim, vals, idx);
          const Tensor want_v = empty(out_shape, {.dtype = dtype});
          const Tensor want_i = empty(out_shape, {.dtype = DType::int64});
          ref().max_dim(x, dim, want_v, want_i);
          check_close(values(vals), values(want_v), {0, 0});
          check_close(values(idx), values(want_i), {0, 0});
        }
      }
    }
  }
  Tensor x = from<float>({1, 5, std::nanf(""), 5, std::nanf("")}, {5});
  Tensor v = empty({1}), i = empty({1}, {.dtype = DType::int64});
  cpu().max_dim(x, 0, v, i);
  CHECK(std::isnan(v.data<float>()[0]));
  CHECK(i.data<std::int64_t>()[0] == 2);
  CHECK(contains(error_of([&] { cpu().max_dim(empty({0}), 0, v, i); }), "max_dim"));
  CHECK(contains(error_of([&] { cpu().max_dim(x, 1, v, i); }), "max_dim"));
}

// --- index_select, index_add ---

TEST_CASE("cpu index_select gathers rows from any layout") {
  for (DType dtype : {DType::float32, DType::float64, DType::int64}) {
    for (const auto& entry :
         {std::array<std::int64_t, 3>{5, 3, 7}, {50, 1, 40000}, {97, 300, 200}}) {
      const auto& v = std::get<0>(entry);
      const auto& d = std::get<1>(entry);
      const auto& n = std::get<2>(entry);
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
        CAPTURE(dtype);
        CAPTURE(v);
        CAPTURE(d);
        CAPTURE(n);
        CAPTURE(layout_name(layout));
        Tensor table = make_view({v, d}, layout, dtype, 51, -5, 5);
        // Every other element of a longer index tensor: strided indices.
        Tensor idx_base = tensor_of(pseudo_random(2 * n, 52, 0, static_cast<double>(v), 1), {2 * n},
                                    DType::int64);
        Tensor idx = raw::as_strided(idx_base, {n}, {2}, 1);
        Tensor out =
            make_view({n, d}, layout == Layout::sliced ? Layout::sliced : Layout::contiguous, dtype,
                      53, 0, 1);
        cpu().index_select(table, idx, out);
        const Tensor want = empty({n, d}, {.dtype = dtype});
        ref().index_select(table, idx, want);
        check_close(values(out), values(want), {0, 0});
      }
    }
  }
  Tensor table = empty({5, 2});
  Tensor out = empty({3, 2});
  const std::string high = error_of([&] {
    cpu().index_select(table, from<std::int64_t>({0, 5, 1}, {3}), out);
  });
  CHECK(contains(high, "index_select"));
  CHECK(contains(high, "index 5"));
  CHECK(contains(high, "5 rows"));
  CHECK(contains(error_of([&] {
                   cpu().index_select(table, from<std::int64_t>({0, 1, -1}, {3}), out);
                 }),
                 "index -1"));
  CHECK(contains(error_of([&] {
                   cpu().index_select(table, from<double>({0, 1, 2}, {3}), out);
                 }),
                 "index_select"));
}

TEST_CASE("cpu index_add accumulates repeated indices exactly once each") {
  for (DType dtype : kFloating) {
    // Wide rows (split by columns), narrow rows (split by destination rows), and small.
    for (const auto& entry :
         {std::array<std::int64_t, 3>{6, 4, 9}, {30, 1000, 300}, {40, 3, 20000}}) {
      const auto& v = std::get<0>(entry);
      const auto& d = std::get<1>(entry);
      const auto& n = std::get<2>(entry);
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
        CAPTURE(dtype);
        CAPTURE(v);
        CAPTURE(d);
        CAPTURE(n);
        CAPTURE(layout_name(layout));
        Tensor src = make_view({n, d}, layout, dtype, 61, -1, 1);
        // Few distinct rows: every destination row is hit many times.
        Tensor idx =
            tensor_of(pseudo_random(n, 62, 0, static_cast<double>(v), 1), {n}, DType::int64);
        Tensor out = make_view({v, d}, Layout::contiguous, dtype, 63, -1, 1);
        const Tensor want = widened(out);  // the sums in double, from out's starting values
        ref().index_add(widened(src), idx, want);
        cpu().index_add(src, idx, out);
        check_close(values(out), values(want),
                    dtype == DType::float32 ? Tolerance{1e-5, 1e-4} : Tolerance{1e-12, 1e-12});
        // The same sums, bit for bit, on one thread.
        Tensor single = make_view({v, d}, Layout::contiguous, dtype, 63, -1, 1);
        with_threads(1, [&] { cpu().index_add(src, idx, single); });
        CHECK(values(single) == values(out));
      }
    }
  }
  const std::string msg = error_of([] {
    cpu().index_add(empty({2, 3}), from<std::int64_t>({1, 4}, {2}), empty({4, 3}));
  });
  CHECK(contains(msg, "index_add"));
  CHECK(contains(msg, "index 4"));
  CHECK(contains(msg, "4 rows"));
  CHECK(contains(error_of([] {
                   cpu().index_add(empty({2, 3}), from<std::int64_t>({1, 0}, {2}), empty({4, 2}));
                 }),
                 "index_add"));
}

// --- nll_loss ---

TEST_CASE("cpu nll_loss and its backward, with ignored rows") {
  for (DType dtype : kFloating) {
    for (const auto& entry : {std::array<std::int64_t, 2>{5, 3}, {300, 1000}}) {
      const auto& n = std::get<0>(entry);
      const auto& c = std::get<1>(entry);
      CAPTURE(dtype);
      CAPTURE(n);
      Tensor lp = make_view({n, c}, Layout::contiguous, dtype, 71, -5, 0);
      std::vector<double> tv = pseudo_random(n, 72, 0, static_cast<double>(c), 1);
      for (std::int64_t i = 0; i < n; i += 4) tv[i] = -100;  // ignored
      Tensor target = tensor_of(tv, {n}, DType::int64);
      Tensor loss = empty({n}, {.dtype = dtype});
      cpu().nll_loss(lp, target, -100, loss);
      const Tensor want = empty({n}, {.dtype = dtype});
      ref().nll_loss(lp, target, -100, want);
      check_close(values(loss), values(want), {0, 0});

      // The gradient of a mean arrives as one value broadcast over the rows.
      Tensor g = raw::expand(scalar_tensor(0.25, {.dtype = dtype}), {n}, "test");
      Tensor grad = make_view({n, c}, Layout::contiguous, dtype, 73, -1, 1);  // overwritten
      cpu().nll_loss_backward(g, target, -100, grad);
      const Tensor want_grad = empty({n, c}, {.dtype = dtype});
      ref().nll_loss_backward(g, target, -100, want_grad);
      check_close(values(grad), values(want_grad), {0, 0});
    }
  }
  Tensor lp = empty({3, 4});
  const std::string msg = error_of([&] {
    cpu().nll_loss(lp, from<std::int64_t>({0, 3, 4}, {3}), -100, empty({3}));
  });
  CHECK(contains(msg, "nll_loss"));
  CHECK(contains(msg, "row 2"));
  CHECK(
      contains(error_of([&] {
                 cpu().nll_loss_backward(empty({3}), from<std::int64_t>({-1, 0, 0}, {3}), -100, lp);
               }),
               "row 0"));
  CHECK(contains(error_of([&] {
                   cpu().nll_loss(lp, from<std::int64_t>({0, 1}, {2}), -100, empty({3}));
                 }),
                 "nll_loss"));
}

TEST_CASE("cpu exp, tanh, gelu and sigmoid of NaN are NaN, in the vector loop and the tail") {
  // A NaN's exponent 2^n came from converting a NaN to an integer (undefined behaviour, caught
  // by -fsanitize=float-cast-overflow); NaN must come out, whatever its sign or payload.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float neg_nan = -nan;
  const float payload_nan = std::bit_cast<float>(0x7fc12345u);
  std::vector<float> values(67, 0.5f);
  for (std::size_t i : {0, 5, 31, 32, 64, 66}) values[i] = nan;
  values[7] = neg_nan;
  values[40] = payload_nan;
  const Tensor x = from<float>(values, {67});
  for (UnaryOp op : {UnaryOp::exp, UnaryOp::tanh, UnaryOp::gelu, UnaryOp::sigmoid}) {
    Tensor y = empty({67});
    cpu().unary(op, x, y, 0);
    const float* p = y.data<float>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      INFO("op ", static_cast<int>(op), ", element ", i);
      CHECK(std::isnan(p[i]) == std::isnan(values[i]));
    }
  }
}
