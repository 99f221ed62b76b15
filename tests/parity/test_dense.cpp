// Parity of the dense ops against the reference backend: matmul with every operand layout and
// odd sizes, float32 in each math mode, float64 and bfloat16; conv1d and pool1d
// (cuDNN), forward and backward, odd lengths, strides and paddings, each gradient optional; and
// the fused Adam/AdamW step over several steps. A bfloat16 case compares with the reference's
// float32 result on the same (bfloat16-rounded) inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "parity/parity.h"

namespace {

using namespace tinyformer;
using namespace tinyformer::parity;

TF_PARITY_COVERS(matmul);
TF_PARITY_COVERS(conv1d);
TF_PARITY_COVERS(conv1d_backward);
TF_PARITY_COVERS(pool1d);
TF_PARITY_COVERS(pool1d_backward);
TF_PARITY_COVERS(adamw_step);
TF_PARITY_COVERS(sum_squares);

struct Tolerance {
  double rtol, atol;
};

// A target tensor's values as a float32 host tensor (for bfloat16 results).
Tensor host_float32(const Tensor& t) {
  return raw::to_dtype(raw::to_device(t, Device::cpu()), DType::float32);
}

// The reference's inputs of a case: float32 copies of bfloat16 values, the tensor itself otherwise.
Tensor ref_input(const Tensor& t) {
  return t.defined() && t.dtype() == DType::bfloat16 ? raw::to_dtype(t, DType::float32) : t;
}

// A reference output for a case in `dtype` (float32 where the target computes bfloat16).
Tensor ref_output(const Shape& shape, DType dtype) {
  return full(shape, std::nan(""), {.dtype = dtype == DType::bfloat16 ? DType::float32 : dtype});
}

void compare(const Tensor& got, const Tensor& expected, const std::string& what, Tolerance tol) {
  if (got.dtype() == DType::bfloat16) {
    check_close(host_float32(got), expected, what, tol.rtol, tol.atol);
  } else {
    check_close(got, expected, what, tol.rtol, tol.atol);
  }
}

std::string dtype_str(DType dtype) {
  return dtype_name(dtype);
}

// ============================== matmul ==============================

// How a [B, R, C] operand lies in memory.
enum class Operand { contiguous, transposed, rows, every_other, broadcast, permuted };
constexpr Operand kOperands[] = {Operand::contiguous,  Operand::transposed, Operand::rows,
                                 Operand::every_other, Operand::broadcast,  Operand::permuted};

const char* operand_name(Operand o) {
  switch (o) {
    case Operand::contiguous:
      return "contiguous";
    case Operand::transposed:
      return "transposed";
    case Operand::rows:
      return "rows of a wider matrix";
    case Operand::every_other:
      return "every other column";
    case Operand::broadcast:
      return "broadcast batch";
    case Operand::permuted:
      return "permuted";
  }
  return "?";
}

// A [b, r, c] operand laid out as `o`, with the same values and strides on both devices.
Pair operand(Operand o, std::int64_t b, std::int64_t r, std::int64_t c, DType dtype,
             std::uint64_t seed) {
  switch (o) {
    case Operand::contiguous:
      return make_pair({b, r, c}, dtype, Layout::contiguous, seed);
    case Operand::transposed:  // column-major per batch: cuBLAS's transpose flag
      return make_pair({b, r, c}, dtype, Layout::transposed, seed);
    case Operand::rows: {  // a leading dimension of c + 5, starting at column 2
      const Pair wide = make_pair({b, r, c + 5}, dtype, Layout::contiguous, seed);
      return {wide.ref.narrow(2, 2, c), wide.dev.narrow(2, 2, c)};
    }
    case Operand::every_other:  // column stride 2: no GEMM reads it, it is packed first
      return make_pair({b, r, c}, dtype, Layout::sliced, seed);
    case Operand::broadcast:  // batch stride 0
      return make_pair({b, r, c}, dtype, Layout::broadcast, seed);
    case Operand::permuted: {  // stored [r, b, c], as after swapping the first two dims
      const Pair p = make_pair({r, b, c}, dtype, Layout::contiguous, seed);
      return {p.ref.transpose(0, 1), p.dev.transpose(0, 1)};
    }
  }
  return {};
}

void check_matmul(const Pair& a, const Pair& b, DType dtype, Tolerance tol,
                  const std::string& what) {
  const Shape out_shape = {std::max(a.ref.size(0), b.ref.size(0)), a.ref.size(1), b.ref.size(2)};
  const Pair out = make_output(out_shape, dtype);
  const Tensor expected = ref_output(out_shape, dtype);
  dev().matmul(a.dev, b.dev, out.dev);
  ref().matmul(ref_input(a.ref), ref_input(b.ref), expected);
  compare(out.dev, expected, what, tol);
}

struct MatmulShape {
  std::int64_t batch, m, k, n;
};
constexpr MatmulShape kMatmulShapes[] = {{1, 1, 1, 1},    {3, 7, 33, 1},   {2, 33, 7, 129},
                                         {1, 129, 33, 7}, {4, 7, 129, 33}, {2, 1, 7, 33}};

// float32 in exact mode: the target sums up to 129 float32 products (the reference in double).
constexpr Tolerance kMatmulF32{1e-5, 1e-5};

std::string matmul_what(Operand oa, Operand ob, const MatmulShape& s, DType dtype) {
  return "matmul " + dtype_str(dtype) + " [" + std::to_string(s.batch) + ", " +
         std::to_string(s.m) + ", " + std::to_string(s.k) + "] @ [" + std::to_string(s.k) + ", " +
         std::to_string(s.n) + "], a " + operand_name(oa) + ", b " + operand_name(ob);
}

}  // namespace

