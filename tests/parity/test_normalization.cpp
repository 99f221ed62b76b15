// Parity of the fused normalisation ops against the reference backend: softmax and log-softmax
// (rows held by one warp up to 1024 elements, by one block beyond), layer norm with and without
// weight and bias, forward and backward, odd row lengths, float32, float64 and bfloat16, and
// fully masked (-inf) rows. A bfloat16 case runs the reference in float32 on the same
// bfloat16-rounded values.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"
#include "parity/parity.h"

namespace {

using namespace tinyformer;
using namespace tinyformer::parity;

TF_PARITY_COVERS(softmax);
TF_PARITY_COVERS(softmax_backward);
TF_PARITY_COVERS(layer_norm);
TF_PARITY_COVERS(layer_norm_backward);
TF_PARITY_COVERS(add_layer_norm);

// Around the warp sizes, the largest warp-held row (1024) and past it (block per row).
constexpr std::int64_t kCols[] = {1, 7, 31, 32, 33, 1000, 1024, 1025, 5000};

// Uniform values in [lo, hi), contiguous.
Pair uniform(const Shape& shape, DType dtype, std::uint64_t seed, double lo = -1.0,
             double hi = 1.0) {
  return on_both(make_pair(shape, DType::float64, Layout::contiguous, seed, lo, hi).ref, dtype);
}

// bfloat16 results are compared in float32 with bfloat16's tolerance. A sum over `terms` rows
// (a parameter gradient) gets an absolute tolerance growing with them: a float32 target adds
// them in float32, so its rounding error grows with the count, and a column whose sum is near 0
// would fail a relative test on rounding alone. A wrong or missing row is still far outside it.
void expect_close(const Pair& p, const std::string& what, std::int64_t terms = 0) {
  if (p.dev.dtype() == DType::bfloat16) {
    check_close(raw::to_dtype(p.dev, DType::float32), p.ref, what + " (bfloat16)", 2e-2, 1e-2);
  } else if (terms > 0) {
    const double per_term = p.dev.dtype() == DType::float32 ? 1e-6 : 1e-13;
    check_close(p, what, -1.0, per_term * static_cast<double>(terms));
  } else {
    check_close(p, what);
  }
}

std::string describe(const char* op, DType dtype, std::int64_t rows, std::int64_t cols) {
  return std::string(op) + " " + dtype_name(dtype) + " " + shape_str({rows, cols});
}

// Runs softmax (or log-softmax) forward on x, then backward with a random gradient from the
// reference's forward result, on both sides, and compares both.
void check_softmax(const Pair& x, DType dtype, bool log, const std::string& what,
                   std::uint64_t seed) {
  const Shape shape = x.ref.shape();
  const Pair y = make_rounded_output(shape, dtype);
  dev().softmax(x.dev, log, y.dev);
  ref().softmax(x.ref, log, y.ref);
  if (log && dtype == DType::float32) {
    // log_softmax subtracts numbers up to the row's range (here up to 120) in float32: its
    // rounding is absolute, about an ulp of that range.
    check_close(y, what + " forward", -1.0, 1e-5);
  } else {
    expect_close(y, what + " forward");
  }

  // The same y on both devices, so the backward compares only the backward.
  const Pair y_in = on_both(y.ref, dtype);
  const Pair g = uniform(shape, dtype, seed);
  const Pair dx = make_rounded_output(shape, dtype);
  dev().softmax_backward(y_in.dev, g.dev, log, dx.dev);
  ref().softmax_backward(y_in.ref, g.ref, log, dx.ref);
  if (log && dtype == DType::float32) {
    // dx = g - exp(y) sum_j g[j]: the float32 sum of C gradients in [-1, 1) carries an absolute
    // rounding error that grows with C.
    check_close(dx, what + " backward", -1.0, 1e-6 + 1e-8 * static_cast<double>(shape[1]));
  } else {
    expect_close(dx, what + " backward");
  }
}

TEST_CASE("parity: softmax and log_softmax over odd row lengths, forward and backward") {
  if (!available()) return;
  std::uint64_t seed = 100;
  for (const DType dtype : floating_dtypes()) {
    for (const std::int64_t cols : kCols) {
      const std::int64_t rows = cols > 1024 ? 9 : 133;
      for (const bool log : {false, true}) {
        // A wide range, so that the row max matters (exp(12) overflows nothing, exp(60) would
        // in float32 without the max subtracted).
        const Pair x = uniform({rows, cols}, dtype, ++seed, -60.0, 60.0);
        check_softmax(x, dtype, log, describe(log ? "log_softmax" : "softmax", dtype, rows, cols),
                      ++seed);
      }
    }
  }
}

TEST_CASE("parity: log_softmax is never positive: extreme and scaled logits, every dtype") {
  if (!available()) return;
  const double inf = std::numeric_limits<double>::infinity();
  for (const DType dtype : floating_dtypes()) {
    for (const double scale : {1.0, 30.0, 1e4}) {
      // 520 rows of 128: logits up to +-scale, one row [0, -inf, ...] and one of a single
      // maximum with every other logit far below it.
      const std::int64_t rows = 520, cols = 128;
      Tensor host = randn({rows, cols}, {.dtype = DType::float64});
      std::vector<double> v = host.to_vector<double>();
      for (double& e : v) e *= scale;
      for (std::int64_t c = 0; c < cols; ++c) {
        v[static_cast<std::size_t>(c)] = c == 0 ? 0.0 : -inf;
        v[static_cast<std::size_t>(cols + c)] = c == 0 ? scale : -scale * 1e3;
      }
      const Pair x = on_both(from<double>(v, {rows, cols}), dtype);
      const Pair y = make_rounded_output({rows, cols}, dtype);
      dev().softmax(x.dev, true, y.dev);
      ref().softmax(x.ref, true, y.ref);
      for (const Tensor& out : {y.dev, y.ref}) {
        const auto got =
            raw::to_device(raw::to_dtype(out, DType::float64), Device::cpu()).to_vector<double>();
        std::int64_t positive = 0;
        for (double e : got) positive += e > 0.0 ? 1 : 0;
        CHECK_MESSAGE(positive == 0, "log_softmax ", dtype_name(dtype), " scale ", scale, ": ",
                      positive, " positive log-probabilities");
        CHECK_MESSAGE(got[0] == 0.0, "log_softmax ", dtype_name(dtype), " of [0, -inf, ...]");
      }
    }
  }
}

TEST_CASE("parity: softmax with more rows than the grid has warps") {
  if (!available()) return;
  // 300000 rows of 7 is more than 65536 blocks of 4 warps: the grid-stride loop takes the rest.
  const Pair x = uniform({300000, 7}, DType::float32, 7);
  check_softmax(x, DType::float32, false, "softmax [300000, 7]", 8);
  check_softmax(x, DType::float32, true, "log_softmax [300000, 7]", 9);
}

TEST_CASE("parity: softmax of masked (-inf) rows matches the reference, NaN for a full mask") {
  if (!available()) return;
  const double inf = std::numeric_limits<double>::infinity();
  for (const DType dtype : floating_dtypes()) {
    for (const std::int64_t cols : {7, 33, 1025}) {
      const std::int64_t rows = 5;
      std::vector<double> v(static_cast<std::size_t>(rows * cols));
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          const double value = std::sin(0.37 * static_cast<double>(r * cols + c)) * 3.0;
          const bool masked = r == 0 || r == 3 ||         // fully masked rows
                              (r == 1 && c % 2 == 1) ||   // every other column
                              (r == 2 && c != cols / 2);  // all but one column
          v[static_cast<std::size_t>(r * cols + c)] = masked ? -inf : value;
        }
      }
      const Pair x = on_both(from<double>(v, {rows, cols}), dtype);
      for (const bool log : {false, true}) {
        const std::string what =
            describe(log ? "masked log_softmax" : "masked softmax", dtype, rows, cols);
        check_softmax(x, dtype, log, what, 40 + static_cast<std::uint64_t>(cols));
        // The reference's answer for a fully masked row is NaN; make sure the target's is too (not
        // 0 or a uniform row), independently of check_close's NaN rule.
        const Pair y = make_rounded_output({rows, cols}, dtype);
        dev().softmax(x.dev, log, y.dev);
        const auto got =
            raw::to_device(raw::to_dtype(y.dev, DType::float64), Device::cpu()).to_vector<double>();
        CHECK_MESSAGE(std::isnan(got[0]), what);
        CHECK_MESSAGE(!std::isnan(got[static_cast<std::size_t>(cols)]), what);
      }
    }
  }
}

