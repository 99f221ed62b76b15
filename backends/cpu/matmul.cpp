// CpuBackend::matmul: batched matrix products on oneDNN and OpenBLAS, with strided operands passed
// as they are whenever a GEMM can read them (gemm_operand in matmul.h decides; a copy is made only
// when it says so). Which library runs which product (benchmark_ops --quick times the products
// against raw OpenBLAS and oneDNN; docs/matmul.md has the measurements):
//   float32, batch of one, M*N*K <= 64^3: cblas_sgemm (the lower fixed cost at that size);
//   float32, larger or batched: one oneDNN matmul primitive for the whole batch, transposes and
//     batch stride in its memory descriptors, broadcast operands as a batch of one;
//   float32 with a transposed first operand (every weight gradient, attention's dV and dK):
//     cblas_sgemm per batch element where oneDNN runs below AVX-512 (transposed_first_on_blas),
//     since oneDNN 2.6 reads such an operand at half speed on AVX2; on AVX-512, a single such
//     product at least twice as wide as tall with K >= 4096 runs as out^T = b^T a (the faster
//     orientation there) into scratch, transposed into out (swap_orientation); other single
//     ones with M <= 512 on the library's own kernel (matmul_tn, avx512::gemm_tn), the rest on
//     oneDNN;
//   float64: cblas_dgemm per batch element (oneDNN has no float64 matmul);
//   bfloat16: one oneDNN bfloat16 product with float32 accumulation where oneDNN has a bfloat16
//     kernel for this CPU (bf16_matmul_native), else float32 products of the widened operands;
//     a single mixed-precision weight gradient (bfloat16 operands, the first transposed, a
//     float32 out, M <= 512) on the own kernel where the CPU has AVX512-BF16 but oneDNN does not
//     run AMX (matmul_tn, avx512::gemm_tn_bf16; with AMX, oneDNN's tiles run several times
//     faster);
//   float32 under set_matmul_precision(bf16), above the small-product size and where the CPU has
//     bfloat16 instructions (bf16_matmul_fast): both operands rounded to bfloat16, one bfloat16
//     product with a float32 result (matmul_bf16_operands); elsewhere exact float32.
// Products under 2^18 multiply-adds run oneDNN on the calling thread only (dnnl_threads).
#include "backends/cpu/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backends/cpu/avx512.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_context.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

int blas_int(std::int64_t v, const char* op, const char* what) {
  TF_CHECK(v <= INT_MAX, op, ": ", what, " ", v, " exceeds what BLAS can index (", INT_MAX, ")");
  return static_cast<int>(v);
}

