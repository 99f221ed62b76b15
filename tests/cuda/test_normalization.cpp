// CUDA parity for the fused normalisation ops against the CPU backend: softmax and log-softmax
// (rows held by one warp up to 1024 elements, by one block beyond), layer norm with and without
// weight and bias, forward and backward, odd row lengths, float32, float64 and bfloat16, and
// fully masked (-inf) rows. The CPU backend has no bfloat16 kernels, so a bfloat16 case runs the
// CPU in float32 on the same bfloat16-rounded values.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"
#include "parity.h"

namespace {

using namespace tinyformer;
using namespace tinyformer::parity;

TF_PARITY_COVERS(softmax);
TF_PARITY_COVERS(softmax_backward);
TF_PARITY_COVERS(layer_norm);
TF_PARITY_COVERS(layer_norm_backward);

constexpr DType kDtypes[] = {DType::float32, DType::float64, DType::bfloat16};
// Around the warp sizes, the largest warp-held row (1024) and past it (block per row).
constexpr std::int64_t kCols[] = {1, 7, 31, 32, 33, 1000, 1024, 1025, 5000};

// Uniform values in [lo, hi), contiguous.
Pair uniform(const Shape& shape, DType dtype, std::uint64_t seed, double lo = -1.0,
             double hi = 1.0) {
  return on_both(make_pair(shape, DType::float64, Layout::contiguous, seed, lo, hi).cpu, dtype);
}

// bfloat16 results are compared in float32 with bfloat16's tolerance. A sum over `terms` rows
// (a parameter gradient) gets an absolute tolerance growing with them: the CPU adds them one
// after another, so its rounding error grows with the count, and a column whose sum is near 0
// would fail a relative test on rounding alone. A wrong or missing row is still far outside it.
void expect_close(const Pair& p, const std::string& what, std::int64_t terms = 0) {
  if (p.cuda.dtype() == DType::bfloat16) {
    check_close(raw::to_dtype(p.cuda, DType::float32), p.cpu, what + " (bfloat16)", 2e-2, 1e-2);
  } else if (terms > 0) {
    const double per_term = p.cuda.dtype() == DType::float32 ? 1e-6 : 1e-13;
    check_close(p, what, -1.0, per_term * static_cast<double>(terms));
  } else {
    check_close(p, what);
  }
}

std::string describe(const char* op, DType dtype, std::int64_t rows, std::int64_t cols) {
  return std::string(op) + " " + dtype_name(dtype) + " " + shape_str({rows, cols});
}

// Runs softmax (or log-softmax) forward on x, then backward with a random gradient from the
// CPU's forward result, on both devices, and compares both.
void check_softmax(const Pair& x, DType dtype, bool log, const std::string& what,
                   std::uint64_t seed) {
  const Shape shape = x.cpu.shape();
  const Pair y = make_rounded_output(shape, dtype);
  cuda_be().softmax(x.cuda, log, y.cuda);
  cpu_be().softmax(x.cpu, log, y.cpu);
  expect_close(y, what + " forward");

  // The same y on both devices, so the backward compares only the backward.
  const Pair y_in = on_both(y.cpu, dtype);
  const Pair g = uniform(shape, dtype, seed);
  const Pair dx = make_rounded_output(shape, dtype);
  cuda_be().softmax_backward(y_in.cuda, g.cuda, log, dx.cuda);
  cpu_be().softmax_backward(y_in.cpu, g.cpu, log, dx.cpu);
  expect_close(dx, what + " backward");
}

TEST_CASE("cuda parity: softmax and log_softmax over odd row lengths, forward and backward") {
  if (!gpu()) return;
  std::uint64_t seed = 100;
  for (const DType dtype : kDtypes) {
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

TEST_CASE("cuda parity: softmax with more rows than the grid has warps") {
  if (!gpu()) return;
  // 300000 rows of 7 is more than 65536 blocks of 4 warps: the grid-stride loop takes the rest.
  const Pair x = uniform({300000, 7}, DType::float32, 7);
  check_softmax(x, DType::float32, false, "softmax [300000, 7]", 8);
  check_softmax(x, DType::float32, true, "log_softmax [300000, 7]", 9);
}

TEST_CASE("cuda parity: softmax of masked (-inf) rows matches the CPU, NaN for a full mask") {
  if (!gpu()) return;
  const double inf = std::numeric_limits<double>::infinity();
  for (const DType dtype : kDtypes) {
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
        // The CPU's answer for a fully masked row is NaN; make sure the GPU's is too (not 0 or a
        // uniform row), independently of check_close's NaN rule.
        const Pair y = make_rounded_output({rows, cols}, dtype);
        cuda_be().softmax(x.cuda, log, y.cuda);
        const auto got = raw::to_device(raw::to_dtype(y.cuda, DType::float64), Device::cpu())
                             .to_vector<double>();
        CHECK_MESSAGE(std::isnan(got[0]), what);
        CHECK_MESSAGE(!std::isnan(got[static_cast<std::size_t>(cols)]), what);
      }
    }
  }
}

TEST_CASE("cuda softmax: bad input throws Error as on the CPU") {
  if (!gpu()) return;
  const Pair x = uniform({4, 6}, DType::float32, 1);
  const Pair y = make_rounded_output({4, 6}, DType::float32);
  // A transposed (non-contiguous) view.
  const Tensor xt = raw::as_strided(x.cuda, {6, 4}, {1, 6}, 0);
  const Tensor yt = make_rounded_output({6, 4}, DType::float32).cuda;
  CHECK_THROWS_AS(cuda_be().softmax(xt, false, yt), Error);
  CHECK_THROWS_AS(
      cuda_be().softmax(x.cuda, false, make_rounded_output({4, 5}, DType::float32).cuda), Error);
  CHECK_THROWS_AS(cuda_be().softmax(x.cuda, true, make_rounded_output({4, 6}, DType::float64).cuda),
                  Error);
  CHECK_THROWS_AS(cuda_be().softmax(x.cuda, false, y.cpu), Error);
  const Tensor ints = raw::to_dtype(x.cuda, DType::int64);
  CHECK_THROWS_AS(cuda_be().softmax(ints, false, raw::to_dtype(y.cuda, DType::int64)), Error);
  CHECK_THROWS_AS(cuda_be().softmax_backward(y.cuda, x.cuda.view({6, 4}), false, y.cuda), Error);
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
// the CPU's saved statistics with every gradient wanted, then with grad_x alone and with the
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
  cuda_be().layer_norm(x.cuda, w.cuda, b.cuda, eps, y.cuda, mean.cuda, rstd.cuda);
  cpu_be().layer_norm(x.cpu, w.cpu, b.cpu, eps, y.cpu, mean.cpu, rstd.cpu);
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
  const Pair m_in = on_both(mean.cpu, stats), r_in = on_both(rstd.cpu, stats);
  const Pair g = uniform({rows, cols}, dtype, seed + 3);
  for (const bool want_x : {true, false}) {
    for (const bool want_params : {true, false}) {
      if (!want_x && !want_params) continue;
      const Pair gx = want_x ? make_rounded_output({rows, cols}, dtype) : Pair{};
      const Pair gw = want_params && a.weight ? make_rounded_output({cols}, dtype) : Pair{};
      const Pair gb = want_params && a.bias ? make_rounded_output({cols}, dtype) : Pair{};
      if (!want_x && !gw.cpu.defined() && !gb.cpu.defined()) continue;
      cuda_be().layer_norm_backward(g.cuda, x.cuda, w.cuda, m_in.cuda, r_in.cuda, gx.cuda, gw.cuda,
                                    gb.cuda);
      cpu_be().layer_norm_backward(g.cpu, x.cpu, w.cpu, m_in.cpu, r_in.cpu, gx.cpu, gw.cpu, gb.cpu);
      if (want_x) expect_close(gx, what + " grad_x");
      if (gw.cpu.defined()) expect_close(gw, what + " grad_weight", rows);
      if (gb.cpu.defined()) expect_close(gb, what + " grad_bias", rows);
    }
  }
}

TEST_CASE("cuda parity: layer_norm over odd row lengths, with and without weight and bias") {
  if (!gpu()) return;
  std::uint64_t seed = 500;
  for (const DType dtype : kDtypes) {
    for (const std::int64_t cols : kCols) {
      const std::int64_t rows = cols > 1024 ? 9 : 133;
      for (const Affine a : kAffines) {
        check_layer_norm(rows, cols, dtype, dtype, a, seed += 4);
      }
    }
  }
}

TEST_CASE("cuda parity: layer_norm of bfloat16 with float32 statistics") {
  if (!gpu()) return;
  for (const std::int64_t cols : {7, 33, 1000, 5000}) {
    check_layer_norm(cols > 1024 ? 9 : 70, cols, DType::bfloat16, DType::float32, {true, true},
                     900 + static_cast<std::uint64_t>(cols));
  }
}

TEST_CASE("cuda parity: layer_norm_backward column sums over many rows are deterministic") {
  if (!gpu()) return;
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
    cuda_be().layer_norm_backward(g.cuda, x.cuda, Tensor(), mean.cuda, rstd.cuda, Tensor(), gw.cuda,
                                  gb.cuda);
    if (run == 0) {
      first_w = gw.cuda;
      first_b = gb.cuda;
    } else {
      check_close(gw.cuda, first_w, "grad_weight, run " + std::to_string(run), 0.0, 0.0);
      check_close(gb.cuda, first_b, "grad_bias, run " + std::to_string(run), 0.0, 0.0);
    }
  }
}

