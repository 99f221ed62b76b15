// CpuBackend::matmul: batched matrix products on oneDNN (float32) and OpenBLAS (float64, and
// small float32 products), with strided operands passed as they are whenever a GEMM can read them
// (gemm_operand in matmul.h decides; a copy is made only when it says so).
//
// Dispatch policy. Measured with OPENBLAS_CORETYPE=Haswell exported, as on the machines we run on,
// and in the same runs for both libraries (a sweep of sizes, and examples/benchmark_ops):
//
//   float32, batch of one, M*N*K <= 64^3: cblas_sgemm. Up to that size a product takes a few
//     microseconds, and OpenBLAS's fixed cost is the lower one. One thread, CPU time, AVX2:
//         8^3: 0.8 us against oneDNN's 1.6 us; 32^3: 1.8 us against 2.4 us; 64^3: 7.2 us both.
//   float32, anything larger or batched: one oneDNN matmul primitive for the whole batch, with
//     the transposes and the batch stride in its memory descriptors (a broadcast operand is a
//     batch of one, which oneDNN broadcasts). Measured in the same runs:
//       - AVX-512, 2 threads (~509 GFLOP/s peak): oneDNN 420-490 GFLOP/s on large products and
//         ~410 on 32 x [1024x64x1024]; OpenBLAS reads OPENBLAS_CORETYPE when it loads and then
//         runs its AVX2 kernels, ~240 GFLOP/s, and 140-200 as a loop over the attention batch.
//       - AVX2 (Zen), 2 threads (~190 peak), examples/benchmark_ops on a quiet machine:
//           1024^3: 12.2 ms through matmul() (oneDNN), raw oneDNN 12.6, cblas_sgemm 12.8;
//           2048^3: 92.3, 93.3, 93.8; 32 x [1024x64x1024] (K transposed): 25.1, 25.0, and 41.0
//           for the cblas loop; 32 x [1024x1024x64]: 23.9, 24.0, 28.1. OpenBLAS splits each
//           small product over the threads, oneDNN the whole batch. At 512^3 OpenBLAS was
//           ahead in two runs (1.64 ms against 2.08); other sizes from 256^3 to 1024^3 swing
//           either way by 5-15% from run to run, and on AVX-512 oneDNN is ahead everywhere.
//     oneDNN ignores OPENBLAS_CORETYPE, so float32 speed does not depend on the environment.
//   float32 with a transposed (column-major) first operand, the shape of every weight gradient
//     (dW = g^T x) and of attention's dV = P^T dO and dK = dS^T Q: cblas_sgemm per batch element,
//     where OpenBLAS's kernels are as wide as oneDNN's (blas_as_wide_as_dnnl: not on an AVX-512
//     CPU with OPENBLAS_CORETYPE=Haswell, where oneDNN reads the operand as it lies instead).
//     oneDNN 2.6 reads such an operand at half its speed on AVX2; OpenBLAS does not care. Quiet
//     AVX2, 2 threads, one process, medians: [1024x4096]^T [4096x256]: oneDNN 27.3 ms (79 GFLOP/s),
//     cblas 12.4 (174), and oneDNN 12.6 with the operand not transposed; [1024x1024]^T
//     [1024x64]: oneDNN 1.68 ms, cblas 0.92, oneDNN 0.76 not transposed.
//     Computing a tall A^T times a narrow B as (B^T A)^T on oneDNN instead (copying B^T and the
//     result) looked faster in a standalone program (16 x [4096x4096]^T[4096x64]: 238 ms
//     against 273) but was slower inside the framework, alternating in one process (16 x
//     [1024x1024]^T[1024x64]: 27.9 against 25.1 ms; 2048: 121 against 102), so it is not used.
//   float64: cblas_dgemm per batch element (oneDNN has no f64 matmul); gradient checks use it.
//   bfloat16: one oneDNN matmul with bfloat16 operands, float32 accumulation and a bfloat16
//     result, where oneDNN has a bfloat16 kernel for the CPU (2.x: AVX-512 and up; see
//     bf16_matmul_native). On AVX2 it has none: the operands are converted to float32, multiplied
//     on the float32 path and the result rounded to bfloat16, the same numbers up to the order of
//     the sums. Measured on AVX2 Zen, 2 threads, the conversions cost 5-15% against float32 in
//     the same run: 256^3 78 GFLOP/s (float32 91), 1024^3 41.6 (float32 44.8, a busy machine).
//   float32 under set_matmul_precision(MatmulPrecision::bf16), above the small-product size,
//     where bf16_matmul_fast() (bfloat16 instructions, not only kernels): both operands rounded to
//     bfloat16, one oneDNN bfloat16 product with float32 accumulation and a float32 result
//     (matmul_bf16_operands); the rounding costs M K + K N conversions against M N K multiply-adds.
//     Elsewhere (AVX2; AVX-512 without BF16, where oneDNN's bfloat16 kernels emulate and are slower
//     than float32) the setting changes nothing: the product is exact float32, as MatmulPrecision
//     allows.
//
// Products under 2^18 multiply-adds run oneDNN on the calling thread only (dnnl_threads).
#include "backends/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <optional>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_context.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

