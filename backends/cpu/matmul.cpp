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
//   float64: cblas_dgemm per batch element (oneDNN has no f64 matmul); gradient checks use it.
//
// Products under 2^18 multiply-adds run oneDNN on the calling thread only (dnnl_threads).
#include "backends/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_context.h"
#include "core/error.h"

namespace tinyformer::cpu {

namespace {

// Largest M*N*K that a float32 product with a batch of one sends to cblas_sgemm (see above).
constexpr std::int64_t kSmallGemm = 64 * 64 * 64;

// True when no two elements of the layout share an address (sizes of 1 are ignored).
bool non_overlapping(const Shape& dims, const Shape& strides) {
  std::vector<std::size_t> order;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] > 1) order.push_back(d);
  }
  std::sort(order.begin(), order.end(),
            [&](std::size_t x, std::size_t y) { return strides[x] > strides[y]; });
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    if (strides[order[i]] < strides[order[i + 1]] * dims[order[i + 1]]) return false;
  }
  return order.empty() || strides[order.back()] > 0;
}

}  // namespace

GemmOperand gemm_operand(const Shape& shape, const Shape& strides) {
  TF_CHECK(shape.size() == 3 && strides.size() == 3, "matmul: expected a [batch, rows, cols] ",
           "operand, got shape ", shape_str(shape), " with strides ", shape_str(strides));
  const std::int64_t batch = shape[0], rows = shape[1], cols = shape[2];
  const std::int64_t rs = strides[1], cs = strides[2];
  GemmOperand op;
  op.broadcast = batch == 1 || strides[0] == 0;
  op.batch_stride = op.broadcast ? 0 : strides[0];
  // A stride only matters along a dimension longer than 1; the leading dimension must cover the
  // other dimension so that rows (or columns) do not overlap, and be at least 1 for BLAS.
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= std::max<std::int64_t>(cols, 1))) {
    op.ld = rows <= 1 ? std::max<std::int64_t>(cols, 1) : rs;
  } else if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= std::max<std::int64_t>(rows, 1))) {
    op.transposed = true;
    op.ld = cols <= 1 ? std::max<std::int64_t>(rows, 1) : cs;
  } else {
    op.copy = true;
    return op;
  }
  if (!op.broadcast) {
    const Shape norm = {op.batch_stride, op.transposed ? 1 : op.ld, op.transposed ? op.ld : 1};
    op.copy = !non_overlapping(shape, norm);
  }
  return op;
}