TEST_CASE("parity: matmul: every layout of a and b, odd sizes, float32") {
  if (!available()) return;
  std::uint64_t seed = 1;
  for (const MatmulShape& s : kMatmulShapes) {
    for (Operand oa : kOperands) {
      for (Operand ob : kOperands) {
        const Pair a = operand(oa, s.batch, s.m, s.k, DType::float32, seed++);
        const Pair b = operand(ob, s.batch, s.k, s.n, DType::float32, seed++);
        check_matmul(a, b, DType::float32, kMatmulF32, matmul_what(oa, ob, s, DType::float32));
      }
    }
  }
}

TEST_CASE("parity: matmul: float64 and bfloat16, each layout of a and of b") {
  if (!available()) return;
  std::uint64_t seed = 1000;
  for (DType dtype : supported({DType::float64, DType::bfloat16})) {
    // float64 at the harness's 1e-12; bfloat16 rounds only its output (the products of
    // bfloat16 values are exact in float32 and accumulate in float32).
    const Tolerance tol = dtype == DType::float64 ? Tolerance{1e-12, 1e-12} : Tolerance{1e-2, 1e-2};
    for (const MatmulShape& s : kMatmulShapes) {
      for (Operand o : kOperands) {
        const Pair a = operand(o, s.batch, s.m, s.k, dtype, seed++);
        const Pair a0 = operand(Operand::contiguous, s.batch, s.m, s.k, dtype, seed++);
        const Pair b = operand(o, s.batch, s.k, s.n, dtype, seed++);
        const Pair b0 = operand(Operand::contiguous, s.batch, s.k, s.n, dtype, seed++);
        check_matmul(a, b0, dtype, tol, matmul_what(o, Operand::contiguous, s, dtype));
        check_matmul(a0, b, dtype, tol, matmul_what(Operand::contiguous, o, s, dtype));
      }
    }
  }
}

TEST_CASE("parity: matmul: a batch of one against many, both broadcast, a large odd product") {
  if (!available()) return;
  for (DType dtype : floating_dtypes()) {
    const Tolerance tol = dtype == DType::float32   ? kMatmulF32
                          : dtype == DType::float64 ? Tolerance{1e-12, 1e-12}
                                                    : Tolerance{1e-2, 1e-2};
    INFO(dtype_str(dtype));
    // a: [1, M, K] with b: [5, K, N], and the reverse.
    check_matmul(make_pair({1, 7, 33}, dtype, Layout::contiguous, 1),
                 make_pair({5, 33, 9}, dtype, Layout::transposed, 2), dtype, tol,
                 "a batch of one @ a batch of five");
    check_matmul(make_pair({5, 7, 33}, dtype, Layout::contiguous, 3),
                 make_pair({1, 33, 9}, dtype, Layout::contiguous, 4), dtype, tol,
                 "a batch of five @ a batch of one");
    // Both operands broadcast: one product, copied into each of the 6 batches.
    check_matmul(make_pair({6, 7, 33}, dtype, Layout::broadcast, 5),
                 make_pair({6, 33, 9}, dtype, Layout::broadcast, 6), dtype, tol, "both broadcast");
  }
  // A product well past one tile in every dim, none a multiple of a tile.
  const double k = 67.0;
  check_matmul(make_pair({2, 1031, 67}, DType::float32, Layout::contiguous, 7),
               make_pair({2, 67, 257}, DType::float32, Layout::transposed, 8), DType::float32,
               {1e-5, 1e-6 * k}, "[2, 1031, 67] @ [2, 67, 257]");
}

namespace {

// How a [B, M, N] out lies in memory: its own rows padded, or interleaved with the other
// batches (a [B, H, n, d] view of a [B, n, H, d] buffer: batch stride N, row stride B * N).
enum class Out { contiguous, padded_rows, interleaved };

const char* out_name(Out o) {
  switch (o) {
    case Out::contiguous:
      return "contiguous out";
    case Out::padded_rows:
      return "out with rows of N + 3";
    case Out::interleaved:
      return "out interleaved with its batches";
  }
  return "?";
}

// A NaN-filled strided out on the target device, in the buffer it is a view of.
struct StridedOut {
  Tensor buffer, view;
};
StridedOut strided_out(Out o, std::int64_t b, std::int64_t m, std::int64_t n, DType dtype) {
  const Shape buffer_shape = o == Out::contiguous    ? Shape{b, m, n}
                             : o == Out::padded_rows ? Shape{b, m, n + 3}
                                                     : Shape{m, b, n};
  const Tensor buffer = make_output(buffer_shape, dtype).dev;
  const Shape strides = o == Out::contiguous    ? Shape{m * n, n, 1}
                        : o == Out::padded_rows ? Shape{m * (n + 3), n + 3, 1}
                                                : Shape{n, b * n, 1};
  return {buffer, raw::as_strided(buffer, {b, m, n}, strides, buffer.offset())};
}

}  // namespace