// Largest M*N*K that a float32 product with a batch of one sends to cblas_sgemm (see above).
constexpr std::int64_t kSmallGemm = 64 * 64 * 64;

int blas_int(std::int64_t v, const char* what) {
  TF_CHECK(v <= INT_MAX, "matmul: ", what, " ", v, " exceeds what BLAS can index (", INT_MAX, ")");
  return static_cast<int>(v);
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a, int lda,
          const float* b, int ldb, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const double* a, int lda,
          const double* b, int ldb, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

// out[i] = a[i] @ b[i] for i in [0, batch), one BLAS call each.
// a: [batch, M, K], b: [batch, K, N], out: [batch, M, N] contiguous
template <typename T>
void matmul_blas(const GemmInput& a, const GemmInput& b, T* out, std::int64_t batch, std::int64_t m,
                 std::int64_t k, std::int64_t n) {
  const int mi = blas_int(m, "M"), ni = blas_int(n, "N"), ki = blas_int(k, "K");
  const int lda = blas_int(a.layout.ld, "leading dimension"),
            ldb = blas_int(b.layout.ld, "leading dimension");
  const auto* pa = static_cast<const T*>(a.data);
  const auto* pb = static_cast<const T*>(b.data);
  for (std::int64_t i = 0; i < batch; ++i) {
    gemm(a.layout.transposed ? CblasTrans : CblasNoTrans,
         b.layout.transposed ? CblasTrans : CblasNoTrans, mi, ni, ki,
         pa + i * a.layout.batch_stride, lda, pb + i * b.layout.batch_stride, ldb, out + i * m * n,
         ni);
  }
}

// The oneDNN description of one operand: [batch or 1, rows, cols] with its own strides.
void describe(const GemmInput& p, std::int64_t batch, std::int64_t rows, std::int64_t cols,
              Shape& dims, Shape& strides) {
  const std::int64_t ld = p.layout.ld;
  // A broadcast operand is a batch of one, which oneDNN broadcasts itself (a batch stride of 0
  // would send it to its slow reference kernel).
  const std::int64_t span = ld * (p.layout.transposed ? cols : rows);
  dims = {p.layout.broadcast ? 1 : batch, rows, cols};
  strides = {p.layout.broadcast ? std::max<std::int64_t>(span, 1) : p.layout.batch_stride,
             p.layout.transposed ? 1 : ld, p.layout.transposed ? ld : 1};
}

// A oneDNN descriptor of float32 or bfloat16 elements (dnnl_desc takes float32 only).
dnnl::memory::desc matmul_desc(const Shape& dims, const Shape& strides, DType dtype) {
  if (dtype == DType::float32) return dnnl_desc(dims, strides, dtype, "matmul");
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()),
                            dnnl::memory::data_type::bf16,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

// a: [batch, M, K], b: [batch, K, N], out: [batch, M, N] contiguous; float32, or bfloat16 (with
// float32 accumulation inside oneDNN) where bf16_matmul_native(). The operands are of `dtype`
// (the output's unless given: bfloat16 operands may make a float32 output).
void matmul_dnnl(const GemmInput& a, const GemmInput& b, const Tensor& out, std::int64_t batch,
                 std::int64_t m, std::int64_t k, std::int64_t n,
                 std::optional<DType> operand_dtype = std::nullopt) {
  Shape a_dims, a_strides, b_dims, b_strides;
  describe(a, batch, m, k, a_dims, a_strides);
  describe(b, batch, k, n, b_dims, b_strides);
  const Shape c_dims = {batch, m, n}, c_strides = {m * n, n, 1};
  const DType dtype = out.dtype();
  const DType in_dtype = operand_dtype.value_or(dtype);
  PrimitiveKey key("matmul");
  key.add(static_cast<std::int64_t>(dtype)).add(static_cast<std::int64_t>(in_dtype));
  key.add(a_dims).add(a_strides).add(b_dims).add(b_strides).add(c_dims);
  const auto a_desc = matmul_desc(a_dims, a_strides, in_dtype);
  const auto b_desc = matmul_desc(b_dims, b_strides, in_dtype);
  const auto c_desc = matmul_desc(c_dims, c_strides, dtype);
  const CachedPrimitive p = cached_primitive(
      key,
      [&] {
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), dnnl_attr(),
                                        dnnl_engine());
        return CachedPrimitive{dnnl::matmul(pd), pd};
      },
      batch * m * n * k);
  auto& engine = dnnl_engine();
  dnnl_execute(p,
               {{DNNL_ARG_SRC, dnnl::memory(a_desc, engine, const_cast<void*>(a.data))},
                {DNNL_ARG_WEIGHTS, dnnl::memory(b_desc, engine, const_cast<void*>(b.data))},
                {DNNL_ARG_DST, dnnl_memory(c_desc, out)}},
               "matmul", batch * m * n * k);
}

