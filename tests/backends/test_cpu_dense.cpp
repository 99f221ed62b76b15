// The CPU backend's compute-bound kernels (matmul, softmax, layer_norm, conv1d, pool1d) against
// the reference backend computing in float64 on the same (widened) values: every operand layout
// matmul accepts (contiguous, transposed, sliced, broadcast, permuted, copy-only), odd sizes,
// float32 and float64, with the CPU's own tolerances; and the CPU's own concerns (which operands
// BLAS reads in place, the oneDNN primitive cache, error messages).
#include <doctest/doctest.h>

#include <omp.h>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/avx512.h"
#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/matmul.h"
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

// --- making and reading tensors without the kernels under test ---

std::vector<double> random_values(std::int64_t n, unsigned seed, double lo = -1.0,
                                  double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

// A contiguous tensor of `dtype` holding `values`.
Tensor make(const std::vector<double>& values, const Shape& shape, DType dtype) {
  if (dtype == DType::float64) return from<double>(values, shape);
  return from<float>(std::vector<float>(values.begin(), values.end()), shape);
}

Tensor random_tensor(const Shape& shape, DType dtype, unsigned seed) {
  return make(random_values(shape_numel(shape), seed), shape, dtype);
}

// The values of a contiguous tensor, as doubles.
std::vector<double> values(const Tensor& t) {
  REQUIRE(t.is_contiguous());
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = t.dtype() == DType::float64 ? static_cast<const double*>(t.data_ptr())[i]
                                       : static_cast<const float*>(t.data_ptr())[i];
  }
  return v;
}

Tensor empty_of(const Shape& shape, DType dtype) {
  return empty(shape, {.dtype = dtype});
}

// t's values in float64 (exactly), contiguous, for the reference backend to compute on in
// double; an undefined tensor stays undefined.
Tensor widened(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor wide = empty_of(t.shape(), DType::float64);
  ref().copy(t, wide);
  return wide;
}

// |got - want| <= tol * (1 + |want|) for every element; reports the first failure.
void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))) {
      FAIL_CHECK("element " << i << ": got " << got[i] << ", want " << want[i]);
      return;
    }
  }
}

double tolerance(DType dtype) {
  return dtype == DType::float64 ? 1e-12 : 2e-5;
}

// ============================== matmul ==============================

// How a test operand [B, R, C] is laid out in memory.
enum class Layout { contiguous, transposed, sliced, broadcast, permuted, strided };
const char* layout_name(Layout l) {
  constexpr const char* names[] = {"contiguous", "transposed", "sliced",
                                   "broadcast",  "permuted",   "strided"};
  return names[static_cast<int>(l)];
}

// A [B, R, C] view with the given layout over a fresh storage of random values.
Tensor make_operand(Layout layout, std::int64_t b, std::int64_t r, std::int64_t c, DType dtype,
                    unsigned seed) {
  switch (layout) {
    case Layout::contiguous:
      return random_tensor({b, r, c}, dtype, seed);
    case Layout::transposed: {  // stored [B, C, R]: a column-major matrix per batch
      Tensor base = random_tensor({b, c, r}, dtype, seed);
      return raw::as_strided(base, {b, r, c}, {r * c, 1, r}, 0);
    }
    case Layout::sliced: {  // rows of a wider matrix, starting at column 2: leading dim C + 5
      Tensor base = random_tensor({b, r, c + 5}, dtype, seed);
      return raw::as_strided(base, {b, r, c}, {r * (c + 5), c + 5, 1}, 2);
    }
    case Layout::broadcast: {  // one matrix for every batch: batch stride 0
      Tensor base = random_tensor({1, r, c}, dtype, seed);
      return raw::as_strided(base, {b, r, c}, {0, c, 1}, 0);
    }
    case Layout::permuted: {  // stored [R, B, C], as after a transpose of the first two dims
      Tensor base = random_tensor({r, b, c}, dtype, seed);
      return raw::as_strided(base, {b, r, c}, {c, b * c, 1}, 0);
    }
    case Layout::strided: {  // every other column: no GEMM reads this, it must be copied
      Tensor base = random_tensor({b, r, 2 * c}, dtype, seed);
      return raw::as_strided(base, {b, r, c}, {r * 2 * c, 2 * c, 2}, 0);
    }
  }
  return {};
}

// The exact products, summed in double by the reference backend.
std::vector<double> matmul_reference(const Tensor& a, const Tensor& b) {
  Tensor out = empty_of({std::max(a.size(0), b.size(0)), a.size(1), b.size(2)}, DType::float64);
  ref().matmul(widened(a), widened(b), out);
  return values(out);
}

