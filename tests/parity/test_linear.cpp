// Parity of the fused linear op (product, bias and activation in one call) against the reference
// backend: every epilogue in every dtype, with and without bias, odd sizes, x contiguous and as
// rows of a wider matrix; float32 through the reduced-precision math modes; empty problems and an
// empty sum; bad input. A bfloat16 case compares with the reference's float32 result on the same
// (bfloat16-rounded) inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "parity/parity.h"

namespace {

using namespace tinyformer;
using namespace tinyformer::parity;

TF_PARITY_COVERS(linear);

struct Tolerance {
  double rtol, atol;
};

struct LinearSize {
  std::int64_t m, k, n;
};
// 1, 7, 33 and 130 in every position; the last is past matmul's small-product size (64^3).
constexpr LinearSize kSizes[] = {{1, 1, 1},    {7, 33, 1},   {1, 130, 7},   {33, 7, 130},
                                 {130, 1, 33}, {7, 130, 33}, {130, 33, 130}};

// float32 sums up to 130 products of values in [-1, 1) (the reference sums in double); the
// activations' float32 math adds a few units in the last place. bfloat16 rounds its output once.
Tolerance tolerance(DType dtype) {
  if (dtype == DType::float64) return {1e-12, 1e-12};
  if (dtype == DType::float32) return {1e-5, 1e-5};
  return {1e-2, 1e-2};
}

// A target tensor's values as a float32 host tensor (for bfloat16 results).
Tensor host_float32(const Tensor& t) {
  return raw::to_dtype(raw::to_device(t, Device::cpu()), DType::float32);
}

// The reference's inputs of a case: float32 copies of bfloat16 values, the tensor itself otherwise.
Tensor ref_input(const Tensor& t) {
  return t.defined() && t.dtype() == DType::bfloat16 ? raw::to_dtype(t, DType::float32) : t;
}

std::string what_of(const LinearSize& s, DType dtype, Epilogue epilogue, bool with_bias,
                    bool wide_rows) {
  return std::string("linear ") + dtype_name(dtype) + " " + epilogue_name(epilogue) + " x [" +
         std::to_string(s.m) + ", " + std::to_string(s.k) + "] weight [" + std::to_string(s.n) +
         ", " + std::to_string(s.k) + "]" + (with_bias ? " with bias" : " without bias") +
         (wide_rows ? ", x rows of a wider matrix" : "");
}

// Runs one case on the target and on the reference and compares; x is [m, k] or, with
// wide_rows, columns 3..3+k of an [m, k + 7] matrix (row stride k + 7, an odd offset).
void check_linear(const LinearSize& s, DType dtype, Epilogue epilogue, bool with_bias,
                  bool wide_rows, std::uint64_t seed, Tolerance tol) {
  const std::string what = what_of(s, dtype, epilogue, with_bias, wide_rows);
  Pair x = make_pair({s.m, wide_rows ? s.k + 7 : s.k}, dtype, Layout::contiguous, seed);
  if (wide_rows) x = {x.ref.narrow(1, 3, s.k), x.dev.narrow(1, 3, s.k)};
  const Pair w = make_pair({s.n, s.k}, dtype, Layout::contiguous, seed + 1);
  const Pair b = with_bias ? make_pair({s.n}, dtype, Layout::contiguous, seed + 2) : Pair{};
  const Pair out = make_output({s.m, s.n}, dtype);
  const Tensor expected =
      full({s.m, s.n}, std::nan(""), {.dtype = dtype == DType::bfloat16 ? DType::float32 : dtype});
  dev().linear(x.dev, w.dev, b.dev, epilogue, out.dev);
  ref().linear(ref_input(x.ref), ref_input(w.ref), ref_input(b.ref), epilogue, expected);
  const Tensor got = dtype == DType::bfloat16 ? host_float32(out.dev) : out.dev;
  check_close(got, expected, what, tol.rtol, tol.atol);
}

// The target's floating dtypes, and bfloat16 wherever its linear takes it (the CPU multiplies
// bfloat16 matrices though most of its other kernels take no bfloat16).
std::vector<DType> linear_dtypes() {
  std::vector<DType> dtypes = floating_dtypes();
  if (dev().supports(Op::linear, DType::bfloat16) &&
      std::find(dtypes.begin(), dtypes.end(), DType::bfloat16) == dtypes.end()) {
    dtypes.push_back(DType::bfloat16);
  }
  return dtypes;
}

// A tensor on the target's device for the bad-input cases (its values are never read).
Tensor on_dev(const Shape& shape, DType dtype = DType::float32) {
  return empty(shape, {.dtype = dtype, .device = device()});
}

// The bad-input check: fails(call, part) requires call() to throw an Error whose message names
// `op` and contains `part`.
auto error_check(std::string op) {
  return [op = std::move(op)](auto&& call, const std::string& part) {
    const std::string msg = error_of(call);
    INFO(msg);
    CHECK(msg.find(op) != std::string::npos);
    CHECK(msg.find(part) != std::string::npos);
  };
}

// Sets the matmul precision for one scope.
struct PrecisionScope {
  MatmulPrecision saved = matmul_precision();
  explicit PrecisionScope(MatmulPrecision mode) { set_matmul_precision(mode); }
  ~PrecisionScope() { set_matmul_precision(saved); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};

}  // namespace

TEST_CASE("parity: linear: every epilogue and dtype, with and without bias, odd sizes") {
  if (!available()) return;
  std::uint64_t seed = 1;
  for (DType dtype : linear_dtypes()) {
    for (const LinearSize& s : kSizes) {
      for (Epilogue epilogue : epilogues) {
        for (bool with_bias : {true, false}) {
          check_linear(s, dtype, epilogue, with_bias, false, seed, tolerance(dtype));
          seed += 3;
        }
      }
    }
  }
}

TEST_CASE("parity: linear: x as rows of a wider matrix (row stride above K, an offset)") {
  if (!available()) return;
  std::uint64_t seed = 500;
  for (DType dtype : linear_dtypes()) {
    for (const LinearSize& s : {LinearSize{7, 33, 130}, LinearSize{130, 7, 33}}) {
      for (Epilogue epilogue : {Epilogue::none, Epilogue::gelu}) {
        check_linear(s, dtype, epilogue, true, true, seed, tolerance(dtype));
        seed += 3;
      }
    }
  }
}

TEST_CASE("parity: linear: float32 through TF32 and bfloat16 products, looser tolerances") {
  if (!available()) return;
  // As matmul's case: TF32 keeps 10 mantissa bits of each input, bfloat16 7, and up to 130
  // products of values in [-1, 1) add up; the activations are 1-Lipschitz (gelu up to 1.13).
  struct Mode {
    MatmulPrecision mode;
    Tolerance tol;
  };
  for (const Mode& mode :
       {Mode{MatmulPrecision::tf32, {1e-2, 2e-2}}, Mode{MatmulPrecision::bf16, {5e-2, 1.5e-1}}}) {
    const PrecisionScope scope(mode.mode);
    std::uint64_t seed = 900;
    for (const LinearSize& s : kSizes) {
      for (Epilogue epilogue : epilogues) {
        check_linear(s, DType::float32, epilogue, true, false, seed, mode.tol);
        seed += 3;
      }
    }
  }
}

TEST_CASE("parity: linear: empty problems and an empty sum (K = 0 gives act(bias))") {
  if (!available()) return;
  for (DType dtype : linear_dtypes()) {
    INFO(dtype_name(dtype));
    for (const LinearSize& s : {LinearSize{0, 5, 4}, LinearSize{3, 5, 0}}) {
      const Pair x = make_pair({s.m, s.k}, dtype, Layout::contiguous, 1);
      const Pair w = make_pair({s.n, s.k}, dtype, Layout::contiguous, 2);
      const Pair out = make_output({s.m, s.n}, dtype);
      dev().linear(x.dev, w.dev, Tensor(), Epilogue::relu, out.dev);
      CHECK(out.dev.numel() == 0);
    }
    for (Epilogue epilogue : epilogues) {
      for (bool with_bias : {true, false}) {
        check_linear({4, 0, 6}, dtype, epilogue, with_bias, false, 7, tolerance(dtype));
      }
    }
  }
}

TEST_CASE("parity: linear: bad input throws Error naming linear") {
  if (!available()) return;
  const auto fails = error_check("linear");
  const Tensor x = on_dev({3, 4}), w = on_dev({5, 4}), b = on_dev({5}), out = on_dev({3, 5});
  fails([&] { dev().linear(x, on_dev({5, 3}), b, Epilogue::none, out); }, "shapes do not match");
  fails([&] { dev().linear(x, w, b, Epilogue::none, on_dev({3, 4})); }, "shapes do not match");
  fails([&] { dev().linear(x, w, on_dev({4}), Epilogue::none, out); }, "bias of shape [5]");
  fails([&] { dev().linear(on_dev({3, 4, 1}), w, b, Epilogue::none, out); }, "x [M, K]");
  fails([&] { dev().linear(x, w, on_dev({5}, DType::float64), Epilogue::relu, out); },
        "bias of dtype float32");
  fails(
      [&] {
        dev().linear(on_dev({3, 4}, DType::int64), on_dev({5, 4}, DType::int64), Tensor(),
                     Epilogue::none, on_dev({3, 5}, DType::int64));
      },
      "int64");
  fails(
      [&] {
        dev().linear(x, on_dev({4, 5}).transpose(0, 1), b, Epilogue::none, out);
      },
      "contiguous weight");
  fails(
      [&] {
        dev().linear(on_dev({4, 3}).transpose(0, 1), w, b, Epilogue::none, out);
      },
      "unit column stride");
  fails([&] { dev().linear(x, w, b, static_cast<Epilogue>(7), out); }, "unknown epilogue 7");
  const Tensor square = on_dev({5, 5});
  fails([&] { dev().linear(square, square, b, Epilogue::none, square); }, "shares memory");
  if (!device().is_cpu()) {  // a host tensor handed to a device backend
    fails([&] { dev().linear(empty({3, 4}), w, b, Epilogue::none, out); }, "expected x on");
  }
}

// --- linear_backward_epilogue ---

namespace {

TF_PARITY_COVERS(linear_backward_epilogue);

// The layer's output y for relu's cases: values in [-1, 1) with every third one exactly 0 (relu's
// derivative there is 0, like PyTorch's), in `dtype` on both sides.
Pair relu_output(std::int64_t m, std::int64_t n, DType dtype, std::uint64_t seed) {
  const Tensor values =
      raw::to_device(raw::to_dtype(make_pair({m, n}, DType::float64, Layout::contiguous, seed).ref,
                                   DType::float64),
                     Device::cpu());
  double* v = values.data<double>();
  for (std::int64_t i = 0; i < m * n; i += 3) v[i] = 0.0;
  return on_both(values, dtype);
}

// One case: grad [m, n] of `dtype`; grad_z in `z_dtype` (grad's, or bfloat16 for mixed
// precision) when with_z; grad_bias when with_bias. The reference computes in ref_dtype(dtype)
// and writes grad_z in the same dtype as the target, so a rounded grad_z must agree exactly.
void check_epilogue_grad(std::int64_t m, std::int64_t n, DType dtype, DType z_dtype,
                         Epilogue epilogue, bool with_z, bool with_bias, std::uint64_t seed) {
  const std::string what = std::string("linear_backward_epilogue ") + dtype_name(dtype) + " -> " +
                           dtype_name(z_dtype) + " " + epilogue_name(epilogue) + " [" +
                           std::to_string(m) + ", " + std::to_string(n) + "]" +
                           (with_z ? " grad_z" : "") + (with_bias ? " grad_bias" : "");
  INFO(what);
  const Pair grad = make_rounded_pair({m, n}, dtype, Layout::contiguous, seed);
  const Pair y = epilogue == Epilogue::relu ? relu_output(m, n, dtype, seed + 1) : Pair{};
  const DType ref_z = z_dtype == dtype ? ref_dtype(dtype) : z_dtype;
  const Pair z =
      with_z ? Pair{make_output({m, n}, ref_z).ref, make_rounded_output({m, n}, z_dtype).dev}
             : Pair{};
  const Pair b = with_bias ? make_rounded_output({n}, dtype) : Pair{};
  dev().linear_backward_epilogue(grad.dev, y.dev, epilogue, z.dev, b.dev);
  ref().linear_backward_epilogue(grad.ref, y.ref, epilogue, z.ref, b.ref);
  if (with_z) {
    // The masked values are grad's own, rounded at most once into grad_z: exact.
    check_close(raw::to_dtype(raw::to_device(z.dev, Device::cpu()), ref_dtype(z_dtype)),
                raw::to_dtype(z.ref, ref_dtype(z_dtype)), what + " grad_z", 0.0, 0.0);
  }
  // The reference sums in double; the target in another order, partly in the dtype (the CPU:
  // chains of 128 rows, added in double), within the dtype's tolerance.
  if (with_bias) check_close(b, what + " grad_bias");
}

}  // namespace

TEST_CASE("parity: linear_backward_epilogue: both epilogues, every output, odd and long shapes") {
  if (!available()) return;
  struct Size {
    std::int64_t m, n;
  };
  // Past one row block (64 rows) and past the CPU's 32 blocks and the GPU's 64 chunks; past one
  // column tile (2048 on the CPU).
  const Size sizes[] = {{1, 1}, {7, 33}, {130, 7}, {65, 130}, {4099, 3}, {5, 2050}};
  std::uint64_t seed = 3000;
  std::vector<std::pair<DType, DType>> kinds;
  for (DType dtype : floating_dtypes()) kinds.emplace_back(dtype, dtype);
  kinds.emplace_back(DType::float32, DType::bfloat16);  // mixed precision
  for (const auto& [dtype, z_dtype] : kinds) {
    for (const Size& s : sizes) {
      for (Epilogue epilogue : {Epilogue::none, Epilogue::relu}) {
        for (const auto& [with_z, with_bias] :
             {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
          check_epilogue_grad(s.m, s.n, dtype, z_dtype, epilogue, with_z, with_bias, seed);
          seed += 2;
        }
      }
    }
  }
}

TEST_CASE("parity: linear_backward_epilogue: a bias gradient over many rows keeps its accuracy") {
  // 2^18 rows of 0.1 (blocks of 8192 rows on the CPU): a float32 sum running along a whole
  // block would be off by about 3e-4 of the total; short chains keep it to float32 rounding.
  if (!available()) return;
  const std::int64_t m = std::int64_t{1} << 18, n = 3;
  const Pair grad = on_both(full({m, n}, 0.1, {.dtype = DType::float64}), DType::float32);
  const Pair b = make_rounded_output({n}, DType::float32);
  dev().linear_backward_epilogue(grad.dev, Tensor(), Epilogue::none, Tensor(), b.dev);
  ref().linear_backward_epilogue(grad.ref, Tensor(), Epilogue::none, Tensor(), b.ref);
  check_close(b, "linear_backward_epilogue: the bias gradient of 2^18 rows");
}

TEST_CASE("parity: linear_backward_epilogue: no rows gives a zero bias gradient; no columns") {
  if (!available()) return;
  for (DType dtype : floating_dtypes()) {
    INFO(dtype_name(dtype));
    const Pair grad = make_rounded_pair({0, 4}, dtype, Layout::contiguous, 1);
    const Pair b = make_rounded_output({4}, dtype);
    dev().linear_backward_epilogue(grad.dev, Tensor(), Epilogue::none, Tensor(), b.dev);
    ref().linear_backward_epilogue(grad.ref, Tensor(), Epilogue::none, Tensor(), b.ref);
    check_close(b, "linear_backward_epilogue of no rows");
    CHECK(raw::to_dtype(raw::to_device(b.dev, Device::cpu()), DType::float64).data<double>()[0] ==
          0.0);
    check_epilogue_grad(3, 0, dtype, dtype, Epilogue::relu, true, true, 5);
  }
}

TEST_CASE("parity: linear_backward_epilogue: bad input throws Error naming the op") {
  if (!available()) return;
  const auto fails = error_check("linear_backward_epilogue");
  const Tensor g = on_dev({3, 4}), y = on_dev({3, 4}), z = on_dev({3, 4}), b = on_dev({4});
  fails([&] { dev().linear_backward_epilogue(g, y, Epilogue::gelu, z, b); },
        "expected the epilogue none or relu");
  fails([&] { dev().linear_backward_epilogue(g, Tensor(), Epilogue::relu, z, b); },
        "expected the layer's output y");
  fails([&] { dev().linear_backward_epilogue(g, y, Epilogue::none, z, b); }, "no y");
  fails(
      [&] {
        dev().linear_backward_epilogue(g, y, Epilogue::relu, on_dev({4, 3}), b);
      },
      "grad_z of shape [3, 4]");
  fails([&] { dev().linear_backward_epilogue(g, y, Epilogue::relu, z, on_dev({3})); },
        "grad_bias of shape [4]");
  fails(
      [&] {
        dev().linear_backward_epilogue(g, y, Epilogue::relu, on_dev({3, 4}, DType::float64), b);
      },
      "grad_z of dtype float32");
  fails([&] { dev().linear_backward_epilogue(g, y, Epilogue::relu, g, b); }, "shares memory");
  fails(
      [&] { dev().linear_backward_epilogue(on_dev({12}), Tensor(), Epilogue::none, Tensor(), b); },
      "grad of shape [M, N]");
  fails(
      [&] {
        dev().linear_backward_epilogue(on_dev({4, 3}).transpose(0, 1), Tensor(), Epilogue::none, z,
                                       b);
      },
      "contiguous grad");
  fails(
      [&] {
        dev().linear_backward_epilogue(on_dev({3, 4}, DType::int64), Tensor(), Epilogue::none,
                                       Tensor(), Tensor());
      },
      "int64");
}