// The same bits: a and b (same shape and dtype, on any device) hold the same values, NaN where
// the other has NaN.
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const std::vector<double> x =
      raw::to_device(raw::to_dtype(a, DType::float64), Device::cpu()).to_vector<double>();
  const std::vector<double> y =
      raw::to_device(raw::to_dtype(b, DType::float64), Device::cpu()).to_vector<double>();
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  }
  return true;
}

// A bfloat16 result against the reference's, both rounded from their own sums: equal but where
// the two sums straddle a rounding boundary (then one bfloat16 step apart). A kernel that
// truncates, or rounds twice, differs in about half of the elements and fails the count.
void check_same_rounding(const Pair& p, const std::string& what) {
  const std::vector<double> got =
      raw::to_device(raw::to_dtype(p.dev, DType::float64), Device::cpu()).to_vector<double>();
  const std::vector<double> want = raw::to_dtype(p.ref, DType::float64).to_vector<double>();
  REQUIRE(got.size() == want.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    ++differ;
    const double step = std::ldexp(std::fabs(want[i]), -7);  // at least one bfloat16 step
    CHECK_MESSAGE(std::fabs(got[i] - want[i]) <= step + 1e-38, what, ": element ", i, " got ",
                  got[i], ", want ", want[i]);
  }
  INFO(what << ": " << differ << " of " << got.size() << " elements differ by one step");
  CHECK(differ * 50 <= got.size());
}