TEST_CASE("parity: matmul: strided outs, with operands of each layout, every dtype") {
  if (!available()) return;
  std::uint64_t seed = 5000;
  for (DType dtype : floating_dtypes()) {
    const Tolerance tol = dtype == DType::float32   ? kMatmulF32
                          : dtype == DType::float64 ? Tolerance{1e-12, 1e-12}
                                                    : Tolerance{1e-2, 1e-2};
    for (const MatmulShape& s : kMatmulShapes) {
      for (Out o : {Out::padded_rows, Out::interleaved}) {
        for (Operand op : kOperands) {
          const Pair a = operand(op, s.batch, s.m, s.k, dtype, seed++);
          const Pair b = operand(op == Operand::broadcast ? Operand::transposed : op, s.batch, s.k,
                                 s.n, dtype, seed++);
          const std::string what = matmul_what(op, op, s, dtype) + ", " + out_name(o);
          const StridedOut out = strided_out(o, s.batch, s.m, s.n, dtype);
          const Shape out_shape = out.view.shape();
          const Tensor expected = ref_output(out_shape, dtype);
          dev().matmul(a.dev, b.dev, out.view);
          ref().matmul(ref_input(a.ref), ref_input(b.ref), expected);
          compare(out.view, expected, what, tol);
          if (o == Out::padded_rows) {
            // The padding between rows is left alone (still NaN).
            const Tensor pad = raw::contiguous(host_float32(out.buffer.narrow(2, s.n, 3)));
            for (std::int64_t i = 0; i < pad.numel(); ++i) {
              CHECK_MESSAGE(std::isnan(pad.data<float>()[i]), what, ": padding written");
            }
          }
        }
      }
    }
  }
  // Both operands broadcast: one product, copied into the other batches of a strided out.
  for (Out o : {Out::padded_rows, Out::interleaved}) {
    const Pair a = make_pair({4, 5, 3}, DType::float32, Layout::broadcast, 1);
    const Pair b = make_pair({4, 3, 6}, DType::float32, Layout::broadcast, 2);
    const StridedOut out = strided_out(o, 4, 5, 6, DType::float32);
    const Tensor expected = ref_output({4, 5, 6}, DType::float32);
    dev().matmul(a.dev, b.dev, out.view);
    ref().matmul(a.ref, b.ref, expected);
    compare(out.view, expected, std::string("both broadcast, ") + out_name(o), kMatmulF32);
  }
  // A large product (oneDNN's blocked kernels) into an interleaved out, and one that K = 0 zeroes.
  const StridedOut big = strided_out(Out::interleaved, 3, 131, 67, DType::float32);
  const Pair a = make_pair({3, 131, 65}, DType::float32, Layout::contiguous, 3);
  const Pair b = make_pair({3, 65, 67}, DType::float32, Layout::transposed, 4);
  const Tensor expected = ref_output({3, 131, 67}, DType::float32);
  dev().matmul(a.dev, b.dev, big.view);
  ref().matmul(a.ref, b.ref, expected);
  compare(big.view, expected, "[3, 131, 65] @ [3, 65, 67] into an interleaved out", {1e-5, 1e-5});
  const StridedOut zeroed = strided_out(Out::padded_rows, 2, 3, 4, DType::float32);
  dev().matmul(make_pair({2, 3, 0}, DType::float32, Layout::contiguous, 5).dev,
               make_pair({2, 0, 4}, DType::float32, Layout::contiguous, 6).dev, zeroed.view);
  compare(zeroed.view, zeros({2, 3, 4}), "K = 0 into a padded out", kMatmulF32);
}

namespace {

// How a [B1, B2, R, C] operand of a product with two batch dims lies in memory.
enum class Operand4 { heads, heads_transposed, contiguous, shared_inner, one_outer, every_other };
constexpr Operand4 kOperands4[] = {Operand4::heads,      Operand4::heads_transposed,
                                   Operand4::contiguous, Operand4::shared_inner,
                                   Operand4::one_outer,  Operand4::every_other};

const char* operand4_name(Operand4 o) {
  switch (o) {
    case Operand4::heads:
      return "heads ([B1, B2, R, C] of a [B1, R, B2, C] buffer)";
    case Operand4::heads_transposed:
      return "transposed heads (of a [B1, C, B2, R] buffer)";
    case Operand4::contiguous:
      return "contiguous";
    case Operand4::shared_inner:
      return "broadcast along B2";
    case Operand4::one_outer:
      return "a B1 of 1";
    case Operand4::every_other:
      return "every other column";
  }
  return "?";
}

Pair both(const Pair& p, const auto& view) {
  return {view(p.ref), view(p.dev)};
}

Pair operand4(Operand4 o, std::int64_t b1, std::int64_t b2, std::int64_t r, std::int64_t c,
              DType dtype, std::uint64_t seed) {
  switch (o) {
    case Operand4::heads:
      return both(make_pair({b1, r, b2, c}, dtype, Layout::contiguous, seed),
                  [](const Tensor& t) { return t.transpose(1, 2); });
    case Operand4::heads_transposed:
      return both(make_pair({b1, c, b2, r}, dtype, Layout::contiguous, seed), [](const Tensor& t) {
        return t.permute({0, 2, 3, 1});
      });
    case Operand4::contiguous:
      return make_pair({b1, b2, r, c}, dtype, Layout::contiguous, seed);
    case Operand4::shared_inner:
      return both(make_pair({b1, 1, r, c}, dtype, Layout::contiguous, seed), [=](const Tensor& t) {
        return raw::expand(t, {b1, b2, r, c}, "test");
      });
    case Operand4::one_outer:
      return make_pair({1, b2, r, c}, dtype, Layout::contiguous, seed);
    case Operand4::every_other:
      return both(make_pair({b1, b2, r, 2 * c}, dtype, Layout::contiguous, seed),
                  [=](const Tensor& t) {
                    return raw::as_strided(t, {b1, b2, r, c}, {b2 * r * 2 * c, r * 2 * c, 2 * c, 2},
                                           t.offset());
                  });
  }
  return {};
}

}  // namespace

