// Parity of the memory and creation ops against the reference backend: fill, copy with every
// dtype pair and layout, arange, and random (the same numbers for the same seed and offset).
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/random.h"
#include "parity/parity.h"

namespace {

using namespace tinyformer;
using parity::Layout;
using parity::Pair;

TF_PARITY_COVERS(fill);
TF_PARITY_COVERS(copy);
TF_PARITY_COVERS(arange);
TF_PARITY_COVERS(random);

std::vector<DType> all_dtypes() {
  return parity::supported(
      {DType::float32, DType::float64, DType::bfloat16, DType::int64, DType::boolean});
}

// The whole storage under a view, as a flat tensor: a kernel that writes outside its view (into
// the gaps of a sliced view, say) shows up here.
Tensor whole(const Tensor& view) {
  const auto count =
      static_cast<std::int64_t>(view.storage()->nbytes() / element_size(view.dtype()));
  return raw::as_strided(view, {count}, {1}, 0);
}

void check_whole(const Pair& p, const std::string& what) {
  parity::check_close(whole(p.dev), whole(p.ref), what + ", whole storage", 0.0, 0.0);
}

std::string describe(const std::string& op, DType a, DType b, Layout layout, const Shape& shape) {
  return op + " " + dtype_name(a) + " -> " + dtype_name(b) + " " + parity::layout_name(layout) +
         " " + shape_str(shape);
}

// The same host values as a tensor of `dtype` on both sides.
Pair pair_of(const std::vector<double>& values, DType dtype) {
  const Tensor host =
      raw::to_dtype(from<double>(values, {static_cast<std::int64_t>(values.size())}), dtype);
  return {host, parity::to_dev(host)};
}

}  // namespace

TEST_CASE("parity: fill: every dtype, contiguous, transposed, sliced and broadcast outputs") {
  if (!parity::available()) return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : all_dtypes()) {
    for (Layout layout :
         {Layout::contiguous, Layout::transposed, Layout::sliced, Layout::broadcast}) {
      for (const Shape& shape : {Shape{1, 1}, Shape{7, 33}, Shape{3, 65, 129}}) {
        for (double value : {0.0, -0.0, -1.5, 0.1, 1e30, nan}) {
          Pair out = parity::make_pair(shape, dtype, layout, 3);
          parity::dev().fill(out.dev, value);
          parity::ref().fill(out.ref, value);
          check_whole(out, describe("fill " + std::to_string(value), dtype, dtype, layout, shape));
        }
      }
    }
  }
}

TEST_CASE(
    "parity: copy: every dtype pair from contiguous, transposed, sliced and broadcast sources") {
  if (!parity::available()) return;
  // {70, 1030}: the tiled transpose with partial tiles on both sides; {3, 65, 129}: with planes.
  for (const Shape& shape : {Shape{1, 1}, Shape{7, 33}, Shape{3, 65, 129}, Shape{70, 1030}}) {
    for (Layout layout :
         {Layout::contiguous, Layout::transposed, Layout::sliced, Layout::broadcast}) {
      for (DType from_dtype : all_dtypes()) {
        const Pair src = parity::make_pair(shape, from_dtype, layout, 11, -3.0, 3.0);
        for (DType to_dtype : all_dtypes()) {
          Pair dst = parity::make_output(shape, to_dtype);
          parity::dev().copy(src.dev, dst.dev);
          parity::ref().copy(src.ref, dst.ref);
          // The conversions are the same rules on both sides: exact.
          parity::check_close(dst, describe("copy", from_dtype, to_dtype, layout, shape), 0.0, 0.0);
        }
      }
    }
  }
}

TEST_CASE("parity: copy: special values convert by the reference's rules") {
  if (!parity::available()) return;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {std::numeric_limits<double>::quiet_NaN(),
                                      inf,
                                      -inf,
                                      1e30,
                                      -1e30,
                                      9.3e18,
                                      -9.3e18,
                                      2.5,
                                      -2.5,
                                      -0.0,
                                      0.0,
                                      1e-40,
                                      1e-300,
                                      3.5e38,
                                      1.0 + std::ldexp(1.0, -8),
                                      1.0 + 3 * std::ldexp(1.0, -8),
                                      1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30),
                                      16777217.0,
                                      257.0};
  for (DType from_dtype : parity::supported({DType::float64, DType::float32, DType::bfloat16})) {
    const Pair src = pair_of(values, from_dtype);
    for (DType to_dtype : all_dtypes()) {
      const Shape shape = {static_cast<std::int64_t>(values.size())};
      Pair dst = parity::make_output(shape, to_dtype);
      parity::dev().copy(src.dev, dst.dev);
      parity::ref().copy(src.ref, dst.ref);
      parity::check_close(dst, describe("copy", from_dtype, to_dtype, Layout::contiguous, shape),
                          0.0, 0.0);
    }
  }
  // int64 extremes into every dtype.
  const Pair ints = parity::make_from(
      {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(), -1, 0,
       257, 16777217, (std::int64_t{1} << 53) + 1},
      {7});
  for (DType to_dtype : all_dtypes()) {
    Pair dst = parity::make_output({7}, to_dtype);
    parity::dev().copy(ints.dev, dst.dev);
    parity::ref().copy(ints.ref, dst.ref);
    parity::check_close(dst, describe("copy", DType::int64, to_dtype, Layout::contiguous, {7}), 0.0,
                        0.0);
  }
}