TEST_CASE("parity: mixed precision softmax: float32 in, bfloat16 out, and its backward") {
  if (!available()) return;
  std::uint64_t seed = 300;
  for (const std::int64_t cols : kCols) {
    const std::int64_t rows = cols > 1024 ? 9 : 133;
    for (const bool log : {false, true}) {
      const std::string what =
          describe(log ? "log_softmax" : "softmax", DType::float32, rows, cols) + " -> bfloat16";
      const Pair x = uniform({rows, cols}, DType::float32, ++seed, -30.0, 30.0);
      const Pair y = make_output({rows, cols}, DType::bfloat16);
      dev().softmax(x.dev, log, y.dev);
      ref().softmax(x.ref, log, y.ref);
      if (log) {
        // x - max - log(sum) cancels near the row's max: float32's absolute error there is an
        // ulp of the logits' range (as in the float32 case above), which can move a value across
        // a rounding boundary: one bfloat16 step.
        check_close(y, what + " forward", 8e-3, 1e-5);
      } else {
        check_same_rounding(y, what + " forward");
      }

      // The backward reads a bfloat16 y (the reference's, on both sides) and a float32 grad,
      // and writes float32 or bfloat16; the bfloat16 out must be the float32 one rounded.
      const Pair y_in = on_both(y.ref);
      const Pair g = uniform({rows, cols}, DType::float32, ++seed);
      const Pair dx32 = make_output({rows, cols}, DType::float32);
      dev().softmax_backward(y_in.dev, g.dev, log, dx32.dev);
      ref().softmax_backward(y_in.ref, g.ref, log, dx32.ref);
      // The float32 sum over the row carries an absolute error growing with C (as above).
      check_close(dx32, what + " backward, float32 out", 1e-5,
                  1e-6 + 1e-8 * static_cast<double>(cols));
      const Tensor dx16 = make_output({rows, cols}, DType::bfloat16).dev;
      dev().softmax_backward(y_in.dev, g.dev, log, dx16);
      CHECK_MESSAGE(
          bitwise_equal(raw::to_dtype(dx16, DType::float32),
                        raw::to_dtype(raw::to_dtype(dx32.dev, DType::bfloat16), DType::float32)),
          what, " backward: the bfloat16 out is the float32 one rounded");
      // A float32 y with a bfloat16 out.
      const Pair y32 = on_both(raw::to_dtype(y.ref, DType::float32));
      const Tensor dx32b = make_output({rows, cols}, DType::float32).dev;
      const Tensor dx16b = make_output({rows, cols}, DType::bfloat16).dev;
      dev().softmax_backward(y32.dev, g.dev, log, dx32b);
      dev().softmax_backward(y32.dev, g.dev, log, dx16b);
      CHECK_MESSAGE(
          bitwise_equal(raw::to_dtype(dx16b, DType::float32),
                        raw::to_dtype(raw::to_dtype(dx32b, DType::bfloat16), DType::float32)),
          what, " backward, float32 y: the bfloat16 out is the float32 one rounded");
    }
  }
  // The pairs mixed precision does not use are errors: a bfloat16 x into a float32 out, a
  // float64 computation with a bfloat16 out, a bfloat16 grad with a float32 y.
  const Pair x = uniform({4, 6}, DType::float32, 1);
  const Tensor x16 = raw::to_dtype(x.dev, DType::bfloat16);
  const Tensor out32 = make_output({4, 6}, DType::float32).dev;
  const Tensor out16 = make_output({4, 6}, DType::bfloat16).dev;
  CHECK_THROWS_AS(dev().softmax(x16, false, out32), Error);
  CHECK_THROWS_AS(dev().softmax(raw::to_dtype(x.dev, DType::float64), false, out16), Error);
  CHECK_THROWS_AS(dev().softmax_backward(x.dev, x16, false, out32), Error);
  CHECK_THROWS_AS(dev().softmax_backward(x16, raw::to_dtype(x.dev, DType::float64), false, out16),
                  Error);
}