TEST_CASE("parity: matmul: two batch dims, each with its own stride (attention's heads)") {
  if (!available()) return;
  std::uint64_t seed = 7000;
  struct Shape4 {
    std::int64_t b1, b2, m, k, n;
  };
  // Small and odd sizes, a row of one, and one large enough for oneDNN's blocked kernels.
  const Shape4 shapes[] = {
      {2, 3, 7, 33, 5}, {2, 4, 33, 7, 129}, {3, 2, 1, 7, 33}, {2, 4, 131, 65, 67}};
  for (DType dtype : floating_dtypes()) {
    const Tolerance tol = dtype == DType::float32   ? kMatmulF32
                          : dtype == DType::float64 ? Tolerance{1e-12, 1e-12}
                                                    : Tolerance{1e-2, 1e-2};
    for (const Shape4& s : shapes) {
      for (Operand4 oa : kOperands4) {
        for (Operand4 ob : {Operand4::heads_transposed, Operand4::heads, oa}) {
          for (const bool heads_out : {false, true}) {
            const Pair a = operand4(oa, s.b1, s.b2, s.m, s.k, dtype, seed++);
            const Pair b = operand4(ob, s.b1, s.b2, s.k, s.n, dtype, seed++);
            const std::int64_t b1 =
                oa == Operand4::one_outer && ob == Operand4::one_outer ? 1 : s.b1;
            const Shape out_shape = {b1, s.b2, s.m, s.n};
            // The out: contiguous, or heads written into a [B1, M, B2, N] buffer.
            const Tensor buffer =
                make_output(heads_out ? Shape{b1, s.m, s.b2, s.n} : out_shape, dtype).dev;
            const Tensor out = heads_out ? buffer.transpose(1, 2) : buffer;
            const Tensor expected = ref_output(out_shape, dtype);
            dev().matmul(a.dev, b.dev, out);
            ref().matmul(ref_input(a.ref), ref_input(b.ref), expected);
            compare(out, expected,
                    "matmul " + dtype_str(dtype) + " [" + std::to_string(s.b1) + ", " +
                        std::to_string(s.b2) + ", " + std::to_string(s.m) + ", " +
                        std::to_string(s.k) + "] @ [.., " + std::to_string(s.n) + "], a " +
                        operand4_name(oa) + ", b " + operand4_name(ob) +
                        (heads_out ? ", heads out" : ", contiguous out"),
                    tol);
          }
        }
      }
    }
  }
  // Mixed precision: bfloat16 heads into a float32 out, as attention's products under autocast;
  // the second shape is attention's scores Q K^T with a head's [M, N] at 2^18 elements, where
  // the CPU backend picks its kernel by the size (one jit GEMM per sequence, or the 4-D blocked
  // kernel where oneDNN runs AMX).
  if (supports(DType::bfloat16)) {
    for (const Shape4& s : {Shape4{2, 4, 131, 65, 67}, Shape4{1, 2, 512, 64, 512}}) {
      const Pair a = operand4(Operand4::heads, s.b1, s.b2, s.m, s.k, DType::bfloat16, seed++);
      const Pair b =
          operand4(Operand4::heads_transposed, s.b1, s.b2, s.k, s.n, DType::bfloat16, seed++);
      const Tensor buffer = make_output({s.b1, s.m, s.b2, s.n}, DType::float32).dev;
      const Tensor expected = ref_output({s.b1, s.b2, s.m, s.n}, DType::float32);
      dev().matmul(a.dev, b.dev, buffer.transpose(1, 2));
      ref().matmul(ref_input(a.ref), ref_input(b.ref), expected);
      compare(buffer.transpose(1, 2), expected,
              "bfloat16 heads into a float32 out, M = " + std::to_string(s.m), {1e-5, 1e-5});
    }
  }
  // Outs no product may write: entries that overlap, a broadcast B2.
  const Pair a = make_pair({2, 3, 4, 5}, DType::float32, Layout::contiguous, 3);
  const Pair b = make_pair({2, 3, 5, 6}, DType::float32, Layout::contiguous, 4);
  const Tensor buffer = make_output({4, 5, 6}, DType::float32).dev;
  const Tensor overlapping = raw::as_strided(buffer, {2, 3, 4, 6}, {6, 24, 6, 1}, buffer.offset());
  CHECK(error_of([&] { dev().matmul(a.dev, b.dev, overlapping); }).find("do not overlap") !=
        std::string::npos);
  const Tensor shared = raw::as_strided(buffer, {2, 3, 4, 6}, {72, 0, 6, 1}, buffer.offset());
  CHECK(error_of([&] { dev().matmul(a.dev, b.dev, shared); }).find("matmul: expected an out") !=
        std::string::npos);
  CHECK(error_of([&] {
          dev().matmul(a.dev, b.dev, make_output({6, 4, 6}, DType::float32).dev);
        }).find("matmul: expected a [B, M, K]") != std::string::npos);
}

TEST_CASE("parity: matmul: empty dims and an empty sum") {
  if (!available()) return;
  for (const Shape& a_shape : {Shape{2, 0, 5}, Shape{0, 3, 5}}) {
    const Pair a = make_pair(a_shape, DType::float32, Layout::contiguous, 1);
    const Pair b = make_pair({a_shape[0], 5, 4}, DType::float32, Layout::contiguous, 2);
    const Pair out = make_output({a_shape[0], a_shape[1], 4}, DType::float32);
    dev().matmul(a.dev, b.dev, out.dev);
    CHECK(out.dev.numel() == 0);
  }
  // K = 0: every element is an empty sum, 0.
  const Pair a = make_pair({3, 4, 0}, DType::float32, Layout::contiguous, 3);
  const Pair b = make_pair({3, 0, 6}, DType::float32, Layout::contiguous, 4);
  const Pair out = make_output({3, 4, 6}, DType::float32);
  dev().matmul(a.dev, b.dev, out.dev);
  ref().matmul(a.ref, b.ref, out.ref);
  check_close(out, "K = 0");
}

