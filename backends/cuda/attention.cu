// CudaBackend::attention and attention_backward: scaled dot-product attention over the leading
// (batch) dims, as cuBLAS products around a masked-softmax row kernel (core/ops.def).
//
// Forward, for each batch matrix:
//   S = scale Q K^T        cuBLAS, into probs (contiguous [n, m])
//   P = softmax(S)         one block per row of probs, in place: the mask and the causal rule
//                          set -inf, then a numerically stable softmax (max, exp and sum, scale)
//   out = P V              cuBLAS
// Backward:
//   dP = G V^T             cuBLAS, into a scratch buffer of probs' shape
//   dS = P (dP - rowsum(P dP))   the softmax op's backward (softmax.cu), in place in the scratch
//   grad_query = scale dS K,  grad_key = scale dS^T Q,  grad_value = P^T G   cuBLAS
// Every product is beta = 0, so the outputs' prior contents are never read. float32 computes in
// float (its products exact: CUBLAS_COMPUTE_32F, whatever matmul_precision() says), float64 in
// double.
//
// cuBLAS is column-major (see matmul.cpp): a row-major [r, c] matrix with row stride ld is the
// column-major [c, r] matrix X^T with leading dimension ld, so each product C = A B is computed
// as C^T = B^T A^T, an operand read as stored taking no transpose flag and one read transposed
// taking CUBLAS_OP_T.
//
// Batches: each operand's matrices lie at batch_offsets() from its data. One
// cublasGemmStridedBatchedEx call covers every run of batch matrices whose offsets are an
// arithmetic progression in every operand: all of them when possible, else the matrices of the
// innermost batch dims (attention's heads, say, when the heads are columns of one wider matrix),
// one call per entry of the outer dims.
//
// Empty problems launch nothing: n or m of 0 leaves outputs that are empty or sums of nothing
// (zeros); d of 0 makes the scores 0 (uniform probabilities), dv of 0 makes dP 0. A row whose
// every key is excluded becomes NaN (exp(-inf - -inf)), as softmax over -inf alone does.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cuda/blas_types.h"
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/strided.cuh"
#include "core/error.h"
#include "core/math.h"
#include "core/op_checks.h"
#include "core/softmax_math.h"

namespace tinyformer::cuda {

namespace {

// --- the forward's row kernel: one block per row of the [rows, m] probabilities ---

// probs holds the scores S on entry and P on exit. Row r is query i = r % n of its batch
// matrix; key j is excluded when causal and j > i, or when mask[mask_rows.offset(r) + j *
// mask_col_stride] is true (mask may be null). Each thread reads and writes the same columns in
// every pass, so the passes need no synchronisation beyond the block reductions.
// probs: [rows, m] contiguous, m > 0
template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    masked_softmax_kernel(T* probs, const bool* mask, StridedIndex mask_rows,
                          std::int64_t mask_col_stride, std::int64_t rows, std::int64_t n,
                          std::int64_t m, bool causal) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  // The row is the same for the whole block, so every thread reaches the block reductions.
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* p = probs + r * m;
    const std::int64_t i = r % n;
    const bool* excluded = mask != nullptr ? mask + mask_rows.offset(r) : nullptr;
    A row_max = -std::numeric_limits<A>::infinity();
    for (std::int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      const bool skip =
          attention_excluded(excluded != nullptr && excluded[j * mask_col_stride], causal, i, j);
      const A v = skip ? -std::numeric_limits<A>::infinity() : to_acc(p[j]);
      p[j] = from_acc<T>(v);
      row_max = v > row_max ? v : row_max;
    }
    // Subtracting the row max keeps exp() from overflowing; it cancels in the ratio.
    row_max = block_max(row_max, scratch);
    A sum = 0;
    for (std::int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      const A e = math::exp(to_acc(p[j]) - row_max);
      p[j] = from_acc<T>(e);
      sum += e;
    }
    sum = block_sum(sum, scratch);
    const A inv = A(1) / sum;
    for (std::int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      p[j] = from_acc<T>(to_acc(p[j]) * inv);
    }
  }
}

// Threads per block for rows of m elements: a multiple of 32 (the block reductions), at most
// kRowBlock.
int row_threads(std::int64_t m) {
  return static_cast<int>(std::min<std::int64_t>((m + 31) / 32 * 32, kRowBlock));
}

// --- batched products ---

// One operand of a batched product: batch matrix b starts offsets[b] elements after data, and
// cuBLAS reads it with leading dimension ld: the row stride of the row-major matrix, or its row
// length (at least 1, as cuBLAS requires) for a matrix of one row or of empty rows, whose row
// stride may be anything.
struct Matrices {
  char* data;
  std::vector<std::int64_t> offsets;
  std::int64_t ld;
};