TEST_CASE("parity: softmax: bad input throws Error") {
  if (!available()) return;
  const Pair x = uniform({4, 6}, DType::float32, 1);
  const Pair y = make_rounded_output({4, 6}, DType::float32);
  // A transposed (non-contiguous) view.
  const Tensor xt = raw::as_strided(x.dev, {6, 4}, {1, 6}, 0);
  const Tensor yt = make_rounded_output({6, 4}, DType::float32).dev;
  CHECK_THROWS_AS(dev().softmax(xt, false, yt), Error);
  CHECK_THROWS_AS(dev().softmax(x.dev, false, make_rounded_output({4, 5}, DType::float32).dev),
                  Error);
  CHECK_THROWS_AS(dev().softmax(x.dev, true, make_rounded_output({4, 6}, DType::float64).dev),
                  Error);
  if (!device().is_cpu()) CHECK_THROWS_AS(dev().softmax(x.dev, false, y.ref), Error);
  const Tensor ints = raw::to_dtype(x.dev, DType::int64);
  CHECK_THROWS_AS(dev().softmax(ints, false, raw::to_dtype(y.dev, DType::int64)), Error);
  CHECK_THROWS_AS(dev().softmax_backward(y.dev, x.dev.view({6, 4}), false, y.dev), Error);
}

// ============================== layer norm ==============================

struct Affine {
  bool weight, bias;
};
constexpr Affine kAffines[] = {{false, false}, {true, false}, {false, true}, {true, true}};

std::string describe_affine(const std::string& base, Affine a) {
  return base + (a.weight ? " +weight" : "") + (a.bias ? " +bias" : "");
}

// One layer-norm case: the forward on both devices (out, mean, rstd), then the backward from
// the reference's saved statistics with every gradient wanted, then with grad_x alone and with the
// parameter gradients alone. `stats` is the dtype of mean and rstd (x's, or float32 for a
// bfloat16 x).
void check_layer_norm(std::int64_t rows, std::int64_t cols, DType dtype, DType stats, Affine a,
                      std::uint64_t seed) {
  const std::string what = describe_affine(describe("layer_norm", dtype, rows, cols), a) +
                           (stats != dtype ? " (float32 statistics)" : "");
  const double eps = 1e-5;
  // An offset mean, so that a one-pass variance would cancel.
  const Pair x = uniform({rows, cols}, dtype, seed, -3.0, 5.0);
  const Pair w = a.weight ? uniform({cols}, dtype, seed + 1, 0.5, 1.5) : Pair{};
  const Pair b = a.bias ? uniform({cols}, dtype, seed + 2) : Pair{};
  const Pair y = make_rounded_output({rows, cols}, dtype);
  const Pair mean = make_rounded_output({rows}, stats), rstd = make_rounded_output({rows}, stats);
  dev().layer_norm(x.dev, w.dev, b.dev, eps, y.dev, mean.dev, rstd.dev);
  ref().layer_norm(x.ref, w.ref, b.ref, eps, y.ref, mean.ref, rstd.ref);
  expect_close(y, what + " out");
  if (stats == DType::float32 && dtype == DType::bfloat16) {
    // float32 sums of the same rounded values: float32's tolerance, a little looser for the
    // summation order.
    check_close(mean, what + " mean", 1e-4, 1e-5);
    check_close(rstd, what + " rstd", 1e-4, 1e-5);
  } else {
    expect_close(mean, what + " mean");
    expect_close(rstd, what + " rstd");
  }

  // The backward's inputs: the same values on both devices.
  const Pair m_in = on_both(mean.ref, stats), r_in = on_both(rstd.ref, stats);
  const Pair g = uniform({rows, cols}, dtype, seed + 3);
  for (const bool want_x : {true, false}) {
    for (const bool want_params : {true, false}) {
      if (!want_x && !want_params) continue;
      const Pair gx = want_x ? make_rounded_output({rows, cols}, dtype) : Pair{};
      const Pair gw = want_params && a.weight ? make_rounded_output({cols}, dtype) : Pair{};
      const Pair gb = want_params && a.bias ? make_rounded_output({cols}, dtype) : Pair{};
      if (!want_x && !gw.ref.defined() && !gb.ref.defined()) continue;
      dev().layer_norm_backward(g.dev, x.dev, w.dev, m_in.dev, r_in.dev, gx.dev, gw.dev, gb.dev);
      ref().layer_norm_backward(g.ref, x.ref, w.ref, m_in.ref, r_in.ref, gx.ref, gw.ref, gb.ref);
      if (want_x) expect_close(gx, what + " grad_x");
      if (gw.ref.defined()) expect_close(gw, what + " grad_weight", rows);
      if (gb.ref.defined()) expect_close(gb, what + " grad_bias", rows);
    }
  }
}