void check_matmul(const Tensor& a, const Tensor& b) {
  Tensor out = empty_of({a.size(0), a.size(1), b.size(2)}, a.dtype());
  cpu().matmul(a, b, out);
  check_close(values(out), matmul_reference(a, b), tolerance(a.dtype()));
}

TEST_CASE("matmul: every layout of a and b, odd sizes, float32 and float64") {
  const Layout layouts[] = {Layout::contiguous, Layout::transposed, Layout::sliced,
                            Layout::broadcast,  Layout::permuted,   Layout::strided};
  struct Size {
    std::int64_t b, m, k, n;
  };
  // The first sizes go to cblas_sgemm in float32 (a batch of one, small); the others to oneDNN,
  // or with a transposed a to a cblas loop; the last two have a tall a and a narrow b.
  const Size sizes[] = {{1, 1, 1, 1},  {1, 3, 17, 5},  {3, 17, 65, 3},  {2, 65, 17, 66},
                        {2, 1, 3, 65}, {2, 70, 33, 8}, {1, 300, 70, 16}};
  for (DType dtype : {DType::float32, DType::float64}) {
    for (const Size& s : sizes) {
      for (Layout la : layouts) {
        for (Layout lb : layouts) {
          CAPTURE(dtype);
          CAPTURE(s.b);
          CAPTURE(s.m);
          CAPTURE(s.k);
          CAPTURE(s.n);
          CAPTURE(layout_name(la));
          CAPTURE(layout_name(lb));
          check_matmul(make_operand(la, s.b, s.m, s.k, dtype, 1),
                       make_operand(lb, s.b, s.k, s.n, dtype, 2));
        }
      }
    }
  }
}

TEST_CASE("matmul: large float32 products on oneDNN, single and batched") {
  // Above the small-product threshold, with transposes as attention uses them (Q K^T, P V).
  check_matmul(make_operand(Layout::contiguous, 1, 70, 80, DType::float32, 3),
               make_operand(Layout::transposed, 1, 80, 90, DType::float32, 4));
  check_matmul(make_operand(Layout::permuted, 4, 33, 16, DType::float32, 5),
               make_operand(Layout::transposed, 4, 16, 33, DType::float32, 6));
}

TEST_CASE("matmul: a weight gradient's product in the swapped orientation") {
  // A transposed a, K >= 4096 and N >= 2 M: on AVX-512 computed as out^T = b^T a and transposed
  // into out (matmul.cpp, swap_orientation); elsewhere directly. Into a contiguous out and into
  // rows of a wider matrix.
  for (Layout lb : {Layout::contiguous, Layout::sliced}) {
    CAPTURE(layout_name(lb));
    const Tensor a = make_operand(Layout::transposed, 1, 19, 4100, DType::float32, 7);
    const Tensor b = make_operand(lb, 1, 4100, 45, DType::float32, 8);
    check_matmul(a, b);
    const Tensor wide = empty_of({1, 19, 50}, DType::float32);
    cpu().fill(wide, 7.0);
    const Tensor out = raw::as_strided(wide, {1, 19, 45}, {19 * 50, 50, 1}, 3);
    cpu().matmul(a, b, out);
    const std::vector<double> all = values(wide);
    std::vector<double> got;
    for (std::int64_t i = 0; i < 19; ++i) {
      for (std::int64_t j = 0; j < 50; ++j) {
        const double v = all[static_cast<std::size_t>(i * 50 + j)];
        if (j >= 3 && j < 48) {
          got.push_back(v);
        } else {
          CHECK(v == 7.0);  // outside the view: untouched
        }
      }
    }
    check_close(got, matmul_reference(a, b), tolerance(DType::float32));
  }
}