// `t` ([B, rows, cols]) converted to `dtype`, of the same shape; a broadcast operand converts its
// one matrix and stays a stride-0 view.
Tensor converted(const Tensor& t, DType dtype) {
  const bool broadcast = t.size(0) > 1 && t.stride(0) == 0;
  const Tensor one = broadcast ? raw::as_strided(t, {1, t.size(1), t.size(2)},
                                                 {0, t.stride(1), t.stride(2)}, t.offset())
                               : t;
  const Tensor result = raw::to_dtype(one, dtype);
  return broadcast ? raw::expand(result, t.shape(), "matmul") : result;
}

// True when OpenBLAS's float32 kernels are as wide as oneDNN's on this CPU. False on an AVX-512
// CPU whose OpenBLAS runs AVX2 kernels (OPENBLAS_CORETYPE=Haswell, or a build that does not
// know the CPU): there the cblas routes of the dispatch policy would run at half speed.
bool blas_as_wide_as_dnnl() {
  static const bool wide = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    const bool dnnl_avx512 =
        isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
        isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
    if (!dnnl_avx512) return true;
    std::string core = openblas_get_corename();
    std::transform(core.begin(), core.end(), core.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    for (const char* avx512_core : {"skylakex", "cooperlake", "sapphirerapids"}) {
      if (core.find(avx512_core) != std::string::npos) return true;
    }
    return false;
  }();
  return wide;
}

// float32 operands under MatmulPrecision::bf16 on a CPU with bfloat16 instructions: the operands
// are rounded to bfloat16 (to nearest even, once each) and multiplied with float32 accumulation
// into the float32 out.
void matmul_bf16_operands(const Tensor& a, const Tensor& b, const Tensor& out) {
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  const Tensor a16 = converted(a, DType::bfloat16), b16 = converted(b, DType::bfloat16);
  matmul_dnnl(gemm_input(a16), gemm_input(b16), out, batch, m, k, n, DType::bfloat16);
}

}  // namespace

bool bf16_matmul_native() {
  // oneDNN answers "unimplemented" when it has no bfloat16 kernel for this CPU; asking once
  // with a small product answers for every shape.
  static const bool native = [] {
    try {
      const dnnl::memory::desc d({1, 16, 16}, dnnl::memory::data_type::bf16,
                                 dnnl::memory::format_tag::abc);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d, d, d), dnnl_attr(), dnnl_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

bool bf16_matmul_fast() {
  static const bool fast = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return bf16_matmul_native() &&
           (isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx);
  }();
  return fast;
}

// a: [B, M, K], b: [B, K, N] (any strides; a batch stride of 0 broadcasts), out: [B, M, N].
void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_matmul_args(a, b, out, *this);
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum: every element is 0 (all-zero bits in IEEE float and double)
    std::memset(out.data_ptr(), 0,
                static_cast<std::size_t>(out.numel()) * element_size(out.dtype()));
    return;
  }
  if (out.dtype() == DType::bfloat16 && !bf16_matmul_native()) {
    // float32 products of the exactly converted operands, rounded once at the end.
    const Tensor product = empty(out.shape());
    matmul(converted(a, DType::float32), converted(b, DType::float32), product);
    copy(product, out);
    return;
  }
  if (out.dtype() == DType::float32 && matmul_precision() == MatmulPrecision::bf16 &&
      bf16_matmul_fast() && m * n * k > kSmallGemm) {
    matmul_bf16_operands(a, b, out);
    return;
  }
  const GemmInput pa = gemm_input(a), pb = gemm_input(b);
  // When both operands are broadcast every output matrix is the same: compute one, copy it.
  const std::int64_t runs = pa.layout.broadcast && pb.layout.broadcast ? 1 : batch;
  if (out.dtype() == DType::float64) {
    matmul_blas(pa, pb, out.data<double>(), runs, m, k, n);
  } else if (out.dtype() == DType::float32 && runs == 1 && m * n * k <= kSmallGemm) {
    matmul_blas(pa, pb, out.data<float>(), 1, m, k, n);
  } else if (out.dtype() == DType::float32 && pa.layout.transposed && m > 1 &&
             blas_as_wide_as_dnnl()) {
    // A column-major first operand (the gradients dW = g^T x and dV = P^T dO): oneDNN 2.6 runs
    // these at half its speed, OpenBLAS at full speed (see the dispatch policy above).
    matmul_blas(pa, pb, out.data<float>(), runs, m, k, n);
  } else {
    const Tensor first =
        runs == batch ? out : raw::as_strided(out, {1, m, n}, {m * n, n, 1}, out.offset());
    matmul_dnnl(pa, pb, first, runs, m, k, n);
  }
  if (runs == 1 && batch > 1) {
    const std::size_t bytes = static_cast<std::size_t>(m * n) * element_size(out.dtype());
    auto* base = static_cast<char*>(out.data_ptr());
    for (std::int64_t i = 1; i < batch; ++i) std::memcpy(base + i * bytes, base, bytes);
  }
}

}  // namespace tinyformer::cpu
