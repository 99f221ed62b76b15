// The pieces both CPU attention kernels (attention.cpp: probabilities kept; flash_attention.cpp:
// recomputed) build on: a GEMM on the calling thread for float32 (oneDNN's sgemm) and float64
// (OpenBLAS's dgemm), a way to record its failure inside an OpenMP team, the loop that spreads
// items over the team with each GEMM on one thread, and scratch from the tensor allocator.
#pragma once

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backends/cpu/matmul.h"
#include "core/error.h"
#include "core/op_checks.h"
#include "core/tensor.h"

namespace tinyformer::cpu {

// C = beta C for a product over K = 0: zeros for beta 0, whatever C held before.
template <typename T>
inline void scale_output(std::int64_t m, std::int64_t n, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  }
}

// The first failure of a GEMM run inside the OpenMP team: an exception may not leave a parallel
// region, so the items record it and the op throws once the region has ended.
struct GemmStatus {
  std::atomic<int> failed{0};  // oneDNN's status of the first failed sgemm, or 0

  void check(const char* op) const {
    const int status = failed.load();
    TF_CHECK(status == 0, op, ": oneDNN's sgemm failed (status ", status, ")");
  }
};

// C = alpha op(A) op(B) + beta C, row-major, on the calling thread.
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                 float* c, std::int64_t ldc, GemmStatus& status) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_output(m, n, beta, c, ldc);
  const dnnl_status_t result =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  int none = 0;
  if (result != dnnl_success) status.failed.compare_exchange_strong(none, int(result));
}
// Every size and leading dimension fits BLAS's int (check_blas_sizes, before the team starts).
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                 const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta,
                 double* c, std::int64_t ldc, GemmStatus&) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_output(m, n, beta, c, ldc);
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// For float64 (OpenBLAS takes int sizes): the problem's sizes and the operands' leading
// dimensions fit an int, or an Error naming `op` (thrown before any parallel region).
template <typename T>
inline void check_blas_sizes(const char* op, const AttentionShape& s,
                             std::initializer_list<std::int64_t> leading_dims) {
  if constexpr (std::is_same_v<T, double>) {
    for (std::int64_t size : {s.n, s.m, s.d, s.dv}) blas_int(size, op, "a size");
    for (std::int64_t ld : leading_dims) blas_int(ld, op, "a leading dimension");
  }
}

// A matrix operand's row stride as a GEMM reads it (the row length when it has one row).
inline std::int64_t row_stride(const Tensor& t) {
  return t.size(-2) > 1 ? t.stride(-2) : std::max<std::int64_t>(t.size(-1), 1);
}

// Runs body(item) for item in [0, items) over `threads` threads, each GEMM inside on one thread.
template <typename Body>
inline void for_items(std::int64_t items, int threads, Body body) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t item = 0; item < items; ++item) {
    // The libraries size their own teams by this thread's OpenMP setting: one thread, so the
    // block's GEMMs neither nest a team nor split their sums by the number of threads.
    omp_set_num_threads(1);
    body(item);
  }
}

// Runs body(item, slot) for item in [0, items) over at most `threads` threads, as for_items
// does; slot, in [0, threads), is the calling thread's own index into per-thread scratch. Slots
// are handed out in the team itself (an atomic counter), not read from omp_get_thread_num(),
// which names a thread of whichever OpenMP runtime that symbol resolves to when two are loaded
// (a clang build's libomp beside the libgomp that OpenBLAS links).
template <typename Body>
inline void for_items_with_slots(std::int64_t items, int threads, Body body) {
  std::atomic<int> next_slot{0};
#pragma omp parallel num_threads(threads)
  {
    const int slot = next_slot.fetch_add(1);
    omp_set_num_threads(1);
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) body(item, slot);
  }
}

// Scratch comes from the tensor allocator, which keeps freed blocks for the next call: a
// std::vector would fault in and zero its pages at every call.
template <typename T>
Tensor scratch_tensor(std::int64_t elements) {
  return empty(Shape{elements},
               {.dtype = std::is_same_v<T, float> ? DType::float32 : DType::float64});
}

}  // namespace tinyformer::cpu