TEST_CASE("matmul: weight gradients g^T x in parts of the sum, on one thread and on the team") {
  // A transposed a of one matrix with M <= 512: on AVX-512 without AMX the own kernel (matmul.cpp,
  // matmul_tn), the sum over K in parts of about 4096 rows (K = 9000: 2 parts, 13000: 3) added
  // in order, columns and rows split between threads; elsewhere oneDNN or OpenBLAS. Every size
  // against the float64 reference (a tolerance growing with K); on the own kernel, the bits the
  // same on one thread as on the team; a's leading dimension past M, b sliced, and out rows of a
  // wider matrix.
  struct Size {
    std::int64_t m, k, n;
  };
  const Size sizes[] = {
      {256, 1024, 256}, {7, 9000, 64}, {100, 13000, 5}, {512, 700, 130}, {13, 2100, 1000}};
  unsigned seed = 40;
  for (const Size& s : sizes) {
    CAPTURE(s.m);
    CAPTURE(s.k);
    CAPTURE(s.n);
    const Tensor a_base = random_tensor({1, s.k, s.m + 3}, DType::float32, ++seed);
    const Tensor a = raw::as_strided(a_base, {1, s.m, s.k}, {s.k * (s.m + 3), 1, s.m + 3}, 1);
    const Tensor b = make_operand(Layout::sliced, 1, s.k, s.n, DType::float32, ++seed);
    const Tensor wide = empty_of({1, s.m, s.n + 4}, DType::float32);
    cpu().fill(wide, 7.0);
    const Tensor out = raw::as_strided(wide, {1, s.m, s.n}, {s.m * (s.n + 4), s.n + 4, 1}, 2);
    cpu().matmul(a, b, out);
    const std::vector<double> all = values(wide);
    std::vector<double> got;
    for (std::int64_t i = 0; i < s.m; ++i) {
      for (std::int64_t j = 0; j < s.n + 4; ++j) {
        const double v = all[static_cast<std::size_t>(i * (s.n + 4) + j)];
        if (j >= 2 && j < s.n + 2) {
          got.push_back(v);
        } else if (v != 7.0) {
          FAIL_CHECK("row " << i << ", column " << j << " outside the view: " << v);
        }
      }
    }
    // Sums of K products of values in [-1, 1], rounded at every step: an error of a few float32
    // ulps of the partial sums (about sqrt(K)) per element.
    check_close(got, matmul_reference(a, b), 1e-6 * std::sqrt(static_cast<double>(s.k)));
    // Other libraries' products need not give the same bits on another number of threads.
    if (!cpu::avx512::available() || cpu::dnnl_runs_amx()) continue;
    const Tensor alone = empty_of({1, s.m, s.n}, DType::float32);
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    cpu().matmul(a, b, alone);
    omp_set_num_threads(before);
    const Tensor team = empty_of({1, s.m, s.n}, DType::float32);
    cpu().matmul(a, b, team);
    CHECK(values(alone) == values(team));
  }
}

TEST_CASE("matmul: both operands broadcast fill every batch") {
  for (DType dtype : {DType::float32, DType::float64}) {
    check_matmul(make_operand(Layout::broadcast, 3, 5, 4, dtype, 7),
                 make_operand(Layout::broadcast, 3, 4, 6, dtype, 8));
    check_matmul(make_operand(Layout::broadcast, 2, 70, 70, dtype, 7),
                 make_operand(Layout::broadcast, 2, 70, 70, dtype, 8));
  }
}

TEST_CASE("matmul: empty dimensions") {
  for (DType dtype : {DType::float32, DType::float64}) {
    // K = 0: an empty sum, every element 0 (out starts as garbage).
    Tensor out = full({2, 3, 4}, 7.0, {.dtype = dtype});
    cpu().matmul(empty_of({2, 3, 0}, dtype), empty_of({2, 0, 4}, dtype), out);
    for (double v : values(out)) CHECK(v == 0.0);
    // M = 0 or B = 0: nothing to compute, nothing to crash on.
    cpu().matmul(empty_of({2, 0, 3}, dtype), empty_of({2, 3, 4}, dtype),
                 empty_of({2, 0, 4}, dtype));
    cpu().matmul(empty_of({0, 2, 3}, dtype), empty_of({0, 3, 4}, dtype),
                 empty_of({0, 2, 4}, dtype));
  }
}

TEST_CASE("matmul: bad input throws Error") {
  const Tensor a = random_tensor({2, 3, 4}, DType::float32, 1);
  const Tensor b = random_tensor({2, 4, 5}, DType::float32, 2);
  CHECK_THROWS_AS(cpu().matmul(a, random_tensor({2, 3, 5}, DType::float32, 3),
                               empty_of({2, 3, 5}, DType::float32)),
                  Error);
  CHECK_THROWS_AS(cpu().matmul(a, b, empty_of({2, 3, 6}, DType::float32)), Error);
  CHECK_THROWS_AS(cpu().matmul(a, b, empty_of({2, 3, 5}, DType::float64)), Error);
  CHECK_THROWS_AS(cpu().matmul(a, random_tensor({2, 4, 5}, DType::float64, 2),
                               empty_of({2, 3, 5}, DType::float32)),
                  Error);
  CHECK_THROWS_AS(
      cpu().matmul(from<std::int64_t>({1}, {1, 1, 1}), from<std::int64_t>({1}, {1, 1, 1}),
                   empty(Shape{1, 1, 1}, {.dtype = DType::int64})),
      Error);
  CHECK_THROWS_AS(
      cpu().matmul(raw::as_strided(a, {3, 4}, {4, 1}, 0), b, empty_of({2, 3, 5}, DType::float32)),
      Error);
  // An out that no GEMM writes: column-major matrices, batches that overlap, a broadcast batch.
  // (Row-major matrices at a wider row stride or interleaved batches are accepted.)
  Tensor wide = empty_of({2, 3, 10}, DType::float32);
  CHECK_THROWS_WITH_AS(cpu().matmul(a, b, raw::as_strided(wide, {2, 3, 5}, {15, 1, 3}, 0)),
                       doctest::Contains("row-major"), Error);
  CHECK_THROWS_AS(cpu().matmul(a, b, raw::as_strided(wide, {2, 3, 5}, {5, 5, 1}, 0)), Error);
  CHECK_THROWS_AS(cpu().matmul(a, b, raw::as_strided(wide, {2, 3, 5}, {0, 5, 1}, 0)), Error);
  CHECK_NOTHROW(cpu().matmul(a, b, raw::as_strided(wide, {2, 3, 5}, {30, 10, 1}, 0)));
  CHECK_THROWS_AS(cpu().matmul(a, b, Tensor()), Error);
}