TEST_CASE("parity: layer_norm over odd row lengths, with and without weight and bias") {
  if (!available()) return;
  std::uint64_t seed = 500;
  for (const DType dtype : floating_dtypes()) {
    for (const std::int64_t cols : kCols) {
      const std::int64_t rows = cols > 1024 ? 9 : 133;
      for (const Affine a : kAffines) {
        check_layer_norm(rows, cols, dtype, dtype, a, seed += 4);
      }
    }
  }
}

TEST_CASE("parity: layer_norm of bfloat16 with float32 statistics") {
  if (!available() || !supports(DType::bfloat16)) return;
  for (const std::int64_t cols : {7, 33, 1000, 5000}) {
    check_layer_norm(cols > 1024 ? 9 : 70, cols, DType::bfloat16, DType::float32, {true, true},
                     900 + static_cast<std::uint64_t>(cols));
  }
}

TEST_CASE("parity: layer_norm_backward column sums over many rows are deterministic") {
  if (!available()) return;
  // 20000 rows: more chunks than the cap (256), so a chunk holds more than the minimum 64 rows.
  const std::int64_t rows = 20000, cols = 33;
  check_layer_norm(rows, cols, DType::float32, DType::float32, {true, true}, 77);
  const Pair x = uniform({rows, cols}, DType::float32, 78);
  const Pair g = uniform({rows, cols}, DType::float32, 79);
  const Pair mean = uniform({rows}, DType::float32, 80);
  const Pair rstd = uniform({rows}, DType::float32, 81, 0.5, 2.0);
  Tensor first_w, first_b;
  for (int run = 0; run < 3; ++run) {
    const Pair gw = make_rounded_output({cols}, DType::float32),
               gb = make_rounded_output({cols}, DType::float32);
    dev().layer_norm_backward(g.dev, x.dev, Tensor(), mean.dev, rstd.dev, Tensor(), gw.dev, gb.dev);
    if (run == 0) {
      first_w = gw.dev;
      first_b = gb.dev;
    } else {
      check_close(gw.dev, first_w, "grad_weight, run " + std::to_string(run), 0.0, 0.0);
      check_close(gb.dev, first_b, "grad_bias, run " + std::to_string(run), 0.0, 0.0);
    }
  }
}

TEST_CASE("parity: layer_norm_backward with no rows gives zero parameter gradients") {
  if (!available()) return;
  const Pair x = uniform({1, 6}, DType::float32, 3);
  const Tensor empty_rows = raw::as_strided(x.dev, {0, 6}, {6, 1}, 0);
  const Tensor none = raw::as_strided(x.dev, {0}, {1}, 0);
  const Pair gw = make_rounded_output({6}, DType::float32),
             gb = make_rounded_output({6}, DType::float32);
  dev().layer_norm_backward(empty_rows, empty_rows, Tensor(), none, none, Tensor(), gw.dev, gb.dev);
  ref().layer_norm_backward(raw::as_strided(x.ref, {0, 6}, {6, 1}, 0),
                            raw::as_strided(x.ref, {0, 6}, {6, 1}, 0), Tensor(),
                            raw::as_strided(x.ref, {0}, {1}, 0),
                            raw::as_strided(x.ref, {0}, {1}, 0), Tensor(), gw.ref, gb.ref);
  check_close(gw, "grad_weight of no rows", 0.0, 0.0);
  check_close(gb, "grad_bias of no rows", 0.0, 0.0);
}

