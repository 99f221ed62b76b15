// Parity of the loss and indexing ops against the reference backend: nll_loss and its backward
// (ignore_index, strided targets and losses, a broadcast gradient), index_select (every dtype,
// every table layout, vectorised and strided row copies) and index_add (repeated indices, long
// runs into one row, bit-for-bit equal to the reference for float32 and float64, which adds in
// the same order and rounds each sum once), and the Errors for out-of-range targets and indices,
// whose messages must equal the reference's. A bfloat16 case runs the reference in float32 on
// the same rounded values.
#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"
#include "parity/parity.h"

namespace {

using namespace tinyformer;
using namespace tinyformer::parity;

TF_PARITY_COVERS(nll_loss);
TF_PARITY_COVERS(nll_loss_backward);
TF_PARITY_COVERS(index_select);
TF_PARITY_COVERS(index_add);

constexpr Layout kLayouts[] = {Layout::contiguous, Layout::transposed, Layout::sliced,
                               Layout::broadcast};

// The same view of both sides of a pair.
Pair view(const Pair& p, const Shape& shape, const Shape& strides, std::int64_t offset) {
  return {raw::as_strided(p.ref, shape, strides, offset),
          raw::as_strided(p.dev, shape, strides, offset)};
}

// bfloat16 results are compared in float32; `exact` demands equal values (a gather, or sums
// added in the same order).
void expect_close(const Pair& p, const std::string& what, bool exact = false) {
  const double rtol = exact ? 0.0 : -1.0, atol = exact ? 0.0 : -1.0;
  if (p.dev.dtype() == DType::bfloat16) {
    check_close(raw::to_dtype(p.dev, DType::float32), p.ref, what + " (bfloat16)",
                exact ? 0.0 : 2e-2, exact ? 0.0 : 1e-2);
  } else {
    check_close(p, what, rtol, atol);
  }
}

// ============================== nll_loss ==============================

// Targets cycling over the classes, every fifth row ignore_index.
std::vector<std::int64_t> targets(std::int64_t n, std::int64_t classes, std::int64_t ignore_index) {
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    t[static_cast<std::size_t>(i)] = i % 5 == 2 ? ignore_index : (i * 7 + 3) % classes;
  }
  return t;
}

TEST_CASE("parity: nll_loss and its backward, ignore_index, strided targets and losses") {
  if (!available()) return;
  std::uint64_t seed = 1000;
  const std::int64_t sizes[][2] = {{1, 1}, {7, 5}, {33, 1000}, {300, 33}, {5000, 3}};
  for (const DType dtype : floating_dtypes()) {
    for (const auto& size : sizes) {
      const std::int64_t n = size[0], c = size[1];
      // -100 lies outside the classes; 0 is a class, ignored when it is the target.
      for (const std::int64_t ignore_index : {std::int64_t{-100}, std::int64_t{0}}) {
        const std::string what = std::string("nll_loss ") + dtype_name(dtype) + " " +
                                 shape_str({n, c}) + " ignore_index " +
                                 std::to_string(ignore_index);
        const Pair lp = make_rounded_pair({n, c}, dtype, Layout::contiguous, ++seed, -6.0, 0.0);
        // Every other element of a 2n buffer: a target of stride 2.
        std::vector<std::int64_t> t2(static_cast<std::size_t>(2 * n), -7);
        const std::vector<std::int64_t> t = targets(n, c, ignore_index);
        for (std::size_t i = 0; i < t.size(); ++i) t2[2 * i + 1] = t[i];
        const Pair target = view(make_from(t2, {2 * n}), {n}, {2}, 1);
        // The loss lands in every third element of a buffer; the rest must stay NaN.
        const Pair loss_buffer = make_rounded_output({3 * n}, dtype);
        const Pair loss = view(loss_buffer, {n}, {3}, 0);
        dev().nll_loss(lp.dev, target.dev, ignore_index, loss.dev);
        ref().nll_loss(lp.ref, target.ref, ignore_index, loss.ref);
        expect_close(loss_buffer, what + " forward", true);

        // A gradient per row, and a broadcast one (stride 0, as after a mean).
        const Pair g = make_rounded_pair({n}, dtype, Layout::contiguous, ++seed);
        const Pair g_broadcast =
            view(make_rounded_pair({1}, dtype, Layout::contiguous, ++seed), {n}, {0}, 0);
        for (const Pair* grad : {&g, &g_broadcast}) {
          const Pair out = make_rounded_output({n, c}, dtype);
          dev().nll_loss_backward(grad->dev, target.dev, ignore_index, out.dev);
          ref().nll_loss_backward(grad->ref, target.ref, ignore_index, out.ref);
          expect_close(out, what + (grad == &g ? " backward" : " backward, broadcast gradient"),
                       true);
        }
      }
    }
  }
}