namespace {

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a, int lda,
          const float* b, int ldb, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const double* a, int lda,
          const double* b, int ldb, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

// out[i] = a[i] @ b[i] for i in [0, batch), one BLAS call each.
// a: [batch, M, K], b: [batch, K, N], out: [batch, M, N] laid out as c
template <typename T>
void matmul_blas(const GemmInput& a, const GemmInput& b, T* out, const GemmOutput& c,
                 std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n) {
  const int mi = blas_int(m, "matmul", "M"), ni = blas_int(n, "matmul", "N"),
            ki = blas_int(k, "matmul", "K");
  const int lda = blas_int(a.layout.ld, "matmul", "leading dimension"),
            ldb = blas_int(b.layout.ld, "matmul", "leading dimension"),
            ldc = blas_int(c.ld, "matmul", "leading dimension");
  const auto* pa = static_cast<const T*>(a.data);
  const auto* pb = static_cast<const T*>(b.data);
  for (std::int64_t i = 0; i < batch; ++i) {
    gemm(a.layout.transposed ? CblasTrans : CblasNoTrans,
         b.layout.transposed ? CblasTrans : CblasNoTrans, mi, ni, ki,
         pa + i * a.layout.batch_stride, lda, pb + i * b.layout.batch_stride, ldb,
         out + i * c.batch_stride, ldc);
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

// One oneDNN matmul over operands and out described by dims and strides (3-D, or 4-D for two batch
// dims): a at a_data, b at b_data, both of in_dtype, into out. `optional`: where oneDNN has no
// kernel for the layout, or only its reference one, nothing runs and the answer is false (the
// caller then takes another route); otherwise such a layout is an Error. The primitive is cached.
bool run_matmul_primitive(const Shape& a_dims, const Shape& a_strides, const void* a_data,
                          const Shape& b_dims, const Shape& b_strides, const void* b_data,
                          DType in_dtype, const Tensor& out, const Shape& c_dims,
                          const Shape& c_strides, std::int64_t work, bool optional) {
  const DType dtype = out.dtype();
  PrimitiveKey key("matmul");
  key.add(static_cast<std::int64_t>(dtype)).add(static_cast<std::int64_t>(in_dtype));
  key.add(a_dims).add(a_strides).add(b_dims).add(b_strides).add(c_dims).add(c_strides);
  key.add(optional ? 1 : 0);
  const auto a_desc = matmul_desc(a_dims, a_strides, in_dtype);
  const auto b_desc = matmul_desc(b_dims, b_strides, in_dtype);
  const auto c_desc = matmul_desc(c_dims, c_strides, dtype);
  const CachedPrimitive p = cached_primitive(
      key,
      [&] {
        const auto make = [&] {
          return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_desc, b_desc, c_desc),
                                              dnnl_attr(), dnnl_engine());
        };
        if (!optional) {
          const auto pd = make();
          return CachedPrimitive{dnnl::matmul(pd), pd};
        }
        // An empty primitive marks a layout left to the caller.
        try {
          const auto pd = make();
          if (std::string_view(pd.impl_info_str()).starts_with("ref")) return CachedPrimitive{};
          return CachedPrimitive{dnnl::matmul(pd), pd};
        } catch (const dnnl::error&) {
          return CachedPrimitive{};
        }
      },
      dnnl_threads(work));
  if (!p.primitive) return false;
  auto& engine = dnnl_engine();
  dnnl_execute(p,
               {{DNNL_ARG_SRC, dnnl::memory(a_desc, engine, const_cast<void*>(a_data))},
                {DNNL_ARG_WEIGHTS, dnnl::memory(b_desc, engine, const_cast<void*>(b_data))},
                {DNNL_ARG_DST, dnnl_memory(c_desc, out)}},
               "matmul", dnnl_threads(work));
  return true;
}

// a: [batch, M, K], b: [batch, K, N], out: [batch, M, N] (gemm_output's layouts); float32, or
// bfloat16 (with float32 accumulation inside oneDNN) where bf16_matmul_native(). The operands are
// of `dtype` (the output's unless given: bfloat16 operands may make a float32 output).
void matmul_dnnl(const GemmInput& a, const GemmInput& b, const Tensor& out, std::int64_t batch,
                 std::int64_t m, std::int64_t k, std::int64_t n,
                 std::optional<DType> operand_dtype = std::nullopt) {
  Shape a_dims, a_strides, b_dims, b_strides;
  describe(a, batch, m, k, a_dims, a_strides);
  describe(b, batch, k, n, b_dims, b_strides);
  const GemmOutput c = gemm_output(out);
  run_matmul_primitive(a_dims, a_strides, a.data, b_dims, b_strides, b.data,
                       operand_dtype.value_or(out.dtype()), out, {batch, m, n},
                       {c.batch_stride, c.ld, 1}, batch * m * n * k, false);
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

// True where a float32 product with a transposed first operand runs faster on OpenBLAS than on
// oneDNN: where oneDNN runs below AVX-512, whose kernels read such an operand at half speed,
// and OpenBLAS's are as wide. On AVX-512, oneDNN is ahead (docs/matmul.md).
bool transposed_first_on_blas() {
  return !dnnl_runs_avx512();
}

// float32 operands under MatmulPrecision::bf16 on a CPU with bfloat16 instructions: the operands
// are rounded to bfloat16 (to nearest even, once each) and multiplied with float32 accumulation
// into the float32 out.
void matmul_bf16_operands(const Tensor& a, const Tensor& b, const Tensor& out) {
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  const Tensor a16 = converted(a, DType::bfloat16), b16 = converted(b, DType::bfloat16);
  matmul_dnnl(gemm_input(a16), gemm_input(b16), out, batch, m, k, n, DType::bfloat16);
}

// A [B1, B2, rows, cols] operand of a product with two batch dims as oneDNN describes it: a
// batch dim of size 1 or stride 0 is a broadcast dim of size 1. The matrix strides come from
// gemm_operand of one entry.
void describe4(const Tensor& t, const GemmOperand& entry, Shape& dims, Shape& strides) {
  const std::int64_t rows = t.size(2), cols = t.size(3);
  const std::int64_t row_stride = entry.transposed ? 1 : entry.ld;
  const std::int64_t col_stride = entry.transposed ? entry.ld : 1;
  const std::int64_t matrix = entry.ld * (entry.transposed ? cols : rows);
  const std::int64_t inner = entry.broadcast ? 1 : t.size(1);
  const std::int64_t inner_stride =
      entry.broadcast ? matrix : std::max<std::int64_t>(t.stride(1), 1);
  const bool outer_broadcast = t.size(0) == 1 || t.stride(0) == 0;
  dims = {outer_broadcast ? 1 : t.size(0), inner, rows, cols};
  strides = {outer_broadcast ? inner * inner_stride : t.stride(0), inner_stride, row_stride,
             col_stride};
}

// Whether a product with two batch dims runs as one oneDNN primitive (matmul_dnnl4) rather than
// one product per entry of the first: where the one-batch-dim product would be oneDNN's too
// (float32 or native bfloat16, no rounding of float32 operands, no transposed-first float32
// operand below AVX-512), every matrix dim exceeds 1 (no degenerate strides), and the product
// is not a column-major b with M*N of at least kLargeScores: there (attention's scores Q K^T
// at n >= 512) oneDNN 2.6's blocked kernel runs below its jit GEMM on the entries, except for
// bfloat16 on AMX, where only the blocked kernel uses the tiles (benchmark_libtorch --profile
// shows the scores' product in the layer; docs/matmul.md).
bool matmul4_on_dnnl(const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr std::int64_t kLargeScores = std::int64_t{1} << 18;
  const std::int64_t m = out.size(2), n = out.size(3), k = a.size(3);
  if (m <= 1 || n <= 1 || k <= 1) return false;
  if (out.dtype() == DType::float64) return false;
  const bool b_column_major = b.stride(2) == 1 && b.stride(3) != 1;
  if (b_column_major && m * n >= kLargeScores &&
      !(a.dtype() == DType::bfloat16 && bf16_matmul_amx())) {
    return false;
  }
  if (a.dtype() == DType::bfloat16) return bf16_matmul_native();
  if (matmul_precision() == MatmulPrecision::bf16 && bf16_matmul_fast() && m * n * k > kSmallGemm) {
    return false;
  }
  const bool a_column_major = a.stride(2) == 1 && a.stride(3) != 1;
  return !(a_column_major && transposed_first_on_blas());
}

// a: [B1, B2, M, K], b: [B1, B2, K, N], out: [B1, B2, M, N] as one oneDNN matmul, which takes
// the two batch strides in its descriptors and so runs its blocked (brgemm) kernel where a batch
// of interleaved matrices gets only its jit GEMM. False (nothing run) where an operand needs a
// copy, or where oneDNN has no kernel for the layout (some broadcasts) or only its reference one.
bool matmul_dnnl4(const Tensor& a, const Tensor& b, const Tensor& out) {
  const Tensor a0 = matmul_entry(a, 0), b0 = matmul_entry(b, 0);
  const GemmOperand ea = gemm_operand(a0.shape(), a0.strides());
  const GemmOperand eb = gemm_operand(b0.shape(), b0.strides());
  if (ea.copy || eb.copy) return false;
  const GemmOutput ec = gemm_output(matmul_entry(out, 0));
  Shape a_dims, a_strides, b_dims, b_strides;
  describe4(a, ea, a_dims, a_strides);
  describe4(b, eb, b_dims, b_strides);
  return run_matmul_primitive(a_dims, a_strides, a.data_ptr(), b_dims, b_strides, b.data_ptr(),
                              a.dtype(), out, out.shape(),
                              {out.stride(0), std::max<std::int64_t>(ec.batch_stride, 1), ec.ld, 1},
                              out.numel() * a.size(3), true);
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

bool bf16_matmul_amx() {
  static const bool amx = bf16_matmul_native() && dnnl_runs_amx();
  return amx;
}

// A float32 product out = a^T b of one matrix, a read column-major (a weight gradient g^T x), with
// out at least twice as wide as tall and a sum of at least kSwapMinK terms: oneDNN 2.6 on AVX-512
// runs the other orientation, out^T = b^T a, faster there; with shorter sums the two tie and the
// transpose does not pay. Such a product is computed that way into scratch and transposed into
// out (benchmark_libtorch --n 1024 4096 --k 128 --profile shows the product's rate in the
// layer; docs/matmul.md).
constexpr std::int64_t kSwapMinK = 4096;
bool swap_orientation(const GemmInput& pa, const GemmInput& pb, std::int64_t m, std::int64_t k,
                      std::int64_t n) {
  return pa.layout.transposed && !pb.layout.transposed && k >= kSwapMinK && n >= 2 * m;
}

// K rows per part of matmul_tn's sum: parts are summed in order at the end, so a part's size is
// fixed by the shape alone and the result has the same bits on any number of threads.
constexpr std::int64_t kTnPartRows = 4096;
constexpr std::int64_t kTnMaxRows = 512;

// out [M, N] (row stride ldc, float32) = a^T b for a [K, M] (row stride lda) and b [K, N] (row
// stride ldb) on avx512::gemm_tn (float32 T) or avx512::gemm_tn_bf16 (bfloat16's bits, T =
// std::uint16_t). The sum over K runs in parts of about kTnPartRows rows, part 0
// straight into out and the others into scratch, added to it in order; where there are fewer
// parts than threads, each part's columns are cut into groups of 64-column panels, and where
// there are too few panels, its rows into groups of 6-row tiles. One (part, columns, rows) item
// per thread at a time.
template <typename T>
void matmul_tn(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, float* out,
               std::int64_t ldc, std::int64_t m, std::int64_t k, std::int64_t n) {
  const std::int64_t parts = std::max<std::int64_t>(1, (k + kTnPartRows / 2) / kTnPartRows);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const std::int64_t per_part = std::max<std::int64_t>(1, (threads + parts - 1) / parts);
  const std::int64_t panels = (n + 63) / 64, tiles = (m + 5) / 6;
  const std::int64_t column_groups = std::min(panels, per_part);
  const std::int64_t row_groups = std::min(tiles, (per_part + column_groups - 1) / column_groups);
  const Tensor partial = parts > 1 ? empty({(parts - 1) * m * n}) : Tensor();
  float* const extra = parts > 1 ? partial.data<float>() : nullptr;
  const std::int64_t items = parts * column_groups * row_groups;
#pragma omp parallel for schedule(static) num_threads(threads) if (items > 1 && threads > 1)
  for (std::int64_t item = 0; item < items; ++item) {
    const std::int64_t p = item / (column_groups * row_groups);
    const std::int64_t g = item / row_groups % column_groups, h = item % row_groups;
    const std::int64_t k0 = k * p / parts, k1 = k * (p + 1) / parts;
    const std::int64_t c0 = panels * g / column_groups * 64,
                       c1 = std::min(n, panels * (g + 1) / column_groups * 64);
    const std::int64_t r0 = tiles * h / row_groups * 6,
                       r1 = std::min(m, tiles * (h + 1) / row_groups * 6);
    float* dst = p == 0 ? out : extra + (p - 1) * m * n;
    const std::int64_t ld = p == 0 ? ldc : n;
    if constexpr (std::is_same_v<T, float>) {
      std::vector<float> scratch(static_cast<std::size_t>(avx512::gemm_tn_scratch_size()));
      avx512::gemm_tn(r1 - r0, c1 - c0, k1 - k0, a + k0 * lda + r0, lda, b + k0 * ldb + c0, ldb,
                      dst + r0 * ld + c0, ld, scratch.data());
    } else {
      std::vector<std::uint32_t> scratch(
          static_cast<std::size_t>(avx512::gemm_tn_bf16_scratch_size(r1 - r0)));
      avx512::gemm_tn_bf16(r1 - r0, c1 - c0, k1 - k0, a + k0 * lda + r0, lda, b + k0 * ldb + c0,
                           ldb, dst + r0 * ld + c0, ld, scratch.data());
    }
  }
  if (parts == 1) return;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (std::int64_t i = 0; i < m; ++i) {
    float* row = out + i * ldc;
    for (std::int64_t p = 1; p < parts; ++p) {
      const float* add = extra + (p - 1) * m * n + i * n;
#pragma omp simd
      for (std::int64_t j = 0; j < n; ++j) row[j] += add[j];
    }
  }
}

// Whether out = a^T b of one matrix (a column-major, b row-major: a weight gradient) runs on
// matmul_tn: float32, or bfloat16 operands with a float32 out (mixed precision) where the CPU has
// AVX512-BF16 and oneDNN's bfloat16 kernels are on (bf16_matmul_fast: DNNL_MAX_CPU_ISA turns
// both off). Neither where oneDNN runs AMX (dnnl_runs_amx): its bfloat16 kernel on the tiles
// outruns the own kernel's dot products, and its float32 kernel is ahead of the own one there too
// (docs/matmul.md).
bool tn_on_avx512(const GemmInput& pa, const GemmInput& pb, std::int64_t m, std::int64_t k,
                  std::int64_t n, bool mixed) {
  if (dnnl_runs_amx()) return false;
  return (mixed ? avx512::bf16_available() && bf16_matmul_fast() : avx512::available()) &&
         pa.layout.transposed && !pb.layout.transposed && m > 1 && m <= kTnMaxRows &&
         m * n * k > kSmallGemm;
}

// a: [B, M, K], b: [B, K, N] (any strides; a batch stride of 0 broadcasts), out: [B, M, N]
// (row-major matrices at any non-overlapping strides: gemm_output).
void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_matmul_args(a, b, out, *this);
  if (out.numel() == 0) return;
  if (a.size(-1) == 0) {  // an empty sum: every element is 0
    fill(out, 0.0);
    return;
  }
  if (out.dim() == 4) {
    if (!matmul4_on_dnnl(a, b, out) || !matmul_dnnl4(a, b, out)) {
      for (std::int64_t i = 0; i < out.size(0); ++i) {
        matmul(matmul_entry(a, i), matmul_entry(b, i), matmul_entry(out, i));
      }
    }
    return;
  }
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  // Mixed precision: bfloat16 operands, and the kernel's float32 accumulator written as the
  // float32 out (no rounding of the result).
  const bool mixed = a.dtype() == DType::bfloat16 && out.dtype() == DType::float32;
  if (mixed && !bf16_matmul_native()) {
    matmul(converted(a, DType::float32), converted(b, DType::float32), out);
    return;
  }
  if (out.dtype() == DType::bfloat16 && !bf16_matmul_native()) {
    // float32 products of the exactly converted operands, rounded once at the end.
    const Tensor product = empty(out.shape());
    matmul(converted(a, DType::float32), converted(b, DType::float32), product);
    copy(product, out);
    return;
  }
  if (!mixed && out.dtype() == DType::float32 && matmul_precision() == MatmulPrecision::bf16 &&
      bf16_matmul_fast() && m * n * k > kSmallGemm) {
    matmul_bf16_operands(a, b, out);
    return;
  }
  const GemmInput pa = gemm_input(a), pb = gemm_input(b);
  const GemmOutput c = gemm_output(out);
  // When both operands are broadcast every output matrix is the same: compute one, copy it.
  const std::int64_t runs = pa.layout.broadcast && pb.layout.broadcast ? 1 : batch;
  if (out.dtype() == DType::float64) {
    matmul_blas(pa, pb, out.data<double>(), c, runs, m, k, n);
  } else if (!mixed && out.dtype() == DType::float32 && runs == 1 && m * n * k <= kSmallGemm) {
    matmul_blas(pa, pb, out.data<float>(), c, 1, m, k, n);
  } else if (!mixed && out.dtype() == DType::float32 && pa.layout.transposed && m > 1 &&
             transposed_first_on_blas()) {
    // A column-major first operand (the gradients dW = g^T x and dV = P^T dO) below AVX-512:
    // oneDNN 2.6 runs these at half its speed, OpenBLAS at full speed (the policy above).
    matmul_blas(pa, pb, out.data<float>(), c, runs, m, k, n);
  } else if (!mixed && out.dtype() == DType::float32 && batch == 1 &&
             swap_orientation(pa, pb, m, k, n)) {
    // out^T [N, M] = b^T a: b^T read column-major, a^T's storage row-major.
    const Tensor swapped = empty({1, n, m});
    matmul(raw::as_strided(b, {1, n, k}, {b.stride(0), b.stride(2), b.stride(1)}, b.offset()),
           raw::as_strided(a, {1, k, m}, {a.stride(0), a.stride(2), a.stride(1)}, a.offset()),
           swapped);
    transpose_into(swapped.data<float>(), n, m, out.data<float>(), c.ld);
  } else if (!mixed && out.dtype() == DType::float32 && batch == 1 &&
             tn_on_avx512(pa, pb, m, k, n, false)) {
    matmul_tn(static_cast<const float*>(pa.data), pa.layout.ld, static_cast<const float*>(pb.data),
              pb.layout.ld, out.data<float>(), c.ld, m, k, n);
  } else if (mixed && batch == 1 && tn_on_avx512(pa, pb, m, k, n, true)) {
    matmul_tn(static_cast<const std::uint16_t*>(pa.data), pa.layout.ld,
              static_cast<const std::uint16_t*>(pb.data), pb.layout.ld, out.data<float>(), c.ld, m,
              k, n);
  } else {
    const Tensor first =
        runs == batch ? out : raw::as_strided(out, {1, m, n}, {m * c.ld, c.ld, 1}, out.offset());
    matmul_dnnl(pa, pb, first, runs, m, k, n, a.dtype());
  }
  if (runs == 1 && batch > 1) {
    // out[1:] = out[0], read as a stride-0 batch.
    const Tensor rest =
        raw::as_strided(out, {batch - 1, m, n}, out.strides(), out.offset() + out.stride(0));
    copy(raw::as_strided(out, rest.shape(), {0, out.stride(1), out.stride(2)}, out.offset()), rest);
  }
}

}  // namespace tinyformer::cpu
