// Parity of the reductions: reduce (sum, mean, max, min) over every single dim, several
// dims and all dims of 3-d and 4-d inputs in every layout, and max_dim with its tie and NaN
// rules, against the reference backend. A bfloat16 case runs the reference in float32 on the same
// values and compares with bfloat16's tolerance.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "parity/parity.h"

TF_PARITY_COVERS(reduce);
TF_PARITY_COVERS(max_dim);

namespace tinyformer::parity {

namespace {

constexpr std::array kLayouts = {Layout::contiguous, Layout::transposed, Layout::sliced,
                                 Layout::broadcast};
constexpr std::array kOps = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min};
std::vector<DType> all_dtypes() {
  return supported({DType::float32, DType::float64, DType::bfloat16, DType::int64});
}

// t as the reference computes with it (bfloat16 widened to float32).
Tensor for_ref(const Tensor& t) {
  return t.dtype() == DType::bfloat16 ? raw::to_dtype(t, DType::float32) : t;
}
Tensor as_dtype(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : raw::to_dtype(t, dtype);
}
// A reference output for a case of `dtype`, filled with a sentinel as make_output's are.
Tensor ref_output(const Shape& shape, DType dtype) {
  const DType d = ref_dtype(dtype);
  const double sentinel = d == DType::int64 ? -12345.0 : std::numeric_limits<double>::quiet_NaN();
  return full(shape, sentinel, {.dtype = d});
}

// The same values on both devices from explicit host values (contiguous).
Pair host_pair(const std::vector<double>& values, const Shape& shape, DType dtype) {
  const Tensor host = raw::to_dtype(from<double>(values, shape), dtype);
  return {host, to_dev(host)};
}

// Values in {0, 1, 2} (many ties), with NaN at about one element in `nan_every` (0: none).
std::vector<double> tied_values(std::int64_t n, std::uint64_t seed, int nan_every) {
  std::mt19937_64 gen(seed);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) {
    x = static_cast<double>(gen() % 3);
    if (nan_every > 0 && gen() % static_cast<std::uint64_t>(nan_every) == 0) {
      x = std::numeric_limits<double>::quiet_NaN();
    }
  }
  return v;
}

std::string describe(const char* op, DType dtype, const Shape& shape, const std::string& layout,
                     const Shape& dims) {
  return std::string(op) + " " + dtype_name(dtype) + " " + shape_str(shape) + " " + layout +
         " dims " + shape_str(dims);
}

// --- reduce ---

Shape keepdim_shape(const Shape& shape, const Shape& dims) {
  Shape keep = shape;
  for (std::int64_t d : dims) {
    if (!shape.empty())
      keep[static_cast<std::size_t>(
          normalize_dim(d, static_cast<std::int64_t>(shape.size()), "test"))] = 1;
  }
  return keep;
}

void check_reduce(ReduceOp op, const Pair& x, const Shape& dims, const std::string& layout) {
  const DType dtype = x.ref.dtype();
  const Shape keep = keepdim_shape(x.ref.shape(), dims);
  const Pair out = make_output(keep, dtype);
  dev().reduce(op, x.dev, dims, out.dev);
  const Tensor expected = ref_output(keep, dtype);
  ref().reduce(op, for_ref(x.ref), dims, expected);
  check_close(out.dev, as_dtype(expected, dtype),
              describe(reduce_name(op), dtype, x.ref.shape(), layout, dims));
}

TEST_CASE("parity: reduce over every dim set of 3-d and 4-d inputs, every dtype and layout") {
  if (!available()) return;
  const std::vector<Shape> dims3 = {{},     {0},    {1},    {2},    {-1},
                                    {0, 1}, {0, 2}, {1, 2}, {2, 0}, {0, 1, 2}};
  const std::vector<Shape> dims4 = {{0}, {1}, {2}, {3}, {1, 3}, {0, 2, 3}, {-1, -2}, {0, 1, 2, 3}};
  const std::vector<std::pair<Shape, std::vector<Shape>>> cases = {
      {{5, 7, 33}, dims3}, {{2, 1, 9}, dims3}, {{2, 3, 5, 7}, dims4}};
  std::uint64_t seed = 1;
  for (const auto& [shape, dim_sets] : cases) {
    for (DType dtype : all_dtypes()) {
      for (Layout layout : kLayouts) {
        const Pair x = make_pair(shape, dtype, layout, ++seed);
        for (const Shape& dims : dim_sets) {
          for (ReduceOp op : kOps) {
            if (op == ReduceOp::mean && dtype == DType::int64) continue;  // floating only
            check_reduce(op, x, dims, layout_name(layout));
          }
        }
      }
    }
  }
}