TEST_CASE("gemm_operand: what is passed as is and what is copied") {
  using cpu::gemm_operand;
  auto row = gemm_operand({2, 3, 4}, {12, 4, 1});
  CHECK(!row.copy);
  CHECK(!row.transposed);
  CHECK(row.ld == 4);
  CHECK(row.batch_stride == 12);
  auto col = gemm_operand({2, 3, 4}, {12, 1, 3});
  CHECK(!col.copy);
  CHECK(col.transposed);
  CHECK(col.ld == 3);
  auto sliced = gemm_operand({2, 3, 4}, {30, 10, 1});
  CHECK(!sliced.copy);
  CHECK(sliced.ld == 10);
  auto bcast = gemm_operand({5, 3, 4}, {0, 4, 1});
  CHECK(!bcast.copy);
  CHECK(bcast.broadcast);
  CHECK(gemm_operand({2, 3, 4}, {24, 8, 2}).copy);  // no unit stride
  CHECK(gemm_operand({2, 3, 4}, {12, 2, 1}).copy);  // rows overlap (ld < cols)
  CHECK(gemm_operand({2, 3, 4}, {4, 4, 1}).copy);   // batches overlap
  // Sizes of 1 make a stride irrelevant: a row vector taken from a column-major matrix.
  auto vec = gemm_operand({1, 1, 4}, {4, 7, 9});
  CHECK(!vec.copy);
  CHECK(vec.ld >= 1);
}

TEST_CASE("gemm_output: where a product may write") {
  const Tensor buffer = empty_of({4, 7, 3, 5}, DType::float32);  // [B, n, H, d]
  // Contiguous: ld N, batch stride M N.
  auto plain = gemm_output(empty_of({3, 7, 5}, DType::float32));
  CHECK(plain.ld == 5);
  CHECK(plain.batch_stride == 35);
  // One b of the [B, H, n, d] view: batches interleaved in the rows (ld H d, batch stride d).
  auto heads = gemm_output(raw::as_strided(buffer, {3, 7, 5}, {5, 15, 1}, 105));
  CHECK(heads.ld == 15);
  CHECK(heads.batch_stride == 5);
  // A single matrix with padded rows.
  auto one = gemm_output(raw::as_strided(buffer, {1, 7, 5}, {0, 15, 1}, 0));
  CHECK(one.ld == 15);
  // Column-major, overlapping batches and a broadcast batch are refused.
  CHECK_THROWS_AS(gemm_output(raw::as_strided(buffer, {3, 5, 7}, {5, 1, 15}, 0)), Error);
  CHECK_THROWS_AS(gemm_output(raw::as_strided(buffer, {3, 7, 5}, {1, 15, 1}, 0)), Error);
  CHECK_THROWS_AS(gemm_output(raw::as_strided(buffer, {3, 7, 5}, {0, 15, 1}, 0)), Error);
}

TEST_CASE("dnnl primitive cache: a repeated shape is a hit, the size stays bounded") {
  const Tensor a = random_tensor({2, 70, 71}, DType::float32, 1);
  const Tensor b = random_tensor({2, 71, 72}, DType::float32, 2);
  Tensor out = empty_of({2, 70, 72}, DType::float32);
  cpu().matmul(a, b, out);
  const auto before = cpu::dnnl_cache_stats();
  cpu().matmul(a, b, out);
  const auto after = cpu::dnnl_cache_stats();
  CHECK(after.hits == before.hits + 1);
  CHECK(after.misses == before.misses);
  CHECK(after.size <= after.capacity);
  CHECK(after.capacity == cpu::dnnl_cache_capacity());
}