TEST_CASE("parity: copy: strided destinations, permutes, expands and unaligned views") {
  if (!parity::available()) return;
  for (DType dtype : parity::supported({DType::float32, DType::bfloat16, DType::int64})) {
    // Into transposed and sliced destinations: the gaps of the sliced one stay as they were.
    for (Layout dst_layout : {Layout::transposed, Layout::sliced}) {
      for (Layout src_layout : {Layout::contiguous, Layout::transposed, Layout::broadcast}) {
        const Shape shape = {5, 37, 41};
        const Pair src = parity::make_pair(shape, DType::float32, src_layout, 21);
        Pair dst = parity::make_pair(shape, dtype, dst_layout, 22);
        parity::dev().copy(src.dev, dst.dev);
        parity::ref().copy(src.ref, dst.ref);
        check_whole(dst, describe("copy into " + std::string(parity::layout_name(dst_layout)),
                                  DType::float32, dtype, src_layout, shape));
      }
    }
    // Permutes of a 4-d tensor (the attention head split and merge), a middle-dim slice, and an
    // expanded last dim (stride 0 innermost, the tiled path with a column stride of 0).
    const Pair base = parity::make_pair({3, 9, 4, 35}, dtype, Layout::contiguous, 23);
    std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> views = {
        {"permute 0213",
         [](const Tensor& t) {
           return t.permute({0, 2, 1, 3});
         }},
        {"permute 3120",
         [](const Tensor& t) {
           return t.permute({3, 1, 2, 0});
         }},
        {"permute 0132",
         [](const Tensor& t) {
           return t.permute({0, 1, 3, 2});
         }},
        {"slice dim 1", [](const Tensor& t) { return t.slice(1, 2, 8, 3); }},
        {"expand last",
         [](const Tensor& t) {
           return raw::expand(t.slice(3, 0, 1), {3, 9, 4, 66}, "test");
         }},
    };
    for (const auto& [name, view] : views) {
      const Tensor dev_src = view(base.dev), ref_src = view(base.ref);
      for (DType to_dtype : {dtype, DType::float64}) {
        Pair dst = parity::make_output(ref_src.shape(), to_dtype);
        parity::dev().copy(dev_src, dst.dev);
        parity::ref().copy(ref_src, dst.ref);
        parity::check_close(dst, name + " " + dtype_name(dtype) + " -> " + dtype_name(to_dtype),
                            0.0, 0.0);
      }
    }
    // Contiguous views at an odd offset: the conversion cannot use vector loads.
    const Pair flat = parity::make_pair({1001}, dtype, Layout::contiguous, 24);
    const Tensor dev_src = raw::as_strided(flat.dev, {999}, {1}, 1);
    const Tensor ref_src = raw::as_strided(flat.ref, {999}, {1}, 1);
    for (DType to_dtype : all_dtypes()) {
      Pair dst = parity::make_pair({1001}, to_dtype, Layout::contiguous, 25);
      const Tensor dev_dst = raw::as_strided(dst.dev, {999}, {1}, 2);
      const Tensor ref_dst = raw::as_strided(dst.ref, {999}, {1}, 2);
      parity::dev().copy(dev_src, dev_dst);
      parity::ref().copy(ref_src, ref_dst);
      check_whole(
          dst, std::string("unaligned copy ") + dtype_name(dtype) + " -> " + dtype_name(to_dtype));
    }
  }
  // A shape mismatch is an Error.
  const Pair a = parity::make_output({2, 3}, DType::float32);
  const Pair b = parity::make_output({3, 2}, DType::float32);
  CHECK_THROWS_AS(parity::dev().copy(a.dev, b.dev), Error);
}

TEST_CASE(
    "parity: arange: float32, float64, bfloat16 and int64, odd lengths and fractional steps") {
  if (!parity::available()) return;
  for (DType dtype :
       parity::supported({DType::float32, DType::float64, DType::bfloat16, DType::int64})) {
    for (std::int64_t n : {1, 7, 1000, 100003}) {
      for (const auto& [start, step] : std::vector<std::pair<double, double>>{
               {0.0, 1.0}, {-3.5, 0.1}, {10.0, -0.7}, {1e6, 3.3}}) {
        Pair out = parity::make_output({n}, dtype);
        parity::dev().arange(out.dev, start, step);
        parity::ref().arange(out.ref, start, step);
        parity::check_close(out,
                            "arange " + std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                                " start " + std::to_string(start) + " step " + std::to_string(step),
                            0.0, 0.0);
      }
    }
  }
  // Through the factory, on the target device.
  CHECK(arange(0.0, 5.0, 1.0, {.dtype = DType::int64, .device = parity::device()})
            .to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4});
  const Pair two_d = parity::make_output({2, 3}, DType::float32);
  CHECK_THROWS_AS(parity::dev().arange(two_d.dev, 0.0, 1.0), Error);
  const Pair bools = parity::make_output({3}, DType::boolean);
  CHECK_THROWS_AS(parity::dev().arange(bools.dev, 0.0, 1.0), Error);
}