TEST_CASE("parity: reduce of a large input (long rows, split reductions, columns)") {
  if (!available()) return;
  // [3, 1000, 333]: the last dim alone is a row per output (rows of 333 elements, most of them
  // not aligned for vector loads); dims {1, 2} and all dims are long rows split over many
  // blocks; dims {0}, {1} and {0, 1} reduce columns (the contiguous dim is kept); {0, 2} reduces
  // rows through two strided dims.
  const Shape shape = {3, 1000, 333};
  const std::vector<Shape> dim_sets = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (DType dtype : supported({DType::float32, DType::bfloat16})) {
    for (Layout layout : {Layout::contiguous, Layout::transposed}) {
      const Pair x = make_pair(shape, dtype, layout, 7);
      for (const Shape& dims : dim_sets) {
        for (ReduceOp op : kOps) check_reduce(op, x, dims, layout_name(layout));
      }
    }
  }
  // float32 sums accumulate in double on both devices: a long sum of values with a large mean
  // matches to float32 rounding.
  const Pair shifted =
      make_pair({2, 400000}, DType::float32, Layout::contiguous, 8, 1000.0, 1001.0);
  check_reduce(ReduceOp::sum, shifted, {1}, "contiguous");
  check_reduce(ReduceOp::mean, shifted, {0, 1}, "contiguous");
  const Pair ints = make_pair({4000, 70}, DType::int64, Layout::contiguous, 9);
  for (const Shape& dims : std::vector<Shape>{{0}, {1}, {0, 1}}) {
    check_reduce(ReduceOp::sum, ints, dims, "contiguous");
  }
}

TEST_CASE("parity: reduce over pooling windows of a permuted view (Linformer's mean pooling)") {
  if (!available()) return;
  // Keys [B, H, n, d] as a view of [B, n, H, d], summed over windows of 4 rows: four kept dims
  // that do not merge (the innermost of 6 elements), one reduced dim of stride H * d, and in the
  // second case kept rows longer than a tile of outputs.
  for (DType dtype : supported({DType::float32, DType::float64})) {
    for (const Shape& shape : {Shape{3, 40, 4, 6}, Shape{2, 8, 2, 300}}) {
      const Pair x = make_pair(shape, dtype, Layout::contiguous, 11);
      const auto windows = [&shape](const Tensor& t) {
        return t.permute({0, 2, 1, 3}).reshape({shape[0], shape[2], shape[1] / 4, 4, shape[3]});
      };
      const Pair v = {windows(x.ref), windows(x.dev)};
      REQUIRE(!v.dev.is_contiguous());
      for (ReduceOp op : kOps) check_reduce(op, v, {3}, "pooling windows");
    }
  }
}

TEST_CASE("parity: reduce into a strided output, of a scalar, and over an empty dim") {
  if (!available()) return;
  for (DType dtype : supported({DType::float32, DType::bfloat16})) {
    // out: [5, 1, 9] laid out with the 5 innermost.
    const Pair x = make_pair({5, 7, 9}, dtype, Layout::sliced, 3);
    const Tensor host_buffer = full({45}, 0.0, {.dtype = dtype});
    const Pair out = {raw::as_strided(host_buffer, {5, 1, 9}, {1, 45, 5}, 0),
                      raw::as_strided(to_dev(host_buffer), {5, 1, 9}, {1, 45, 5}, 0)};
    dev().reduce(ReduceOp::sum, x.dev, {1}, out.dev);
    const Tensor expected = ref_output({5, 1, 9}, dtype);
    ref().reduce(ReduceOp::sum, for_ref(x.ref), {1}, expected);
    check_close(out.dev, as_dtype(expected, dtype), "sum into a strided output");
  }
  // A 0-dim input: nothing to reduce, the value is copied.
  const Tensor scalar = scalar_tensor(2.5);
  const Pair s = {scalar, to_dev(scalar)};
  for (const Shape& dims : std::vector<Shape>{{}, {0}, {-1}}) {
    for (ReduceOp op : kOps) check_reduce(op, s, dims, "0-dim");
  }
  // An empty reduced dim: the sum is 0, the mean NaN; max and min have no answer.
  const Tensor none = empty({0, 5});
  const Pair e = {none, to_dev(none)};
  check_reduce(ReduceOp::sum, e, {0}, "empty");
  check_reduce(ReduceOp::mean, e, {0}, "empty");
  check_reduce(ReduceOp::sum, e, {1}, "empty");  // an empty output: nothing to do
  CHECK_THROWS_AS(dev().reduce(ReduceOp::max, e.dev, {0}, make_output({1, 5}, DType::float32).dev),
                  Error);
}

TEST_CASE("parity: max and min propagate NaN") {
  if (!available()) return;
  for (DType dtype : floating_dtypes()) {
    const Pair x = host_pair(tied_values(6 * 40, 5, 25), {6, 40}, dtype);
    const Pair xt = {x.ref.transpose(0, 1), x.dev.transpose(0, 1)};
    for (const Shape& dims : std::vector<Shape>{{0}, {1}, {0, 1}}) {
      for (ReduceOp op : {ReduceOp::max, ReduceOp::min, ReduceOp::sum}) {
        check_reduce(op, x, dims, "contiguous with NaN");
        check_reduce(op, xt, dims, "transposed with NaN");
      }
    }
  }
}

// --- max_dim ---