// ============================== softmax ==============================

// softmax or log-softmax of x, and its backward from that y and the gradient g, in double.
std::vector<double> softmax_reference(const Tensor& x, bool log) {
  Tensor y = empty_of(x.shape(), DType::float64);
  ref().softmax(widened(x), log, y);
  return values(y);
}
std::vector<double> softmax_backward_reference(const Tensor& x, const Tensor& g, bool log) {
  Tensor y = empty_of(x.shape(), DType::float64), dx = empty_of(x.shape(), DType::float64);
  ref().softmax(widened(x), log, y);
  ref().softmax_backward(y, widened(g), log, dx);
  return values(dx);
}

TEST_CASE("softmax and log_softmax: forward and backward against the reference") {
  const Shape shapes[] = {{64, 10}, {3, 1}, {5, 1000}, {129, 65}, {40, 1024}};
  for (DType dtype : {DType::float32, DType::float64}) {
    for (const Shape& shape : shapes) {
      for (bool log : {false, true}) {
        CAPTURE(dtype);
        CAPTURE(shape_str(shape));
        CAPTURE(log);
        // Logits in [-30, 90]: exp(90) overflows float unless the row max is subtracted first.
        const Tensor x = make(random_values(shape_numel(shape), 11, -30, 90), shape, dtype);
        Tensor y = empty_of(shape, dtype);
        cpu().softmax(x, log, y);
        const std::vector<double> want = softmax_reference(x, log);
        check_close(values(y), want, dtype == DType::float64 ? 1e-12 : 1e-5);

        // dx from the reference y and a random upstream gradient.
        const Tensor g = random_tensor(shape, dtype, 12);
        Tensor dx = empty_of(shape, dtype);
        cpu().softmax_backward(y, g, log, dx);
        const std::vector<double> dwant = softmax_backward_reference(x, g, log);
        check_close(values(dx), dwant, dtype == DType::float64 ? 1e-12 : 2e-5);
      }
    }
  }
}

TEST_CASE("softmax: masked (-inf) logits get exactly zero probability") {
  for (DType dtype : {DType::float32, DType::float64}) {
    const double inf = std::numeric_limits<double>::infinity();
    const Tensor x = make({1.0, -inf, 2.0, -inf, -100.0, 0.5, 0.5, 0.5}, {2, 4}, dtype);
    Tensor y = empty_of({2, 4}, dtype);
    cpu().softmax(x, false, y);
    const auto v = values(y);
    CHECK(v[1] == 0.0);
    CHECK(v[3] == 0.0);
    CHECK(v[0] + v[2] == doctest::Approx(1.0));
    CHECK(v[4] < 1e-40);  // exp(-100.5) underflows float, which must give 0, not garbage
    CHECK(v[5] == doctest::Approx(1.0 / 3));
    cpu().softmax(x, true, y);
    CHECK(std::isinf(values(y)[1]));
  }
}

TEST_CASE("softmax: bad input throws Error") {
  const Tensor x = random_tensor({4, 6}, DType::float32, 1);
  CHECK_THROWS_AS(cpu().softmax(x, false, empty_of({4, 5}, DType::float32)), Error);
  CHECK_THROWS_AS(cpu().softmax(x, false, empty_of({4, 6}, DType::float64)), Error);
  CHECK_THROWS_AS(
      cpu().softmax(raw::as_strided(x, {6, 4}, {1, 6}, 0), false, empty_of({6, 4}, DType::float32)),
      Error);  // a transposed view is not a contiguous [R, C]
  CHECK_THROWS_AS(cpu().softmax(random_tensor({2, 3, 4}, DType::float32, 1), false,
                                empty_of({2, 3, 4}, DType::float32)),
                  Error);
  CHECK_THROWS_AS(cpu().softmax_backward(x, random_tensor({4, 5}, DType::float32, 2), true,
                                         empty_of({4, 6}, DType::float32)),
                  Error);
}

// ============================== layer_norm ==============================

struct LayerNormReference {
  std::vector<double> y, mean, rstd, dx, dw, db;
};

// The forward in double, then the backward from its (double) statistics.
LayerNormReference layer_norm_reference(const Tensor& x, const Tensor& w, const Tensor& b,
                                        const Tensor& g, double eps) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const Tensor x64 = widened(x), w64 = widened(w);
  Tensor y = empty_of(x.shape(), DType::float64), mean = empty_of({rows}, DType::float64),
         rstd = empty_of({rows}, DType::float64);
  ref().layer_norm(x64, w64, widened(b), eps, y, mean, rstd);
  Tensor dx = empty_of(x.shape(), DType::float64), dw = empty_of({cols}, DType::float64),
         db = empty_of({cols}, DType::float64);
  ref().layer_norm_backward(widened(g), x64, w64, mean, rstd, dx, dw, db);
  return {values(y), values(mean), values(rstd), values(dx), values(dw), values(db)};
}