TEST_CASE("parity: nll_loss: a target out of range throws the reference's Error, naming the row") {
  if (!available()) return;
  const std::int64_t n = 9, c = 4;
  for (const std::int64_t bad : {std::int64_t{4}, std::int64_t{-1}, std::int64_t{1} << 40}) {
    std::vector<std::int64_t> t = targets(n, c, -100);
    t[6] = bad;
    t[8] = bad;  // the first bad row is the one named
    const Pair target = make_from(t, {n});
    const Pair lp = make_rounded_pair({n, c}, DType::float32, Layout::contiguous, 5, -3.0, 0.0);
    const Pair loss = make_rounded_output({n}, DType::float32);
    const std::string ref_message =
        error_of([&] { ref().nll_loss(lp.ref, target.ref, -100, loss.ref); });
    const std::string dev_message =
        error_of([&] { dev().nll_loss(lp.dev, target.dev, -100, loss.dev); });
    CHECK(dev_message.find("row 6") != std::string::npos);
    CHECK(dev_message == ref_message);

    const Pair g = make_rounded_pair({n}, DType::float32, Layout::contiguous, 6);
    const Pair out = make_rounded_output({n, c}, DType::float32);
    const std::string ref_backward =
        error_of([&] { ref().nll_loss_backward(g.ref, target.ref, -100, out.ref); });
    const std::string dev_backward =
        error_of([&] { dev().nll_loss_backward(g.dev, target.dev, -100, out.dev); });
    CHECK(dev_backward.find("row 6") != std::string::npos);
    CHECK(dev_backward == ref_backward);
  }
  // The device is still usable after the Error: a good call works.
  const Pair target = make_from(targets(n, c, -100), {n});
  const Pair lp = make_rounded_pair({n, c}, DType::float32, Layout::contiguous, 7, -3.0, 0.0);
  const Pair loss = make_rounded_output({n}, DType::float32);
  dev().nll_loss(lp.dev, target.dev, -100, loss.dev);
  ref().nll_loss(lp.ref, target.ref, -100, loss.ref);
  expect_close(loss, "nll_loss after an Error", true);
  // Wrong target dtype and shape.
  CHECK_THROWS_AS(dev().nll_loss(lp.dev, lp.dev, -100, loss.dev), Error);
  CHECK_THROWS_AS(dev().nll_loss(lp.dev, make_from({0, 1}, {2}).dev, -100, loss.dev), Error);
  CHECK_THROWS_AS(
      dev().nll_loss(lp.dev, target.dev, -100, make_rounded_output({n}, DType::float64).dev),
      Error);
}

// ============================== index_select ==============================

// Indices cycling over the rows with repeats, in a scrambled order.
std::vector<std::int64_t> indices(std::int64_t n, std::int64_t rows) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = (i * 13 + 5) % rows;
  return idx;
}

TEST_CASE("parity: index_select of every dtype and table layout") {
  if (!available()) return;
  std::uint64_t seed = 2000;
  // Row lengths that make every copy unit (16, 8, 4, 2, 1 bytes) and the strided fallback.
  const std::int64_t tables[][2] = {{1, 1},   {5, 3},   {50, 4},   {50, 7},
                                    {17, 32}, {33, 33}, {10, 1000}};
  const std::vector<DType> dtypes =
      supported({DType::float32, DType::float64, DType::int64, DType::boolean, DType::bfloat16});
  const std::int64_t n = 301;
  for (const DType dtype : dtypes) {
    for (const auto& size : tables) {
      const std::int64_t v = size[0], d = size[1];
      const Pair idx = make_from(indices(n, v), {n});
      for (const Layout layout : kLayouts) {
        const std::string what = std::string("index_select ") + dtype_name(dtype) + " " +
                                 shape_str({v, d}) + " " + layout_name(layout);
        const Pair table = make_rounded_pair({v, d}, dtype, layout, ++seed, -3.0, 3.0);
        const Pair out = make_rounded_output({n, d}, dtype);
        dev().index_select(table.dev, idx.dev, out.dev);
        ref().index_select(table.ref, idx.ref, out.ref);
        expect_close(out, what, true);
      }
      // Rows of a wider output at an odd offset (row stride d + 1), with strided indices.
      std::vector<std::int64_t> wide(static_cast<std::size_t>(2 * n), -1);
      const std::vector<std::int64_t> base = indices(n, v);
      for (std::size_t i = 0; i < base.size(); ++i) wide[2 * i] = base[i];
      const Pair strided_idx = view(make_from(wide, {2 * n}), {n}, {2}, 0);
      const Pair table = make_rounded_pair({v, d}, dtype, Layout::contiguous, ++seed, -3.0, 3.0);
      const Pair buffer = make_rounded_output({n + 1, d + 1}, dtype);
      const Pair out = view(buffer, {n, d}, {d + 1, 1}, 1);
      dev().index_select(table.dev, strided_idx.dev, out.dev);
      ref().index_select(table.ref, strided_idx.ref, out.ref);
      expect_close(buffer,
                   std::string("index_select into a strided output ") + dtype_name(dtype) + " " +
                       shape_str({v, d}),
                   true);
    }
  }
}