TEST_CASE("cuda parity: layer_norm_backward with no rows gives zero parameter gradients") {
  if (!gpu()) return;
  const Pair x = uniform({1, 6}, DType::float32, 3);
  const Tensor empty_rows = raw::as_strided(x.cuda, {0, 6}, {6, 1}, 0);
  const Tensor none = raw::as_strided(x.cuda, {0}, {1}, 0);
  const Pair gw = make_rounded_output({6}, DType::float32),
             gb = make_rounded_output({6}, DType::float32);
  cuda_be().layer_norm_backward(empty_rows, empty_rows, Tensor(), none, none, Tensor(), gw.cuda,
                                gb.cuda);
  cpu_be().layer_norm_backward(raw::as_strided(x.cpu, {0, 6}, {6, 1}, 0),
                               raw::as_strided(x.cpu, {0, 6}, {6, 1}, 0), Tensor(),
                               raw::as_strided(x.cpu, {0}, {1}, 0),
                               raw::as_strided(x.cpu, {0}, {1}, 0), Tensor(), gw.cpu, gb.cpu);
  check_close(gw, "grad_weight of no rows", 0.0, 0.0);
  check_close(gb, "grad_bias of no rows", 0.0, 0.0);
}

TEST_CASE("cuda layer_norm: bad input throws Error as on the CPU") {
  if (!gpu()) return;
  const Pair x = uniform({4, 6}, DType::float32, 1);
  const Tensor y = make_rounded_output({4, 6}, DType::float32).cuda;
  const Tensor mean = make_rounded_output({4}, DType::float32).cuda,
               rstd = make_rounded_output({4}, DType::float32).cuda;
  const Tensor w = uniform({6}, DType::float32, 2).cuda;
  CHECK_NOTHROW(cuda_be().layer_norm(x.cuda, w, Tensor(), 1e-5, y, mean, rstd));
  // Wrong weight shape, statistics of the wrong dtype or length, negative eps, rows of 0.
  CHECK_THROWS_AS(cuda_be().layer_norm(x.cuda, uniform({5}, DType::float32, 3).cuda, Tensor(), 1e-5,
                                       y, mean, rstd),
                  Error);
  CHECK_THROWS_AS(cuda_be().layer_norm(x.cuda, w, Tensor(), 1e-5, y,
                                       make_rounded_output({4}, DType::float64).cuda, rstd),
                  Error);
  CHECK_THROWS_AS(cuda_be().layer_norm(x.cuda, w, Tensor(), 1e-5, y,
                                       make_rounded_output({3}, DType::float32).cuda, rstd),
                  Error);
  CHECK_THROWS_AS(cuda_be().layer_norm(x.cuda, w, Tensor(), -1.0, y, mean, rstd), Error);
  const Tensor no_cols = raw::as_strided(x.cuda, {4, 0}, {1, 1}, 0);
  CHECK_THROWS_AS(cuda_be().layer_norm(no_cols, Tensor(), Tensor(), 1e-5,
                                       raw::as_strided(y, {4, 0}, {1, 1}, 0), mean, rstd),
                  Error);
  // float32 statistics are allowed for bfloat16 only.
  const Tensor xb = raw::to_dtype(x.cuda, DType::bfloat16);
  CHECK_NOTHROW(cuda_be().layer_norm(xb, Tensor(), Tensor(), 1e-5,
                                     raw::to_dtype(y, DType::bfloat16), mean, rstd));
  const Tensor x64 = raw::to_dtype(x.cuda, DType::float64);
  CHECK_THROWS_AS(cuda_be().layer_norm(x64, Tensor(), Tensor(), 1e-5,
                                       raw::to_dtype(y, DType::float64), mean, rstd),
                  Error);
  // A transposed x.
  CHECK_THROWS_AS(cuda_be().layer_norm_backward(y, raw::as_strided(x.cuda, {4, 6}, {1, 4}, 0),
                                                Tensor(), mean, rstd, y, Tensor(), Tensor()),
                  Error);
}

}  // namespace