TEST_CASE("layer_norm: forward and backward, with and without weight and bias") {
  const Shape shapes[] = {{7, 33}, {1, 1}, {64, 768}, {300, 5}};
  for (DType dtype : {DType::float32, DType::float64}) {
    for (const Shape& shape : shapes) {
      for (int affine = 0; affine < 4; ++affine) {
        const bool has_w = (affine & 1) != 0, has_b = (affine & 2) != 0;
        CAPTURE(dtype);
        CAPTURE(shape_str(shape));
        CAPTURE(has_w);
        CAPTURE(has_b);
        const std::int64_t rows = shape[0], cols = shape[1];
        // A mean far from 0 relative to the spread: sum(x^2) - C mean^2 would cancel badly.
        const Tensor x = make(random_values(rows * cols, 21, 99.0, 101.0), shape, dtype);
        const Tensor w = has_w ? random_tensor({cols}, dtype, 22) : Tensor();
        const Tensor b = has_b ? random_tensor({cols}, dtype, 23) : Tensor();
        const Tensor g = random_tensor(shape, dtype, 24);
        const double eps = 1e-5;
        Tensor y = empty_of(shape, dtype), mean = empty_of({rows}, dtype),
               rstd = empty_of({rows}, dtype);
        cpu().layer_norm(x, w, b, eps, y, mean, rstd);
        const LayerNormReference ref = layer_norm_reference(x, w, b, g, eps);
        // float32 loses about 7 digits of the offset 100 before normalizing: 1e-4 relative.
        const double tol = dtype == DType::float64 ? 1e-10 : 2e-4;
        check_close(values(y), ref.y, tol);
        check_close(values(mean), ref.mean, tol);
        check_close(values(rstd), ref.rstd, tol);

        Tensor dx = empty_of(shape, dtype);
        Tensor dw = has_w ? empty_of({cols}, dtype) : Tensor();
        Tensor db = has_b ? empty_of({cols}, dtype) : Tensor();
        cpu().layer_norm_backward(g, x, w, mean, rstd, dx, dw, db);
        check_close(values(dx), ref.dx, tol);
        if (has_w) check_close(values(dw), ref.dw, tol);
        if (has_b) check_close(values(db), ref.db, tol);
      }
    }
  }
}

TEST_CASE("layer_norm_backward: only the wanted gradients are written") {
  for (DType dtype : {DType::float32, DType::float64}) {
    const Shape shape = {300, 129};  // large enough to split the rows over threads
    const Tensor x = random_tensor(shape, dtype, 31), w = random_tensor({129}, dtype, 32);
    const Tensor g = random_tensor(shape, dtype, 33);
    Tensor y = empty_of(shape, dtype), mean = empty_of({300}, dtype), rstd = empty_of({300}, dtype);
    cpu().layer_norm(x, w, Tensor(), 1e-5, y, mean, rstd);
    const LayerNormReference ref = layer_norm_reference(x, w, Tensor(), g, 1e-5);
    const double tol = dtype == DType::float64 ? 1e-10 : 1e-4;
    // Weight and bias gradients without grad_x.
    Tensor dw = empty_of({129}, dtype), db = empty_of({129}, dtype);
    cpu().layer_norm_backward(g, x, w, mean, rstd, Tensor(), dw, db);
    check_close(values(dw), ref.dw, tol);
    check_close(values(db), ref.db, tol);
    // grad_x alone.
    Tensor dx = empty_of(shape, dtype);
    cpu().layer_norm_backward(g, x, w, mean, rstd, dx, Tensor(), Tensor());
    check_close(values(dx), ref.dx, tol);
  }
}

