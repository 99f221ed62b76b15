// Parity of the fused linear op (product, bias and activation in one call) against the reference
// backend: every epilogue in every dtype, with and without bias, odd sizes, x contiguous and as
// rows of a wider matrix; float32 through the reduced-precision math modes; empty problems and an
// empty sum; bad input. A bfloat16 case compares with the reference's float32 result on the same
// (bfloat16-rounded) inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
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
  auto on_dev = [](const Shape& shape, DType dtype = DType::float32) {
    return empty(shape, {.dtype = dtype, .device = device()});
  };
  auto fails = [](auto&& call, const std::string& part) {
    const std::string msg = error_of(call);
    INFO(msg);
    CHECK(msg.find("linear") != std::string::npos);
    CHECK(msg.find(part) != std::string::npos);
  };
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