namespace {
// Sets the matmul precision for one scope.
struct PrecisionScope {
  MatmulPrecision saved = matmul_precision();
  explicit PrecisionScope(MatmulPrecision mode) { set_matmul_precision(mode); }
  ~PrecisionScope() { set_matmul_precision(saved); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};
}  // namespace

TEST_CASE("parity: matmul: float32 through TF32 and bfloat16 tensor cores, looser tolerances") {
  if (!available()) return;
  // TF32 keeps 10 mantissa bits of each input, bfloat16 7: each product is off by up to
  // 2^-10 (2^-7) of its size, and up to 129 of them (values in [-1, 1)) add up.
  struct Mode {
    MatmulPrecision mode;
    const char* name;
    Tolerance tol;
  };
  for (const Mode& mode : {Mode{MatmulPrecision::tf32, "tf32", {1e-2, 2e-2}},
                           Mode{MatmulPrecision::bf16, "bf16", {5e-2, 1.5e-1}}}) {
    const PrecisionScope scope(mode.mode);
    std::uint64_t seed = 5000;
    for (const MatmulShape& s : kMatmulShapes) {
      for (Operand o : {Operand::contiguous, Operand::transposed, Operand::broadcast}) {
        const Pair a = operand(o, s.batch, s.m, s.k, DType::float32, seed++);
        const Pair b = operand(Operand::transposed, s.batch, s.k, s.n, DType::float32, seed++);
        check_matmul(
            a, b, DType::float32, mode.tol,
            std::string(mode.name) + " " + matmul_what(o, Operand::transposed, s, DType::float32));
      }
    }
  }
}

TEST_CASE("parity: conv1d: float32 through TF32 tensor cores") {
  if (!available()) return;
  const PrecisionScope scope(MatmulPrecision::tf32);
  const Pair x = make_pair({2, 16, 129}, DType::float32, Layout::contiguous, 1);
  const Pair w = make_pair({8, 16, 5}, DType::float32, Layout::contiguous, 2);
  const Pair out = make_output({2, 8, 127}, DType::float32);
  dev().conv1d(x.dev, w.dev, Tensor(), 1, 1, out.dev);
  ref().conv1d(x.ref, w.ref, Tensor(), 1, 1, out.ref);
  check_close(out, "conv1d tf32", 1e-2, 2e-2);
}

// ============================== conv1d ==============================

namespace {

struct ConvCase {
  std::int64_t batch, c_in, length, c_out, kernel, stride, padding;
  std::int64_t out_length() const { return (length + 2 * padding - kernel) / stride + 1; }
  std::string str() const {
    return "B=" + std::to_string(batch) + " Cin=" + std::to_string(c_in) +
           " L=" + std::to_string(length) + " Cout=" + std::to_string(c_out) +
           " K=" + std::to_string(kernel) + " stride=" + std::to_string(stride) +
           " padding=" + std::to_string(padding);
  }
};

constexpr ConvCase kConvCases[] = {
    {1, 1, 1, 1, 1, 1, 0},     {2, 3, 7, 5, 3, 1, 1},  {3, 4, 33, 6, 5, 2, 2},
    {2, 7, 129, 3, 4, 3, 0},   {1, 2, 10, 4, 3, 1, 5},  // padding wider than the kernel
    {2, 3, 5, 4, 9, 4, 2},                              // kernel longer than x, one window
    {2, 16, 1031, 8, 7, 2, 3},
};

// Different algorithms (implicit GEMM, FFT, Winograd) round differently from the reference.
Tolerance conv_tolerance(DType dtype) {
  if (dtype == DType::float64) return {1e-10, 1e-10};
  if (dtype == DType::float32) return {1e-4, 1e-4};
  return {3e-2, 5e-2};
}

}  // namespace

TEST_CASE("parity: conv1d: forward with and without bias, odd lengths, strides and paddings") {
  if (!available()) return;
  std::uint64_t seed = 1;
  for (DType dtype : floating_dtypes()) {
    for (const ConvCase& c : kConvCases) {
      for (bool with_bias : {true, false}) {
        const std::string what =
            "conv1d " + dtype_str(dtype) + " " + c.str() + (with_bias ? " bias" : "");
        const Pair x = make_pair({c.batch, c.c_in, c.length}, dtype, Layout::contiguous, seed++);
        const Pair w = make_pair({c.c_out, c.c_in, c.kernel}, dtype, Layout::contiguous, seed++);
        const Pair b = with_bias ? make_pair({c.c_out}, dtype, Layout::contiguous, seed++) : Pair{};
        const Shape out_shape = {c.batch, c.c_out, c.out_length()};
        const Pair out = make_output(out_shape, dtype);
        const Tensor expected = ref_output(out_shape, dtype);
        dev().conv1d(x.dev, w.dev, b.dev, c.stride, c.padding, out.dev);
        ref().conv1d(ref_input(x.ref), ref_input(w.ref), ref_input(b.ref), c.stride, c.padding,
                     expected);
        compare(out.dev, expected, what, conv_tolerance(dtype));
      }
    }
  }
}

TEST_CASE("parity: conv1d_backward: each of grad_x, grad_weight, grad_bias alone and together") {
  if (!available()) return;
  std::uint64_t seed = 100;
  for (DType dtype : floating_dtypes()) {
    for (std::size_t i = 0; i < std::size(kConvCases); ++i) {
      const ConvCase& c = kConvCases[i];
      const Pair x = make_pair({c.batch, c.c_in, c.length}, dtype, Layout::contiguous, seed++);
      const Pair w = make_pair({c.c_out, c.c_in, c.kernel}, dtype, Layout::contiguous, seed++);
      const Pair g =
          make_pair({c.batch, c.c_out, c.out_length()}, dtype, Layout::contiguous, seed++);
      // Every subset of the three gradients on the small cases, all three on the others.
      for (int mask = i < 3 ? 1 : 7; mask <= 7; ++mask) {
        const bool want_x = mask & 1, want_w = mask & 2, want_b = mask & 4;
        const std::string what =
            "conv1d_backward " + dtype_str(dtype) + " " + c.str() + " mask " + std::to_string(mask);
        const Pair gx = want_x ? make_output(x.ref.shape(), dtype) : Pair{};
        const Pair gw = want_w ? make_output(w.ref.shape(), dtype) : Pair{};
        const Pair gb = want_b ? make_output({c.c_out}, dtype) : Pair{};
        const Tensor rx = want_x ? ref_output(x.ref.shape(), dtype) : Tensor();
        const Tensor rw = want_w ? ref_output(w.ref.shape(), dtype) : Tensor();
        const Tensor rb = want_b ? ref_output({c.c_out}, dtype) : Tensor();
        dev().conv1d_backward(g.dev, x.dev, w.dev, c.stride, c.padding, gx.dev, gw.dev, gb.dev);
        ref().conv1d_backward(ref_input(g.ref), ref_input(x.ref), ref_input(w.ref), c.stride,
                              c.padding, rx, rw, rb);
        const Tolerance tol = conv_tolerance(dtype);
        if (want_x) compare(gx.dev, rx, what + " grad_x", tol);
        if (want_w) compare(gw.dev, rw, what + " grad_weight", tol);
        if (want_b) compare(gb.dev, rb, what + " grad_bias", tol);
      }
    }
  }
}

TEST_CASE("parity: conv1d: empty problems (no input channels, an all-padding input, no batch)") {
  if (!available()) return;
  struct Empty {
    Shape x, w;
    std::int64_t padding;
  };
  for (const Empty& e : {Empty{{2, 0, 5}, {3, 0, 2}, 0}, Empty{{2, 3, 0}, {4, 3, 2}, 1},
                         Empty{{0, 3, 6}, {4, 3, 2}, 0}}) {
    const std::string what = "x " + shape_str(e.x) + " weight " + shape_str(e.w);
    const Pair x = make_pair(e.x, DType::float32, Layout::contiguous, 1);
    const Pair w = make_pair(e.w, DType::float32, Layout::contiguous, 2);
    const Pair b = make_pair({e.w[0]}, DType::float32, Layout::contiguous, 3);
    const std::int64_t out_length = (e.x[2] + 2 * e.padding - e.w[2]) + 1;
    const Pair out = make_output({e.x[0], e.w[0], out_length}, DType::float32);
    dev().conv1d(x.dev, w.dev, b.dev, 1, e.padding, out.dev);
    ref().conv1d(x.ref, w.ref, b.ref, 1, e.padding, out.ref);
    check_close(out, what + " forward");
    const Pair g = make_pair({e.x[0], e.w[0], out_length}, DType::float32, Layout::contiguous, 4);
    const Pair gx = make_output(e.x, DType::float32), gw = make_output(e.w, DType::float32),
               gb = make_output({e.w[0]}, DType::float32);
    dev().conv1d_backward(g.dev, x.dev, w.dev, 1, e.padding, gx.dev, gw.dev, gb.dev);
    ref().conv1d_backward(g.ref, x.ref, w.ref, 1, e.padding, gx.ref, gw.ref, gb.ref);
    check_close(gx, what + " grad_x");
    check_close(gw, what + " grad_weight");
    check_close(gb, what + " grad_bias");
  }
}

// ============================== pool1d ==============================

namespace {

struct PoolCase {
  std::int64_t batch, channels, length, kernel, stride;
  std::int64_t out_length() const { return (length - kernel) / stride + 1; }
  std::string str() const {
    return "B=" + std::to_string(batch) + " C=" + std::to_string(channels) +
           " L=" + std::to_string(length) + " kernel=" + std::to_string(kernel) +
           " stride=" + std::to_string(stride);
  }
};

constexpr PoolCase kPoolCases[] = {
    {1, 1, 1, 1, 1},   {2, 3, 7, 2, 2},
    {3, 5, 33, 3, 1},  // overlapping windows
    {2, 4, 129, 4, 3}, {1, 3, 1031, 5, 5},
    {2, 2, 10, 3, 7},  // stride past the kernel: elements between windows get no gradient
    {2, 3, 8, 8, 1},   // one window over everything
};

// Max pooling picks values, so it is exact in every dtype; the average rounds (in bfloat16
// its output).
Tolerance pool_tolerance(DType dtype) {
  if (dtype == DType::float64) return {1e-12, 1e-12};
  if (dtype == DType::float32) return {1e-5, 1e-6};
  return {2e-2, 1e-2};
}

const char* kind_name(PoolKind kind) {
  return kind == PoolKind::max ? "max" : "average";
}

}  // namespace

TEST_CASE("parity: pool1d and pool1d_backward: average and max, odd lengths, every dtype") {
  if (!available()) return;
  std::uint64_t seed = 1;
  for (DType dtype : floating_dtypes()) {
    for (PoolKind kind : {PoolKind::average, PoolKind::max}) {
      for (const PoolCase& c : kPoolCases) {
        // bfloat16 holds 256 values per power of two: random windows often hold tied maxima,
        // which checks that the first one takes the gradient, as in the reference.
        const std::string what =
            std::string(kind_name(kind)) + " pool1d " + dtype_str(dtype) + " " + c.str();
        const Pair x =
            make_pair({c.batch, c.channels, c.length}, dtype, Layout::contiguous, seed++);
        const Shape out_shape = {c.batch, c.channels, c.out_length()};
        const Pair out = make_output(out_shape, dtype);
        const Tensor expected = ref_output(out_shape, dtype);
        dev().pool1d(kind, x.dev, c.kernel, c.stride, out.dev);
        ref().pool1d(kind, ref_input(x.ref), c.kernel, c.stride, expected);
        compare(out.dev, expected, what, pool_tolerance(dtype));

        const Pair g = make_pair(out_shape, dtype, Layout::contiguous, seed++);
        const Pair gx = make_output(x.ref.shape(), dtype);
        const Tensor rx = ref_output(x.ref.shape(), dtype);
        dev().pool1d_backward(kind, g.dev, x.dev, c.kernel, c.stride, gx.dev);
        ref().pool1d_backward(kind, ref_input(g.ref), ref_input(x.ref), c.kernel, c.stride, rx);
        compare(gx.dev, rx, what + " backward", pool_tolerance(dtype));
      }
    }
  }
}

TEST_CASE("parity: max_pool1d: tied maxima and NaN as in the reference") {
  if (!available()) return;
  // Windows of 3 with ties in every position; stride 1 overlaps them, stride 2 half does.
  const std::vector<double> xs = {1, 3, 3, 2, 5, 5, 5, 0, 4, 4};
  const Tensor x_host = raw::to_dtype(from<double>(xs, {1, 1, 10}), DType::float32);
  const Pair x{x_host, to_dev(x_host)};
  for (std::int64_t stride : {1, 2}) {
    const std::int64_t out_length = (10 - 3) / stride + 1;
    const Pair out = make_output({1, 1, out_length}, DType::float32);
    dev().pool1d(PoolKind::max, x.dev, 3, stride, out.dev);
    ref().pool1d(PoolKind::max, x.ref, 3, stride, out.ref);
    check_close(out, "tied max forward, stride " + std::to_string(stride));
    const Pair g = make_pair({1, 1, out_length}, DType::float32, Layout::contiguous, 7);
    const Pair gx = make_output({1, 1, 10}, DType::float32);
    dev().pool1d_backward(PoolKind::max, g.dev, x.dev, 3, stride, gx.dev);
    ref().pool1d_backward(PoolKind::max, g.ref, x.ref, 3, stride, gx.ref);
    check_close(gx, "tied max backward, stride " + std::to_string(stride));
  }
  // A NaN makes every window that holds it NaN.
  std::vector<double> with_nan = xs;
  with_nan[4] = std::numeric_limits<double>::quiet_NaN();
  const Tensor n_host = raw::to_dtype(from<double>(with_nan, {1, 1, 10}), DType::float32);
  const Pair n{n_host, to_dev(n_host)};
  const Pair out = make_output({1, 1, 8}, DType::float32);
  dev().pool1d(PoolKind::max, n.dev, 3, 1, out.dev);
  ref().pool1d(PoolKind::max, n.ref, 3, 1, out.ref);
  check_close(out, "max pool with a NaN");
}

// ============================== adamw_step ==============================

TEST_CASE("parity: adamw_step: Adam and AdamW over several steps, odd sizes, unaligned views") {
  if (!available()) return;
  struct Mode {
    bool decoupled;
    double weight_decay;
  };
  std::uint64_t seed = 1;
  for (DType dtype : {DType::float32, DType::float64}) {
    for (std::int64_t n : {1, 7, 1003, 4096}) {
      for (const Mode mode : {Mode{true, 0.1}, Mode{false, 0.1}, Mode{true, 0.0}}) {
        // offset 1 starts every tensor one element into its buffer: no 16-byte alignment, so
        // the float32 kernel must take its scalar path.
        for (std::int64_t offset : {0, 1}) {
          const std::string what = "adamw_step " + dtype_str(dtype) + " n=" + std::to_string(n) +
                                   (mode.decoupled ? " AdamW" : " Adam") +
                                   " weight_decay=" + std::to_string(mode.weight_decay) +
                                   " offset=" + std::to_string(offset);
          auto state = [&](double lo, double hi) {
            const Pair p = make_pair({n + offset}, dtype, Layout::contiguous, seed++, lo, hi);
            return Pair{p.ref.narrow(0, offset, n), p.dev.narrow(0, offset, n)};
          };
          const Pair p = state(-1.0, 1.0), m = state(-0.1, 0.1), v = state(0.0, 0.01);
          const double lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
          for (int t = 1; t <= 3; ++t) {
            const Pair g = state(-1.0, 1.0);
            const double bc1 = 1.0 - std::pow(beta1, t), bc2 = 1.0 - std::pow(beta2, t);
            dev().adamw_step(p.dev, g.dev, m.dev, v.dev, lr, beta1, beta2, eps, mode.weight_decay,
                             mode.decoupled, bc1, bc2);
            ref().adamw_step(p.ref, g.ref, m.ref, v.ref, lr, beta1, beta2, eps, mode.weight_decay,
                             mode.decoupled, bc1, bc2);
          }
          check_close(p, what + " param");
          check_close(m, what + " exp_avg");
          check_close(v, what + " exp_avg_sq");
        }
      }
    }
  }
}

// ============================== sum_squares ==============================

TEST_CASE("parity: sum_squares: sizes across the kernels' blocks, unaligned, into one slot") {
  if (!available()) return;
  std::uint64_t seed = 1;
  for (DType dtype : {DType::float32, DType::float64}) {
    // 0 and 1; around a CPU block (16384) and a CUDA block's chunk (4096); many of both.
    for (std::int64_t n : {0, 1, 7, 4095, 4097, 16384, 16385, 70001, 1000003}) {
      for (std::int64_t offset : {0, 1}) {
        const std::string what = "sum_squares " + dtype_str(dtype) + " n=" + std::to_string(n) +
                                 " offset=" + std::to_string(offset);
        const Pair buffer = make_pair({n + offset}, dtype, Layout::contiguous, seed++, -3.0, 3.0);
        const Pair x{buffer.ref.narrow(0, offset, n), buffer.dev.narrow(0, offset, n)};
        // The result goes to slot 2 of a buffer of NaNs, which must keep the others.
        const Pair sums = make_output({4}, DType::float64);
        dev().sum_squares(x.dev, sums.dev.narrow(0, 2, 1));
        ref().sum_squares(x.ref, sums.ref.narrow(0, 2, 1));
        const Tensor got = sums.dev.to(Device::cpu());
        CHECK_MESSAGE(std::isnan(got.data<double>()[0]), what);
        CHECK_MESSAGE(std::isnan(got.data<double>()[1]), what);
        CHECK_MESSAGE(std::isnan(got.data<double>()[3]), what);
        // The reference sums in order, the kernels by blocks: n * 1e-16 apart at most.
        check_close(sums.dev.narrow(0, 2, 1), sums.ref.narrow(0, 2, 1), what, 1e-11, 0.0);
        if (n == 0) CHECK_MESSAGE(got.data<double>()[2] == 0.0, what);
      }
    }
  }
  // float32 squares are exact in float64: a sum whose terms are exact powers of two is exact.
  const Tensor halves = full({1000}, 0.5, {.device = device()});
  Tensor out = zeros({1}, {.dtype = DType::float64, .device = device()});
  dev().sum_squares(halves, out);
  CHECK(out.to(Device::cpu()).data<double>()[0] == 250.0);
}

// ============================== errors ==============================

TEST_CASE("parity: dense ops: bad input throws Error naming the op") {
  if (!available()) return;
  auto on_dev = [](const Shape& shape, DType dtype = DType::float32) {
    return empty(shape, {.dtype = dtype, .device = device()});
  };
  auto host = [](const Shape& shape) { return empty(shape, {.dtype = DType::float32}); };
  auto fails = [](auto&& call, const std::string& part) {
    try {
      call();
      FAIL_CHECK("expected an Error mentioning \"" << part << "\"");
    } catch (const Error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(part) != std::string::npos, msg);
    }
  };
  fails(
      [&] {
        dev().matmul(on_dev({2, 3, 4}), on_dev({2, 5, 6}), on_dev({2, 3, 6}));
      },
      "matmul: shapes do not match");
  if (!device().is_cpu()) {  // a host tensor handed to a device backend
    fails([&] { dev().matmul(on_dev({1, 3, 4}), host({1, 4, 6}), on_dev({1, 3, 6})); }, "matmul");
  }
  fails(
      [&] {
        dev().matmul(on_dev({1, 3, 4}, DType::int64), on_dev({1, 4, 6}, DType::int64),
                     on_dev({1, 3, 6}, DType::int64));
      },
      "matmul");
  fails(
      [&] {
        dev().conv1d(on_dev({2, 3, 8}), on_dev({4, 2, 3}), Tensor(), 1, 0, on_dev({2, 4, 6}));
      },
      "conv1d");
  fails(
      [&] {
        dev().conv1d(on_dev({2, 3, 8}), on_dev({4, 3, 3}), Tensor(), 0, 0, on_dev({2, 4, 6}));
      },
      "stride");
  fails(
      [&] {
        dev().pool1d(PoolKind::max, on_dev({2, 3, 4}), 5, 1, on_dev({2, 3, 1}));
      },
      "max_pool1d");
  fails(
      [&] {
        dev().pool1d(PoolKind::average, on_dev({2, 8, 3}).transpose(1, 2), 2, 2, on_dev({2, 3, 4}));
      },
      "contiguous");
  fails(
      [&] {
        const Tensor p = on_dev({4}, DType::bfloat16);
        dev().adamw_step(p, on_dev({4}, DType::bfloat16), on_dev({4}, DType::bfloat16),
                         on_dev({4}, DType::bfloat16), 0.1, 0.9, 0.999, 1e-8, 0.0, true, 0.1,
                         0.001);
      },
      "adamw_step");
  fails([&] { dev().sum_squares(on_dev({4}), on_dev({1})); },
        "sum_squares: expected out of one float64");
  fails(
      [&] {
        dev().sum_squares(on_dev({4, 4}).transpose(0, 1), on_dev({1}, DType::float64));
      },
      "sum_squares: expected a contiguous x");
  fails([&] { dev().sum_squares(on_dev({4}, DType::bfloat16), on_dev({1}, DType::float64)); },
        "sum_squares");
  if (!device().is_cpu()) {
    fails(
        [&] {
          dev().adamw_step(on_dev({4}), on_dev({4}), on_dev({4}), host({4}), 0.1, 0.9, 0.999, 1e-8,
                           0.0, true, 0.1, 0.001);
        },
        "exp_avg_sq");
  }
}