TEST_CASE("layer_norm: bad input throws Error") {
  const Tensor x = random_tensor({4, 6}, DType::float32, 1);
  Tensor y = empty_of({4, 6}, DType::float32), m = empty_of({4}, DType::float32),
         r = empty_of({4}, DType::float32);
  CHECK_THROWS_AS(
      cpu().layer_norm(x, random_tensor({5}, DType::float32, 2), Tensor(), 1e-5, y, m, r), Error);
  CHECK_THROWS_AS(
      cpu().layer_norm(x, Tensor(), Tensor(), 1e-5, y, empty_of({3}, DType::float32), r), Error);
  CHECK_THROWS_AS(cpu().layer_norm(raw::as_strided(x, {6, 4}, {1, 6}, 0), Tensor(), Tensor(), 1e-5,
                                   empty_of({6, 4}, DType::float32), empty_of({6}, DType::float32),
                                   empty_of({6}, DType::float32)),
                  Error);
  CHECK_THROWS_AS(cpu().layer_norm(x, Tensor(), Tensor(), -1.0, y, m, r), Error);
  CHECK_THROWS_AS(cpu().layer_norm_backward(random_tensor({4, 5}, DType::float32, 3), x, Tensor(),
                                            m, r, y, Tensor(), Tensor()),
                  Error);
}

// ============================== conv1d ==============================

struct ConvCase {
  std::int64_t batch, c_in, length, c_out, kernel, stride, padding;
  std::int64_t out_length() const { return (length + 2 * padding - kernel) / stride + 1; }
};

TEST_CASE("conv1d: forward and backward with stride and padding") {
  const ConvCase cases[] = {{2, 3, 17, 4, 3, 1, 0},
                            {2, 3, 17, 4, 3, 2, 1},
                            {1, 5, 9, 2, 4, 3, 2},
                            {3, 1, 8, 1, 1, 1, 0},
                            {2, 4, 16, 8, 5, 1, 2}};
  for (DType dtype : {DType::float32, DType::float64}) {
    for (const ConvCase& s : cases) {
      for (bool with_bias : {false, true}) {
        CAPTURE(dtype);
        CAPTURE(s.length);
        CAPTURE(s.kernel);
        CAPTURE(s.stride);
        CAPTURE(s.padding);
        CAPTURE(with_bias);
        const std::int64_t lo = s.out_length();
        const Tensor x = random_tensor({s.batch, s.c_in, s.length}, dtype, 41);
        const Tensor w = random_tensor({s.c_out, s.c_in, s.kernel}, dtype, 42);
        const Tensor bias = with_bias ? random_tensor({s.c_out}, dtype, 43) : Tensor();
        const Tensor g = random_tensor({s.batch, s.c_out, lo}, dtype, 44);
        Tensor out = empty_of({s.batch, s.c_out, lo}, dtype);
        cpu().conv1d(x, w, bias, s.stride, s.padding, out);

        // The reference in double: out, and every gradient.
        const Tensor x64 = widened(x), w64 = widened(w);
        Tensor ref_out = empty_of(out.shape(), DType::float64);
        ref().conv1d(x64, w64, widened(bias), s.stride, s.padding, ref_out);
        Tensor ref_gx = empty_of(x.shape(), DType::float64),
               ref_gw = empty_of(w.shape(), DType::float64),
               ref_gb = empty_of({s.c_out}, DType::float64);
        ref().conv1d_backward(widened(g), x64, w64, s.stride, s.padding, ref_gx, ref_gw, ref_gb);
        const std::vector<double> want = values(ref_out), gx = values(ref_gx), gw = values(ref_gw),
                                  gb = values(ref_gb);
        const double tol = tolerance(dtype);
        check_close(values(out), want, tol);

        Tensor dx = empty_of(x.shape(), dtype), dw = empty_of(w.shape(), dtype),
               db = empty_of({s.c_out}, dtype);
        cpu().conv1d_backward(g, x, w, s.stride, s.padding, dx, dw, with_bias ? db : Tensor());
        check_close(values(dx), gx, tol);
        check_close(values(dw), gw, tol);
        if (with_bias) check_close(values(db), gb, tol);
        // Each gradient alone.
        Tensor dx2 = empty_of(x.shape(), dtype), dw2 = empty_of(w.shape(), dtype),
               db2 = empty_of({s.c_out}, dtype);
        cpu().conv1d_backward(g, x, w, s.stride, s.padding, dx2, Tensor(), Tensor());
        check_close(values(dx2), gx, tol);
        cpu().conv1d_backward(g, x, w, s.stride, s.padding, Tensor(), dw2, Tensor());
        check_close(values(dw2), gw, tol);
        cpu().conv1d_backward(g, x, w, s.stride, s.padding, Tensor(), Tensor(), db2);
        check_close(values(db2), gb, tol);
      }
    }
  }
}