TEST_CASE("parity: layer_norm: bad input throws Error") {
  if (!available()) return;
  const Pair x = uniform({4, 6}, DType::float32, 1);
  const Tensor y = make_rounded_output({4, 6}, DType::float32).dev;
  const Tensor mean = make_rounded_output({4}, DType::float32).dev,
               rstd = make_rounded_output({4}, DType::float32).dev;
  const Tensor w = uniform({6}, DType::float32, 2).dev;
  CHECK_NOTHROW(dev().layer_norm(x.dev, w, Tensor(), 1e-5, y, mean, rstd));
  // Wrong weight shape, statistics of the wrong dtype or length, negative eps, rows of 0.
  CHECK_THROWS_AS(
      dev().layer_norm(x.dev, uniform({5}, DType::float32, 3).dev, Tensor(), 1e-5, y, mean, rstd),
      Error);
  CHECK_THROWS_AS(dev().layer_norm(x.dev, w, Tensor(), 1e-5, y,
                                   make_rounded_output({4}, DType::float64).dev, rstd),
                  Error);
  CHECK_THROWS_AS(dev().layer_norm(x.dev, w, Tensor(), 1e-5, y,
                                   make_rounded_output({3}, DType::float32).dev, rstd),
                  Error);
  CHECK_THROWS_AS(dev().layer_norm(x.dev, w, Tensor(), -1.0, y, mean, rstd), Error);
  const Tensor no_cols = raw::as_strided(x.dev, {4, 0}, {1, 1}, 0);
  CHECK_THROWS_AS(dev().layer_norm(no_cols, Tensor(), Tensor(), 1e-5,
                                   raw::as_strided(y, {4, 0}, {1, 1}, 0), mean, rstd),
                  Error);
  // float32 statistics are allowed for bfloat16 only.
  if (supports(DType::bfloat16)) {
    const Tensor xb = raw::to_dtype(x.dev, DType::bfloat16);
    CHECK_NOTHROW(dev().layer_norm(xb, Tensor(), Tensor(), 1e-5, raw::to_dtype(y, DType::bfloat16),
                                   mean, rstd));
  }
  const Tensor x64 = raw::to_dtype(x.dev, DType::float64);
  CHECK_THROWS_AS(
      dev().layer_norm(x64, Tensor(), Tensor(), 1e-5, raw::to_dtype(y, DType::float64), mean, rstd),
      Error);
  // A transposed x.
  CHECK_THROWS_AS(dev().layer_norm_backward(y, raw::as_strided(x.dev, {4, 6}, {1, 4}, 0), Tensor(),
                                            mean, rstd, y, Tensor(), Tensor()),
                  Error);
}

// ============================== add + layer norm ==============================