namespace {

// One operand, packed if gemm_operand says so. `data` points at batch 0.
struct Prepared {
  Tensor storage;  // keeps a packed copy alive
  GemmOperand layout;
  const void* data = nullptr;
};

Prepared prepare(const Tensor& t) {
  Prepared p{t, gemm_operand(t.shape(), t.strides()), t.data_ptr()};
  if (!p.layout.copy) return p;
  // A broadcast operand is one matrix: pack just that one.
  const Tensor source =
      p.layout.broadcast && t.size(0) > 1
          ? raw::as_strided(t, {1, t.size(1), t.size(2)}, {0, t.stride(1), t.stride(2)}, t.offset())
          : t;
  Tensor packed = empty(source.shape(), {.dtype = t.dtype()});
  raw::copy(source, packed);
  p = {packed, gemm_operand(packed.shape(), packed.strides()), packed.data_ptr()};
  TF_CHECK(!p.layout.copy, "matmul: internal error: a packed operand is not GEMM-readable");
  return p;
}

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
void matmul_blas(const Prepared& a, const Prepared& b, T* out, std::int64_t batch, std::int64_t m,
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
void describe(const Prepared& p, std::int64_t batch, std::int64_t rows, std::int64_t cols,
              Shape& dims, Shape& strides) {
  const std::int64_t ld = p.layout.ld;
  // A broadcast operand is a batch of one, which oneDNN broadcasts itself (a batch stride of 0
  // would send it to its slow reference kernel).
  const std::int64_t span = ld * (p.layout.transposed ? cols : rows);
  dims = {p.layout.broadcast ? 1 : batch, rows, cols};
  strides = {p.layout.broadcast ? std::max<std::int64_t>(span, 1) : p.layout.batch_stride,
             p.layout.transposed ? 1 : ld, p.layout.transposed ? ld : 1};
}

// a: [batch, M, K], b: [batch, K, N], out: [batch, M, N] contiguous; float32.
void matmul_dnnl(const Prepared& a, const Prepared& b, const Tensor& out, std::int64_t batch,
                 std::int64_t m, std::int64_t k, std::int64_t n) {
  Shape a_dims, a_strides, b_dims, b_strides;
  describe(a, batch, m, k, a_dims, a_strides);
  describe(b, batch, k, n, b_dims, b_strides);
  const Shape c_dims = {batch, m, n}, c_strides = {m * n, n, 1};
  PrimitiveKey key("matmul");
  key.add(a_dims).add(a_strides).add(b_dims).add(b_strides).add(c_dims);
  const auto a_desc = dnnl_desc(a_dims, a_strides, DType::float32, "matmul");
  const auto b_desc = dnnl_desc(b_dims, b_strides, DType::float32, "matmul");
  const auto c_desc = dnnl_desc(c_dims, c_strides, DType::float32, "matmul");
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

void check_operands(const Tensor& a, const Tensor& b, const Tensor& out) {
  TF_CHECK(a.defined() && b.defined() && out.defined(),
           "matmul: expected defined a, b and out, got an undefined Tensor");
  TF_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3,
           "matmul: expected a [B, M, K], b [B, K, N] and out [B, M, N], got ",
           shape_str(a.shape()), ", ", shape_str(b.shape()), " and ", shape_str(out.shape()));
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  TF_CHECK((a.size(0) == batch || a.size(0) == 1) && (b.size(0) == batch || b.size(0) == 1) &&
               a.size(1) == m && b.size(1) == k && b.size(2) == n,
           "matmul: shapes do not match: ", shape_str(a.shape()), " @ ", shape_str(b.shape()),
           " into ", shape_str(out.shape()));
  TF_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype() && is_floating(a.dtype()),
           "matmul: expected float32 or float64 operands of one dtype, got ", a.dtype(), ", ",
           b.dtype(), " and ", out.dtype());
  TF_CHECK(a.device().is_cpu() && b.device().is_cpu() && out.device().is_cpu(),
           "matmul: the CPU backend got a tensor on ",
           !a.device().is_cpu()   ? a.device()
           : !b.device().is_cpu() ? b.device()
                                  : out.device());
  TF_CHECK(out.numel() == 0 || out.is_contiguous(),
           "matmul: expected a contiguous out, got strides ", shape_str(out.strides()));
  TF_CHECK(out.storage() != a.storage() && out.storage() != b.storage(),
           "matmul: out shares memory with an input");
}

}  // namespace

// a: [B, M, K], b: [B, K, N] (any strides; a batch stride of 0 broadcasts), out: [B, M, N].
void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_operands(a, b, out);
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum: every element is 0 (all-zero bits in IEEE float and double)
    std::memset(out.data_ptr(), 0,
                static_cast<std::size_t>(out.numel()) * element_size(out.dtype()));
    return;
  }
  const Prepared pa = prepare(a), pb = prepare(b);
  // When both operands are broadcast every output matrix is the same: compute one, copy it.
  const std::int64_t runs = pa.layout.broadcast && pb.layout.broadcast ? 1 : batch;
  if (out.dtype() == DType::float64) {
    matmul_blas(pa, pb, out.data<double>(), runs, m, k, n);
  } else if (runs == 1 && m * n * k <= kSmallGemm) {
    matmul_blas(pa, pb, out.data<float>(), 1, m, k, n);
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