TEST_CASE("parity: random: the reference's numbers, every kind, dtype, offset and layout") {
  if (!parity::available()) return;
  struct Kind {
    RandomKind kind;
    double a, b;
    std::vector<DType> dtypes;
  };
  const std::vector<Kind> kinds = {
      {RandomKind::normal, 0.5, 2.0, parity::floating_dtypes()},
      {RandomKind::uniform, -2.0, 3.0, parity::floating_dtypes()},
      {RandomKind::uniform, 0.0, 1.0, parity::floating_dtypes()},
      {RandomKind::bernoulli, 0.3, 0.0, all_dtypes()},
      {RandomKind::scaled_bernoulli, 0.3, 1.0 / 0.7, parity::floating_dtypes()},
  };
  for (const Kind& k : kinds) {
    for (DType dtype : k.dtypes) {
      for (std::uint64_t offset : {0ull, 1ull, 3ull, 5ull, 1000001ull}) {
        for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
          for (const Shape& shape : {Shape{1, 1}, Shape{1, 7}, Shape{33, 65}}) {
            Pair out = parity::make_pair(shape, dtype, layout, 31);
            parity::dev().random(out.dev, k.kind, 1234, offset, k.a, k.b);
            parity::ref().random(out.ref, k.kind, 1234, offset, k.a, k.b);
            const std::string what = "random kind " + std::to_string(static_cast<int>(k.kind)) +
                                     " offset " + std::to_string(offset) + " " +
                                     parity::layout_name(layout) + " " + shape_str(shape);
            if (k.kind == RandomKind::normal) {
              // A device's double log1p and sincos may differ from glibc's in the last bits.
              const double rtol = dtype == DType::float64   ? 1e-13
                                  : dtype == DType::float32 ? 1e-6
                                                            : 8e-3;
              parity::check_close(whole(out.dev), whole(out.ref), what, rtol, 1e-6);
            } else {
              check_whole(out, what);  // uniform and bernoulli match bit for bit
            }
          }
        }
      }
    }
  }
}

TEST_CASE("parity: random: drawing [0, n) at once equals [0, k) then [k, n); bad arguments") {
  if (!parity::available()) return;
  for (DType dtype : parity::floating_dtypes()) {
    for (RandomKind kind : {RandomKind::normal, RandomKind::uniform}) {
      const Tensor all = empty({1001}, {.dtype = dtype, .device = parity::device()});
      parity::dev().random(all, kind, 99, 17, 0.0, 1.0);
      const Tensor split = empty({1001}, {.dtype = dtype, .device = parity::device()});
      parity::dev().random(split.slice(0, 0, 3), kind, 99, 17, 0.0, 1.0);
      parity::dev().random(split.slice(0, 3, 1001), kind, 99, 20, 0.0, 1.0);
      parity::check_close(split, all, "split draw", 0.0, 0.0);
    }
  }
  const Tensor t = empty({4}, {.device = parity::device()});
  CHECK_THROWS_AS(parity::dev().random(t, RandomKind::uniform, 1, 0, 1.0, 1.0), Error);
  CHECK_THROWS_AS(parity::dev().random(t, RandomKind::normal, 1, 0, 0.0, -1.0), Error);
  CHECK_THROWS_AS(parity::dev().random(t, RandomKind::bernoulli, 1, 0, 1.5, 0.0), Error);
  CHECK_THROWS_AS(parity::dev().random(t, RandomKind::scaled_bernoulli, 1, 0, 1.5, 2.0), Error);
  CHECK_THROWS_AS(parity::dev().random(t, RandomKind::scaled_bernoulli, 1, 0, 0.5,
                                       std::numeric_limits<double>::quiet_NaN()),
                  Error);
  const Tensor ints = empty({4}, {.dtype = DType::int64, .device = parity::device()});
  CHECK_THROWS_AS(parity::dev().random(ints, RandomKind::normal, 1, 0, 0.0, 1.0), Error);
  // randn on the target device consumes the default generator exactly as on the CPU.
  manual_seed(7);
  const auto dev_values = randn({3, 5}, {.device = parity::device()}).to_vector<float>();
  manual_seed(7);
  const auto host_values = randn({3, 5}).to_vector<float>();
  for (std::size_t i = 0; i < host_values.size(); ++i) {
    CHECK(dev_values[i] == doctest::Approx(host_values[i]).epsilon(1e-6));
  }
}