// add_layer_norm on both devices: the sum against the reference's, the statistics and out
// against the reference's layer_norm of the target's own sum (so a bfloat16 sum rounded one ulp
// differently does not count twice), and out also against the reference's add_layer_norm where
// the dtype rounds no sum (float32, float64).
void check_add_layer_norm(std::int64_t rows, std::int64_t cols, DType dtype, DType stats, Affine a,
                          std::uint64_t seed) {
  const std::string what = describe_affine(describe("add_layer_norm", dtype, rows, cols), a) +
                           (stats != dtype ? " (float32 statistics)" : "");
  const double eps = 1e-5;
  const Pair x = uniform({rows, cols}, dtype, seed, -3.0, 5.0);
  const Pair r = uniform({rows, cols}, dtype, seed + 1, -2.0, 1.0);
  const Pair w = a.weight ? uniform({cols}, dtype, seed + 2, 0.5, 1.5) : Pair{};
  const Pair b = a.bias ? uniform({cols}, dtype, seed + 3) : Pair{};
  const Pair y = make_rounded_output({rows, cols}, dtype),
             h = make_rounded_output({rows, cols}, dtype);
  const Pair mean = make_rounded_output({rows}, stats), rstd = make_rounded_output({rows}, stats);
  dev().add_layer_norm(x.dev, r.dev, w.dev, b.dev, eps, y.dev, h.dev, mean.dev, rstd.dev);
  ref().add_layer_norm(x.ref, r.ref, w.ref, b.ref, eps, y.ref, h.ref, mean.ref, rstd.ref);
  expect_close(h, what + " sum");
  if (dtype != DType::bfloat16) {
    expect_close(y, what + " out");
    expect_close(mean, what + " mean");
    expect_close(rstd, what + " rstd");
  }
  // The reference's layer norm of the sum the target wrote.
  const Pair own = on_both(raw::to_device(h.dev, Device::cpu()), dtype);
  const Pair y2 = make_rounded_output({rows, cols}, dtype);
  const Pair mean2 = make_rounded_output({rows}, stats), rstd2 = make_rounded_output({rows}, stats);
  ref().layer_norm(own.ref, w.ref, b.ref, eps, y2.ref, mean2.ref, rstd2.ref);
  expect_close(Pair{y2.ref, y.dev}, what + " out (of its own sum)");
  if (stats == DType::float32 && dtype == DType::bfloat16) {
    check_close(mean.dev, mean2.ref, what + " mean", 1e-4, 1e-5);
    check_close(rstd.dev, rstd2.ref, what + " rstd", 1e-4, 1e-5);
  } else {
    expect_close(Pair{mean2.ref, mean.dev}, what + " mean (of its own sum)");
    expect_close(Pair{rstd2.ref, rstd.dev}, what + " rstd (of its own sum)");
  }
}

TEST_CASE("parity: add_layer_norm over odd row lengths, with and without weight and bias") {
  if (!available()) return;
  std::uint64_t seed = 7000;
  for (const DType dtype : floating_dtypes()) {
    for (const std::int64_t cols : kCols) {
      const std::int64_t rows = cols > 1024 ? 9 : 133;
      for (const Affine a : kAffines) {
        check_add_layer_norm(rows, cols, dtype, dtype, a, seed += 4);
      }
    }
  }
  if (supports(DType::bfloat16)) {
    for (const std::int64_t cols : {7, 1000, 5000}) {
      check_add_layer_norm(cols > 1024 ? 9 : 70, cols, DType::bfloat16, DType::float32,
                           {true, true}, 7900 + static_cast<std::uint64_t>(cols));
    }
  }
}

TEST_CASE("parity: add_layer_norm: bad input throws Error") {
  if (!available()) return;
  const Pair x = uniform({4, 6}, DType::float32, 1);
  const Tensor y = make_rounded_output({4, 6}, DType::float32).dev;
  const Tensor h = make_rounded_output({4, 6}, DType::float32).dev;
  const Tensor mean = make_rounded_output({4}, DType::float32).dev,
               rstd = make_rounded_output({4}, DType::float32).dev;
  const Tensor r = uniform({4, 6}, DType::float32, 2).dev;
  CHECK_NOTHROW(dev().add_layer_norm(x.dev, r, Tensor(), Tensor(), 1e-5, y, h, mean, rstd));
  // A residual or sum of another shape or dtype, or missing; a transposed residual.
  CHECK_THROWS_AS(dev().add_layer_norm(x.dev, uniform({4, 5}, DType::float32, 3).dev, Tensor(),
                                       Tensor(), 1e-5, y, h, mean, rstd),
                  Error);
  CHECK_THROWS_AS(dev().add_layer_norm(x.dev, raw::to_dtype(r, DType::float64), Tensor(), Tensor(),
                                       1e-5, y, h, mean, rstd),
                  Error);
  CHECK_THROWS_AS(dev().add_layer_norm(x.dev, r, Tensor(), Tensor(), 1e-5, y, Tensor(), mean, rstd),
                  Error);
  CHECK_THROWS_AS(dev().add_layer_norm(x.dev, raw::as_strided(r, {4, 6}, {1, 4}, 0), Tensor(),
                                       Tensor(), 1e-5, y, h, mean, rstd),
                  Error);
  CHECK_THROWS_AS(dev().add_layer_norm(x.dev, r, Tensor(), Tensor(), -1.0, y, h, mean, rstd),
                  Error);
}

}  // namespace