void check_max_dim(const Pair& x, std::int64_t dim, const std::string& layout) {
  const DType dtype = x.ref.dtype();
  const Shape keep = keepdim_shape(x.ref.shape(), {dim});
  const Pair values = make_output(keep, dtype);
  const Pair indices = make_output(keep, DType::int64);
  dev().max_dim(x.dev, dim, values.dev, indices.dev);
  const Tensor expected_values = ref_output(keep, dtype);
  const Tensor expected_indices = ref_output(keep, DType::int64);
  ref().max_dim(for_ref(x.ref), dim, expected_values, expected_indices);
  const std::string what = describe("max_dim", dtype, x.ref.shape(), layout, {dim});
  check_close(values.dev, as_dtype(expected_values, dtype), what + " values");
  check_close(indices.dev, expected_indices, what + " indices");
}

TEST_CASE("parity: max_dim over every dim, every dtype and layout") {
  if (!available()) return;
  std::uint64_t seed = 100;
  for (const Shape& shape : std::vector<Shape>{{5, 7, 33}, {2, 3, 5, 7}, {1, 40, 1}}) {
    for (DType dtype : all_dtypes()) {  // int64 values are 0 to 6: ties everywhere
      for (Layout layout : kLayouts) {
        const Pair x = make_pair(shape, dtype, layout, ++seed);
        for (std::int64_t dim = -1; dim < static_cast<std::int64_t>(shape.size()); ++dim) {
          check_max_dim(x, dim, layout_name(layout));
        }
      }
    }
  }
  const Pair big = make_pair({3, 1000, 333}, DType::float32, Layout::contiguous, 9);
  for (std::int64_t dim = 0; dim < 3; ++dim) check_max_dim(big, dim, "contiguous");
  const Tensor scalar = scalar_tensor(-1.5);
  check_max_dim({scalar, to_dev(scalar)}, 0, "0-dim");
}

TEST_CASE("parity: max_dim takes the first maximum and the first NaN") {
  if (!available()) return;
  for (DType dtype : floating_dtypes()) {
    // Few distinct values: every row has tied maxima; some rows hold NaN, some several.
    for (int nan_every : {0, 30}) {
      const Pair x = host_pair(tied_values(6 * 70, 11, nan_every), {6, 70}, dtype);
      const Pair xt = {x.ref.transpose(0, 1), x.dev.transpose(0, 1)};
      const Pair xs = {x.ref.slice(1, 1, 70, 3), x.dev.slice(1, 1, 70, 3)};
      for (std::int64_t dim : {0, 1}) {
        check_max_dim(x, dim, "contiguous with ties");
        check_max_dim(xt, dim, "transposed with ties");
        check_max_dim(xs, dim, "sliced with ties");
      }
    }
    // [50, 2000] over dim 0: a thread per output scanning down a column; over dim 1: a warp
    // per row of 2000.
    const Pair wide = host_pair(tied_values(50 * 2000, 12, 1000), {50, 2000}, dtype);
    check_max_dim(wide, 0, "wide with ties and NaN");
    check_max_dim(wide, 1, "wide with ties and NaN");
    // A row of NaN only: the first one wins.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const Pair all_nan = host_pair(std::vector<double>(2 * 37, nan), {2, 37}, dtype);
    check_max_dim(all_nan, 1, "all NaN");
  }
}

// --- bad input (the checks run before any kernel) ---

TEST_CASE("parity: reductions reject bad input with an Error") {
  if (!available()) return;
  const Pair x = make_pair({3, 4}, DType::float32, Layout::contiguous, 1);
  const Pair ints = make_pair({3, 4}, DType::int64, Layout::contiguous, 2);
  const Tensor out = make_output({1, 4}, DType::float32).dev;
  CHECK_THROWS_AS(dev().reduce(ReduceOp::sum, x.dev, {0, 0}, out), Error);  // repeated dim
  CHECK_THROWS_AS(dev().reduce(ReduceOp::sum, x.dev, {2}, out), Error);     // out of range
  CHECK_THROWS_AS(dev().reduce(ReduceOp::sum, x.dev, {1}, out), Error);     // wrong shape
  CHECK_THROWS_AS(dev().reduce(ReduceOp::sum, x.dev, {0}, make_output({1, 4}, DType::float64).dev),
                  Error);
  CHECK_THROWS_AS(
      dev().reduce(ReduceOp::mean, ints.dev, {0}, make_output({1, 4}, DType::int64).dev), Error);
  if (!device().is_cpu()) {
    CHECK_THROWS_AS(dev().reduce(ReduceOp::sum, x.ref, {0}, out), Error);  // a CPU input
  }
  const Tensor values = make_output({3, 1}, DType::float32).dev;
  CHECK_THROWS_AS(dev().max_dim(x.dev, 1, values, make_output({3, 1}, DType::float32).dev), Error);
  CHECK_THROWS_AS(dev().max_dim(x.dev, 0, values, make_output({3, 1}, DType::int64).dev), Error);
  CHECK_THROWS_AS(dev().max_dim(x.dev, 2, values, make_output({3, 1}, DType::int64).dev), Error);
  const Tensor none = to_dev(empty({3, 0}));
  CHECK_THROWS_AS(dev().max_dim(none, 1, values, make_output({3, 1}, DType::int64).dev), Error);
}

}  // namespace

}  // namespace tinyformer::parity