TEST_CASE("conv1d: bad input throws Error") {
  const Tensor x = random_tensor({2, 3, 10}, DType::float32, 1);
  const Tensor w = random_tensor({4, 3, 3}, DType::float32, 2);
  Tensor out = empty_of({2, 4, 8}, DType::float32);
  CHECK_THROWS_AS(cpu().conv1d(x, random_tensor({4, 2, 3}, DType::float32, 3), Tensor(), 1, 0, out),
                  Error);                                            // channel mismatch
  CHECK_THROWS_AS(cpu().conv1d(x, w, Tensor(), 0, 0, out), Error);   // stride 0
  CHECK_THROWS_AS(cpu().conv1d(x, w, Tensor(), 1, -1, out), Error);  // negative padding
  CHECK_THROWS_AS(cpu().conv1d(x, w, Tensor(), 1, 0, empty_of({2, 4, 9}, DType::float32)),
                  Error);  // wrong Lout
  CHECK_THROWS_AS(cpu().conv1d(x, random_tensor({4, 3, 11}, DType::float32, 4), Tensor(), 1, 0,
                               empty_of({2, 4, 0}, DType::float32)),
                  Error);  // kernel longer than the input
  CHECK_THROWS_AS(cpu().conv1d(x, w, random_tensor({5}, DType::float32, 5), 1, 0, out), Error);
  CHECK_THROWS_AS(cpu().conv1d_backward(random_tensor({2, 4, 7}, DType::float32, 6), x, w, 1, 0,
                                        empty_of(x.shape(), DType::float32), Tensor(), Tensor()),
                  Error);
}

// ============================== pool1d ==============================

TEST_CASE("pool1d: average and max, forward and backward") {
  struct Case {
    std::int64_t kernel, stride;
  };
  const Case cases[] = {{2, 2}, {3, 1}, {4, 3}, {1, 1}, {17, 1}};
  for (DType dtype : {DType::float32, DType::float64}) {
    for (const Case& pc : cases) {
      for (PoolKind kind : {PoolKind::average, PoolKind::max}) {
        CAPTURE(dtype);
        CAPTURE(pc.kernel);
        CAPTURE(pc.stride);
        CAPTURE(kind == PoolKind::max);
        const std::int64_t batch = 2, ch = 3, len = 17, lo = (len - pc.kernel) / pc.stride + 1;
        const Tensor x = random_tensor({batch, ch, len}, dtype, 51);
        const Tensor g = random_tensor({batch, ch, lo}, dtype, 52);
        Tensor out = empty_of({batch, ch, lo}, dtype), gx = empty_of(x.shape(), dtype);
        cpu().pool1d(kind, x, pc.kernel, pc.stride, out);
        cpu().pool1d_backward(kind, g, x, pc.kernel, pc.stride, gx);
        Tensor ref_out = empty_of(out.shape(), DType::float64),
               ref_gx = empty_of(x.shape(), DType::float64);
        ref().pool1d(kind, widened(x), pc.kernel, pc.stride, ref_out);
        ref().pool1d_backward(kind, widened(g), widened(x), pc.kernel, pc.stride, ref_gx);
        const std::vector<double> want = values(ref_out), gwant = values(ref_gx);
        check_close(values(out), want, tolerance(dtype));
        check_close(values(gx), gwant, tolerance(dtype));
      }
    }
  }
}

TEST_CASE("max_pool1d: the first of tied maxima takes the gradient") {
  for (DType dtype : {DType::float32, DType::float64}) {
    const Tensor x = make({1, 3, 3, 0, 2, 2}, {1, 1, 6}, dtype);
    const Tensor g = make({10, 20}, {1, 1, 2}, dtype);
    Tensor out = empty_of({1, 1, 2}, dtype), gx = empty_of({1, 1, 6}, dtype);
    cpu().pool1d(PoolKind::max, x, 3, 3, out);
    CHECK(values(out) == std::vector<double>{3, 2});
    cpu().pool1d_backward(PoolKind::max, g, x, 3, 3, gx);
    CHECK(values(gx) == std::vector<double>{0, 10, 0, 0, 20, 0});
  }
}

TEST_CASE("pool1d: bad input throws Error") {
  const Tensor x = random_tensor({2, 3, 10}, DType::float32, 1);
  CHECK_THROWS_AS(cpu().pool1d(PoolKind::max, x, 11, 1, empty_of({2, 3, 0}, DType::float32)),
                  Error);
  CHECK_THROWS_AS(cpu().pool1d(PoolKind::average, x, 2, 0, empty_of({2, 3, 5}, DType::float32)),
                  Error);
  CHECK_THROWS_AS(cpu().pool1d(PoolKind::average, x, 2, 2, empty_of({2, 3, 4}, DType::float32)),
                  Error);
  CHECK_THROWS_AS(cpu().pool1d_backward(PoolKind::max, empty_of({2, 3, 5}, DType::float64), x, 2, 2,
                                        empty_of({2, 3, 10}, DType::float32)),
                  Error);
}

}  // namespace