TEST_CASE("parity: index_select: a bad index throws the reference's Error, naming the position") {
  if (!available()) return;
  const Pair table = make_rounded_pair({6, 5}, DType::float32, Layout::contiguous, 1);
  for (const std::int64_t bad : {std::int64_t{6}, std::int64_t{-1}}) {
    std::vector<std::int64_t> idx = indices(20, 6);
    idx[11] = bad;
    idx[17] = bad;
    const Pair p = make_from(idx, {20});
    const Pair out = make_rounded_output({20, 5}, DType::float32);
    const std::string ref_message =
        error_of([&] { ref().index_select(table.ref, p.ref, out.ref); });
    const std::string dev_message =
        error_of([&] { dev().index_select(table.dev, p.dev, out.dev); });
    CHECK(dev_message.find("position 11") != std::string::npos);
    CHECK(dev_message == ref_message);
  }
  // No indices: nothing to do, nothing thrown.
  const Pair none = make_from({}, {0});
  CHECK_NOTHROW(
      dev().index_select(table.dev, none.dev, make_rounded_output({0, 5}, DType::float32).dev));
  // Wrong output shape or dtype, float indices.
  const Pair idx = make_from(indices(4, 6), {4});
  CHECK_THROWS_AS(
      dev().index_select(table.dev, idx.dev, make_rounded_output({4, 6}, DType::float32).dev),
      Error);
  CHECK_THROWS_AS(
      dev().index_select(table.dev, idx.dev, make_rounded_output({4, 5}, DType::float64).dev),
      Error);
  CHECK_THROWS_AS(
      dev().index_select(table.dev, table.dev, make_rounded_output({6, 5}, DType::float32).dev),
      Error);
}

// ============================== index_add ==============================

TEST_CASE("parity: index_add with repeated indices, every source layout") {
  if (!available()) return;
  std::uint64_t seed = 3000;
  // {V, D, N}: one row taking every source row (a long run), many collisions, few collisions.
  const std::int64_t sizes[][3] = {{1, 1, 5},    {1, 65, 5000},  {7, 33, 1000},
                                   {50, 7, 300}, {50, 768, 100}, {300, 5, 20}};
  for (const DType dtype : floating_dtypes()) {
    for (const auto& size : sizes) {
      const std::int64_t v = size[0], d = size[1], n = size[2];
      const Pair idx = make_from(indices(n, v), {n});
      for (const Layout layout : kLayouts) {
        const std::string what = std::string("index_add ") + dtype_name(dtype) + " " +
                                 shape_str({n, d}) + " into " + shape_str({v, d}) + " " +
                                 layout_name(layout);
        const Pair src = make_rounded_pair({n, d}, dtype, layout, ++seed);
        // The sums start from the table's values, not from 0.
        const Pair table = make_rounded_pair({v, d}, dtype, Layout::contiguous, ++seed);
        const Pair out = {raw::contiguous(table.ref).clone(), raw::contiguous(table.dev).clone()};
        dev().index_add(src.dev, idx.dev, out.dev);
        ref().index_add(src.ref, idx.ref, out.ref);
        // float32 and float64 add in the reference's order: equal bit for bit.
        expect_close(out, what, dtype != DType::bfloat16);
      }
    }
  }
}

TEST_CASE("parity: index_add: a bad index throws the reference's Error before anything is added") {
  if (!available()) return;
  const std::int64_t v = 6, d = 5, n = 20;
  std::vector<std::int64_t> idx = indices(n, v);
  idx[13] = v;
  const Pair p = make_from(idx, {n});
  const Pair src = make_rounded_pair({n, d}, DType::float32, Layout::contiguous, 1);
  const Pair table = make_rounded_pair({v, d}, DType::float32, Layout::contiguous, 2);
  const Pair out = {table.ref.clone(), table.dev.clone()};
  const std::string ref_message = error_of([&] { ref().index_add(src.ref, p.ref, out.ref); });
  const std::string dev_message = error_of([&] { dev().index_add(src.dev, p.dev, out.dev); });
  CHECK(dev_message.find("position 13") != std::string::npos);
  CHECK(dev_message == ref_message);
  check_close(out.dev, table.dev, "index_add output after a bad index", 0.0, 0.0);
  // No indices: the table is unchanged.
  const Pair none = make_from({}, {0});
  dev().index_add(raw::as_strided(src.dev, {0, d}, {d, 1}, 0), none.dev, out.dev);
  check_close(out.dev, table.dev, "index_add of no rows", 0.0, 0.0);
  // A non-contiguous output, an integer source.
  CHECK_THROWS_AS(dev().index_add(src.dev, make_from(indices(n, d), {n}).dev,
                                  raw::as_strided(table.dev, {d, v}, {1, d}, 0)),
                  Error);
  CHECK_THROWS_AS(dev().index_add(raw::to_dtype(src.dev, DType::int64), p.dev,
                                  raw::to_dtype(out.dev, DType::int64)),
                  Error);
}

}  // namespace