Matrices matrices(const Tensor& t, const Shape& batch) {
  const std::int64_t rows = t.size(-2), cols = t.size(-1);
  return {static_cast<char*>(t.data_ptr()), batch_offsets(t, batch),
          rows > 1 && cols > 0 ? t.stride(-2) : std::max<std::int64_t>(cols, 1)};
}

// The step between consecutive offsets of the run of `group` matrices that starts at `first`;
// 0 for a run of one.
std::int64_t run_step(const std::vector<std::int64_t>& offsets, std::size_t first,
                      std::size_t group) {
  return group > 1 ? offsets[first + 1] - offsets[first] : 0;
}

// Whether every run of `group` consecutive offsets is an arithmetic progression with one step.
bool runs_progress(const std::vector<std::int64_t>& offsets, std::size_t group) {
  const std::int64_t step = run_step(offsets, 0, group);
  for (std::size_t first = 0; first < offsets.size(); first += group) {
    for (std::size_t k = 1; k < group; ++k) {
      if (offsets[first + k] - offsets[first] != static_cast<std::int64_t>(k) * step) return false;
    }
  }
  return true;
}

// C = alpha op_a(A) op_b(B) for every batch matrix, in cuBLAS's column-major terms: C is rows x
// cols, the sum runs over `inner` (> 0: the callers handle empty sums). `batch` is the leading
// dims of the tensors; the largest suffix of them over which every operand's offsets progress is
// one strided-batched call.
void batched_gemm(const char* op, DType dtype, const Shape& batch, cublasOperation_t op_a,
                  cublasOperation_t op_b, std::int64_t rows, std::int64_t cols, std::int64_t inner,
                  double alpha, const Matrices& a, const Matrices& b, const Matrices& c) {
  const std::size_t count = c.offsets.size();
  if (count == 0 || rows == 0 || cols == 0) return;
  TF_CHECK(inner > 0, op, ": a product over an empty sum reached cuBLAS");
  // The longest runs: the whole batch, else the product of fewer and fewer trailing batch dims;
  // the last batch dim alone always progresses (offsets are linear in each index).
  std::size_t group = count;
  for (std::size_t dim = 0; dim < batch.size(); ++dim) {
    group = 1;
    for (std::size_t k = dim; k < batch.size(); ++k) group *= static_cast<std::size_t>(batch[k]);
    if (runs_progress(a.offsets, group) && runs_progress(b.offsets, group) &&
        runs_progress(c.offsets, group)) {
      break;
    }
  }
  const bool f64 = dtype == DType::float64;
  const std::size_t element = f64 ? sizeof(double) : sizeof(float);
  const float alpha_f = static_cast<float>(alpha), zero_f = 0.0f;
  const double alpha_d = alpha, zero_d = 0.0;
  const cudaDataType_t type = cuda_type(dtype);
  const int m = blas_int(rows, op, "rows"), n = blas_int(cols, op, "columns");
  const int k = blas_int(inner, op, "inner size");
  const int lda = blas_int(a.ld, op, "leading dimension");
  const int ldb = blas_int(b.ld, op, "leading dimension");
  const int ldc = blas_int(c.ld, op, "leading dimension");
  const int runs = blas_int(static_cast<std::int64_t>(group), op, "batch count");
  for (std::size_t first = 0; first < count; first += group) {
    const auto at = [&](const Matrices& x) {
      return x.data +
             static_cast<std::ptrdiff_t>(x.offsets[first]) * static_cast<std::ptrdiff_t>(element);
    };
    TF_CUBLAS_CHECK(
        op,
        cublasGemmStridedBatchedEx(
            cublas(), op_a, op_b, m, n, k, f64 ? static_cast<const void*>(&alpha_d) : &alpha_f,
            at(a), type, lda, run_step(a.offsets, first, group), at(b), type, ldb,
            run_step(b.offsets, first, group), f64 ? static_cast<const void*>(&zero_d) : &zero_f,
            at(c), type, ldc, run_step(c.offsets, first, group), runs,
            f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

// query: [..., n, d], key: [..., m, d], value: [..., m, dv], excluded_mask: bool [..., n, m] or
// undefined, probs: [..., n, m] contiguous, out: [..., n, dv]
void CudaBackend::attention(const Tensor& query, const Tensor& key, const Tensor& value,
                            const Tensor& excluded_mask, bool causal, double scale,
                            const Tensor& probs, const Tensor& out) {
  const char* op = "attention";
  const AttentionShape s =
      check_attention_args(query, key, value, excluded_mask, causal, scale, probs, out, *this);
  if (s.batches == 0 || s.n == 0) return;  // probs and out are empty
  if (s.m == 0) {                          // no keys: every output is a sum of nothing
    fill(out, 0.0);
    return;
  }
  const DType dtype = query.dtype();
  const Matrices q = matrices(query, s.batch), k = matrices(key, s.batch);
  const Matrices v = matrices(value, s.batch), p = matrices(probs, s.batch);
  const Matrices o = matrices(out, s.batch);

  // S^T [m, n] = K [m, d] (the stored K^T, transposed) Q^T [d, n] (stored), scaled.
  if (s.d == 0) {
    fill(probs, 0.0);
  } else {
    batched_gemm(op, dtype, s.batch, CUBLAS_OP_T, CUBLAS_OP_N, s.m, s.n, s.d, scale, k, q, p);
  }

  const std::int64_t rows = s.batches * s.n;
  StridedIndex mask_rows;
  std::int64_t mask_col_stride = 0;
  if (excluded_mask.defined()) {
    // The mask's rows in the order of probs' rows: its shape and strides less the last dim.
    const Shape sizes(excluded_mask.shape().begin(), excluded_mask.shape().end() - 1);
    const Shape strides(excluded_mask.strides().begin(), excluded_mask.strides().end() - 1);
    mask_rows = strided_index(sizes, strides, op);
    mask_col_stride = excluded_mask.stride(-1);
  }
  const bool* mask = excluded_mask.defined() ? device_data<bool>(excluded_mask) : nullptr;
  dispatch<float, double>(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    masked_softmax_kernel<T><<<grid_for(rows, 1), row_threads(s.m), 0, stream()>>>(
        device_data<T>(probs), mask, mask_rows, mask_col_stride, rows, s.n, s.m, causal);
  });
  TF_CUDA_CHECK_LAUNCH(op);

  // out^T [dv, n] = V^T [dv, m] (stored) P^T [m, n] (stored).
  batched_gemm(op, dtype, s.batch, CUBLAS_OP_N, CUBLAS_OP_N, s.dv, s.n, s.m, 1.0, v, p, o);
}

// grad: [..., n, dv]; query, key, value, probs as attention's; grad_query, grad_key, grad_value:
// shaped as query, key, value
void CudaBackend::attention_backward(const Tensor& grad, const Tensor& query, const Tensor& key,
                                     const Tensor& value, const Tensor& probs, bool causal,
                                     double scale, const Tensor& grad_query, const Tensor& grad_key,
                                     const Tensor& grad_value) {
  const char* op = "attention_backward";
  // causal tells that probs is 0 after the diagonal; the products below run over all of it.
  (void)causal;
  const AttentionShape s = check_attention_backward_args(grad, query, key, value, probs, scale,
                                                         grad_query, grad_key, grad_value, *this);
  if (s.batches == 0) return;  // every tensor is empty
  if (s.n == 0 || s.m == 0) {  // each gradient is empty or a sum of nothing
    fill(grad_query, 0.0);
    fill(grad_key, 0.0);
    fill(grad_value, 0.0);
    return;
  }
  const DType dtype = query.dtype();
  const Tensor ds = empty(probs.shape(), {.dtype = dtype, .device = probs.device()});
  const Matrices g = matrices(grad, s.batch), q = matrices(query, s.batch);
  const Matrices k = matrices(key, s.batch), v = matrices(value, s.batch);
  const Matrices p = matrices(probs, s.batch), d = matrices(ds, s.batch);
  const Matrices gq = matrices(grad_query, s.batch), gk = matrices(grad_key, s.batch);
  const Matrices gv = matrices(grad_value, s.batch);

  // dP^T [m, n] = V [m, dv] (the stored V^T, transposed) G^T [dv, n] (stored).
  if (s.dv == 0) {
    fill(ds, 0.0);
  } else {
    batched_gemm(op, dtype, s.batch, CUBLAS_OP_T, CUBLAS_OP_N, s.m, s.n, s.dv, 1.0, v, g, d);
  }
  // dS = P (dP - rowsum(P dP)) in place: the softmax op's backward over the [rows, m] rows.
  const Tensor p_rows = probs.view({s.batches * s.n, s.m}),
               ds_rows = ds.view({s.batches * s.n, s.m});
  softmax_backward(p_rows, ds_rows, false, ds_rows);

  if (s.d > 0) {
    // grad_query^T [d, n] = K^T [d, m] (stored) dS^T [m, n] (stored), scaled.
    batched_gemm(op, dtype, s.batch, CUBLAS_OP_N, CUBLAS_OP_N, s.d, s.n, s.m, scale, k, d, gq);
    // grad_key^T [d, m] = Q^T [d, n] (stored) dS [n, m] (the stored dS^T, transposed), scaled.
    batched_gemm(op, dtype, s.batch, CUBLAS_OP_N, CUBLAS_OP_T, s.d, s.m, s.n, scale, q, d, gk);
  }
  // grad_value^T [dv, m] = G^T [dv, n] (stored) P [n, m] (the stored P^T, transposed).
  batched_gemm(op, dtype, s.batch, CUBLAS_OP_N, CUBLAS_OP_T, s.dv, s.m, s.n, 1.0, g, p, gv);
}

}  // namespace tinyformer::cuda
