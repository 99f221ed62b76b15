// CpuBackend::attention and attention_backward: scaled dot-product attention in blocks of query
// rows, so that a block's scores stay in the core's cache between the products and softmax.
//
// Forward, per (batch matrix, block of R query rows), on one thread:
//   probs[rows] = scale q[rows] k^T          GEMM, written where probs keeps them
//   mask, causal rule, softmax                each row in place, while the block is in cache
//   out[rows]   = probs[rows] v              GEMM reading the block from cache
// The unfused path writes the [n, m] scores, reads them back for softmax, writes the
// probabilities and reads them again for the product: three more passes over n x m floats at
// memory speed. Here the probabilities are written once (the backward needs them).
//
// Backward, per batch matrix and its blocks of rows in turn: dP = grad[rows] v^T into a scratch
// block, dS = scale * P (dP - rowsum(P dP)) in place, grad_query[rows] = dS key, and, while the
// block's dS and P are in cache, grad_key += dS^T query[rows] and grad_value += P^T grad[rows].
// dS never reaches memory. With fewer matrices than kMinItems (too few items for the threads),
// pass 1 by row blocks writes dS whole and grad_query, and pass 2 by blocks of key columns reads
// dS and P back for grad_key and grad_value. The scale rides on dS, so neither product needs a
// pass of its own.
//
// Under the causal rule a block of rows [r0, r0 + R) attends to keys [0, r0 + R) only: its
// products and softmax run over those, its probabilities (and dS) are 0 after them, and the key
// gradients of a block of key columns sum over the queries that may attend to them.
//
// On a CPU with AVX-512, float32, from kMinKeysGrouped keys on, the products run on the kernels
// of avx512.h a group of 24 rows at a time: the head-width product (scale q k^T forward, grad v^T
// backward) on avx512::gemm_nt, then softmax or dS while the group's rows are in L2 (softmax
// taking the rows' maxima from the product), then the group's product over the keys (out = P v,
// grad_query = dS k) on avx512::gemm_nn, reading the group's rows from L2 instead of the block's
// from L3; the backward's dP prefetches the next group's probabilities. With fewer keys every
// product runs on oneDNN's sgemm over a block of rows. dS is computed a row at a time by
// avx512::softmax_grad_row at any number of keys.
//
// Every GEMM runs on one thread (oneDNN's sgemm for float32, OpenBLAS's dgemm for float64) with
// the items spread over the OpenMP team: each output element is computed by one call whose
// shape does not depend on the thread count, so the results are the same bits on any number of
// threads.
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_gemm.h"
#include "backends/cpu/avx512.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/softmax_row.h"
#include "core/error.h"
#include "core/op_checks.h"
#include "core/softmax_math.h"

namespace tinyformer::cpu {

namespace {

// Query rows per block: 256, so that each GEMM of a block is large enough to run near the
// library's best rate (smaller blocks make the layer slower), while a block of scores ([256, m]:
// 1 MiB at m = 1024) stays in the cache hierarchy (L2, or L3 for long rows) between the products
// and softmax. benchmark_attention --quick --profile shows the attention op's time in the layer.
constexpr std::int64_t kBlockRows = 256, kMinBlockRows = 32;

// Rows (or key columns) per block: kBlockRows, halved while the items are fewer than kMinItems.
// The shape alone sets it (never the thread count), so that every product has the same size, and
// every sum the same order, on any number of threads.
constexpr std::int64_t kMinItems = 16;
std::int64_t block_size(std::int64_t extent, std::int64_t batches) {
  std::int64_t rows = kBlockRows;
  while (rows > kMinBlockRows && batches * ((extent + rows - 1) / rows) < kMinItems) rows /= 2;
  return std::max<std::int64_t>(std::min(rows, extent), 1);
}

// An operand of the AVX-512 products (avx512.h), float32, packed once per call for every matrix
// (offsets `offsets`, row stride ld), one matrix after another, `size` floats each: with
// Layout::nt, b [m, d] for avx512::gemm_nt (the head-width products: scores, dP); with
// Layout::nn, b [m, d] for avx512::gemm_nn (the products over the keys: out = P v, grad_query =
// dS k). Not packed (used() false) where those kernels do not run (other CPUs, float64) or the
// caller does not want them.
enum class Layout { nt, nn };
template <typename T>
struct PackedOperand {
  Tensor data;
  std::int64_t size = 0;
  bool packed = false;

  // wanted: whether the caller would use the kernel where it runs.
  PackedOperand(Layout layout, const T* b, const std::vector<std::int64_t>& offsets,
                std::int64_t ld, const AttentionShape& s, std::int64_t d, int threads,
                bool wanted = true) {
    if constexpr (std::is_same_v<T, float>) {
      if (!wanted || !avx512::available()) return;
      packed = true;
      size = layout == Layout::nt ? avx512::packed_nt_size(s.m, d) : avx512::packed_nn_size(s.m, d);
      data = scratch_tensor<float>(size * s.batches);
      float* out = data.data<float>();
      for_items(s.batches, threads, [&](std::int64_t item) {
        const float* matrix = b + offsets[static_cast<std::size_t>(item)];
        if (layout == Layout::nt) {
          avx512::pack_nt(matrix, ld, s.m, d, out + item * size);
        } else {
          avx512::pack_nn(matrix, ld, s.m, d, out + item * size);
        }
      });
    }
  }
  bool used() const { return packed; }
  const float* matrix(std::size_t b) const {
    return data.data<float>() + static_cast<std::int64_t>(b) * size;
  }
};

// Rows per group of the AVX-512 path: a group's scores (24 rows: 384 KiB at m = 4096) are still
// in L2 when its softmax (forward) or dS (backward) runs right after its product.
constexpr std::int64_t kGroupRows = 24;

// From this many keys on, the AVX-512 path runs (above), the faster one there. Below, the
// probabilities of all matrices fit the caches and oneDNN's sgemm over a block of rows, which
// packs its operands, is the faster (benchmark_libtorch --n 256 1024 4096 --profile shows the
// attention ops' time on either side; docs/attention.md).
constexpr std::int64_t kMinKeysGrouped = 1024;

// Row i of the scaled scores, in place: -inf where excluded (attention_excluded), then softmax.
// Only the first `valid` of the m scores were computed: the rest are keys the causal rule
// excludes (probability 0). mask: the row's mask (stride mask_stride), or null. A row with every
// key excluded is NaN throughout, as exp(-inf - -inf) is.
template <typename T>
void masked_softmax_row(T* row, std::int64_t valid, std::int64_t m, const bool* mask,
                        std::int64_t mask_stride, bool causal, std::int64_t i) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  if (mask != nullptr) {
    for (std::int64_t j = 0; j < valid; ++j) {
      if (attention_excluded(mask[j * mask_stride], causal, i, j)) row[j] = minus_inf;
    }
  } else if (causal) {  // without a mask the rule excludes exactly the keys j > i
    for (std::int64_t j = i + 1; j < valid; ++j) row[j] = minus_inf;
  }
  const T max = softmax_row(row, row, valid);
  const T rest = max == minus_inf ? std::numeric_limits<T>::quiet_NaN() : T(0);
  for (std::int64_t j = valid; j < m; ++j) row[j] = rest;
}

// The keys that rows [r0, r0 + r) may attend to lie in [0, causal_keys(...)): under the causal
// rule none after the block's last row, else all m. Products and softmax skip the rest.
std::int64_t causal_keys(bool causal, std::int64_t r0, std::int64_t r, std::int64_t m) {
  return causal ? std::min(m, r0 + r) : m;
}

template <typename T>
void attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                       const Tensor& excluded_mask, bool causal, double scale, const Tensor& probs,
                       const Tensor& out, const AttentionShape& s) {
  const char* op = "attention";
  const auto qo = batch_offsets(query, s.batch), ko = batch_offsets(key, s.batch),
             vo = batch_offsets(value, s.batch), oo = batch_offsets(out, s.batch);
  const bool masked = excluded_mask.defined();
  const auto mo = masked ? batch_offsets(excluded_mask, s.batch) : std::vector<std::int64_t>{};
  const T* q = query.data<T>();
  const T* k = key.data<T>();
  const T* v = value.data<T>();
  T* p = probs.data<T>();
  T* o = out.data<T>();
  const bool* mask = masked ? excluded_mask.data<bool>() : nullptr;
  const std::int64_t ldq = row_stride(query), ldk = row_stride(key), ldv = row_stride(value),
                     ldo = row_stride(out);
  const std::int64_t mask_row = masked ? excluded_mask.stride(-2) : 0,
                     mask_col = masked ? excluded_mask.stride(-1) : 0;
  check_blas_sizes<T>(op, s, {ldq, ldk, ldv, ldo});
  const int threads = pass_threads(s.batches * s.n * s.m, 2 * (s.d + s.dv) + 8);
  const std::int64_t rows = block_size(s.n, s.batches);
  const std::int64_t blocks = (s.n + rows - 1) / rows;
  GemmStatus status;
  const PackedOperand<T> packed_key(Layout::nt, k, ko, ldk, s, s.d, threads,
                                    s.m >= kMinKeysGrouped);
  const PackedOperand<T> packed_value(Layout::nn, v, vo, ldv, s, s.dv, threads, packed_key.used());
  // Without a mask or the causal rule, softmax takes each row's maximum from the product.
  const bool max_from_product = !masked && !causal;
  std::vector<float> row_max(
      static_cast<std::size_t>(packed_key.used() ? kGroupRows * threads : 0));
  for_items_with_slots(s.batches * blocks, threads, [&](std::int64_t item, int slot) {
    const std::size_t b = static_cast<std::size_t>(item / blocks);
    const std::int64_t r0 = (item % blocks) * rows, r = std::min(rows, s.n - r0);
    T* block = p + (static_cast<std::int64_t>(b) * s.n + r0) * s.m;
    const std::int64_t keys = causal_keys(causal, r0, r, s.m);
    const auto softmax_rows = [&](std::int64_t i0, std::int64_t i1, const float* max) {
      for (std::int64_t i = i0; i < i1; ++i) {
        T* row = block + i * s.m;
        if constexpr (std::is_same_v<T, float>) {
          if (max != nullptr) {
            avx512::softmax_row(row, row, keys, max + (i - i0));
            continue;
          }
        }
        const bool* mask_i = masked ? mask + mo[b] + (r0 + i) * mask_row : nullptr;
        masked_softmax_row(row, keys, s.m, mask_i, mask_col, causal, r0 + i);
      }
    };
    if constexpr (std::is_same_v<T, float>) {
      if (packed_key.used()) {
        float* max = max_from_product ? row_max.data() + slot * kGroupRows : nullptr;
        for (std::int64_t i0 = 0; i0 < r; i0 += kGroupRows) {
          const std::int64_t g = std::min(kGroupRows, r - i0);
          avx512::gemm_nt(g, keys, s.d, static_cast<float>(scale), q + qo[b] + (r0 + i0) * ldq, ldq,
                          packed_key.matrix(b), block + i0 * s.m, s.m, max);
          softmax_rows(i0, i0 + g, max);
          avx512::gemm_nn(g, s.dv, keys, block + i0 * s.m, s.m, packed_value.matrix(b),
                          o + oo[b] + (r0 + i0) * ldo, ldo);
        }
        return;
      }
    }
    gemm(false, true, r, keys, s.d, static_cast<T>(scale), q + qo[b] + r0 * ldq, ldq, k + ko[b],
         ldk, T(0), block, s.m, status);
    softmax_rows(0, r, nullptr);
    gemm(false, false, r, s.dv, keys, T(1), block, s.m, v + vo[b], ldv, T(0), o + oo[b] + r0 * ldo,
         ldo, status);
  });
  status.check(op);
}

template <typename T>
void attention_backward_impl(const Tensor& grad, const Tensor& query, const Tensor& key,
                             const Tensor& value, const Tensor& probs, bool causal, double scale,
                             const Tensor& grad_query, const Tensor& grad_key,
                             const Tensor& grad_value, const AttentionShape& s) {
  const char* op = "attention_backward";
  const auto go = batch_offsets(grad, s.batch), qo = batch_offsets(query, s.batch),
             ko = batch_offsets(key, s.batch), vo = batch_offsets(value, s.batch),
             gqo = batch_offsets(grad_query, s.batch), gko = batch_offsets(grad_key, s.batch),
             gvo = batch_offsets(grad_value, s.batch);
  const T* g = grad.data<T>();
  const T* q = query.data<T>();
  const T* k = key.data<T>();
  const T* v = value.data<T>();
  const T* p = probs.data<T>();
  T* gq = grad_query.data<T>();
  T* gk = grad_key.data<T>();
  T* gv = grad_value.data<T>();
  const std::int64_t ldg = row_stride(grad), ldq = row_stride(query), ldk = row_stride(key),
                     ldv = row_stride(value), ldgq = row_stride(grad_query),
                     ldgk = row_stride(grad_key), ldgv = row_stride(grad_value);
  check_blas_sizes<T>(op, s, {ldg, ldq, ldk, ldv, ldgq, ldgk, ldgv, s.m});
  const T t_scale = static_cast<T>(scale);
  const int threads = pass_threads(s.batches * s.n * s.m, 2 * (s.d + s.dv) + 8);
  const std::int64_t rows = block_size(s.n, s.batches);
  GemmStatus status;

  // Rows [r0, r0 + r) of matrix b: dS into `block` ([r, m]; 0 past the keys the rows may
  // attend to, where P is 0) and grad_query.
  // dP and grad_query by the AVX-512 kernels from rows of kMinKeysGrouped keys on, where the
  // probabilities of all matrices outgrow the caches and prefetching them pays; with fewer keys
  // oneDNN's product is as fast or faster (benchmark_libtorch --profile, "attention_backward").
  const PackedOperand<T> packed_value(Layout::nt, v, vo, ldv, s, s.dv, threads,
                                      s.m >= kMinKeysGrouped);
  const PackedOperand<T> packed_key(Layout::nn, k, ko, ldk, s, s.d, threads, packed_value.used());
  // dS a row at a time on AVX-512 (the dot product in four chains): the portable loop's single
  // chain bounds the pass at any number of keys (benchmark_libtorch --profile,
  // "attention_backward").
  const bool avx512_ds = std::is_same_v<T, float> && avx512::available();
  const auto ds_rows = [&](std::size_t b, std::int64_t r0, std::int64_t r, T* block) {
    const T* pb = p + (static_cast<std::int64_t>(b) * s.n + r0) * s.m;
    const std::int64_t keys = causal_keys(causal, r0, r, s.m);
    const auto ds_pass = [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const T* pi = pb + i * s.m;
        T* di = block + i * s.m;
        if constexpr (std::is_same_v<T, float>) {
          if (avx512_ds) {
            avx512::softmax_grad_row(pi, di, di, keys, t_scale);
            for (std::int64_t j = keys; j < s.m; ++j) di[j] = T(0);
            continue;
          }
        }
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (std::int64_t j = 0; j < keys; ++j) dot += pi[j] * di[j];
#pragma omp simd
        for (std::int64_t j = 0; j < keys; ++j) di[j] = t_scale * softmax_grad(pi[j], di[j], dot);
        for (std::int64_t j = keys; j < s.m; ++j) di[j] = T(0);
      }
    };
    if constexpr (std::is_same_v<T, float>) {
      if (packed_value.used()) {
        // dP a group of rows at a time, while the product prefetches the probabilities of the
        // next group (the pass is otherwise bound by reading them from memory).
        for (std::int64_t i0 = 0; i0 < r; i0 += kGroupRows) {
          const std::int64_t rows_now = std::min(kGroupRows, r - i0);
          const std::int64_t next = std::min(kGroupRows, r - i0 - rows_now);
          avx512::gemm_nt(rows_now, keys, s.dv, 1.0f, g + go[b] + (r0 + i0) * ldg, ldg,
                          packed_value.matrix(b), block + i0 * s.m, s.m, nullptr,
                          pb + (i0 + rows_now) * s.m,
                          static_cast<std::int64_t>(sizeof(float)) * next * s.m);
          ds_pass(i0, i0 + rows_now);
          if (packed_key.used()) {
            avx512::gemm_nn(rows_now, s.d, keys, block + i0 * s.m, s.m, packed_key.matrix(b),
                            gq + gqo[b] + (r0 + i0) * ldgq, ldgq);
          }
        }
      }
    }
    if (!packed_value.used()) {
      gemm(false, true, r, keys, s.dv, T(1), g + go[b] + r0 * ldg, ldg, v + vo[b], ldv, T(0), block,
           s.m, status);
      ds_pass(0, r);
    }
    if (!packed_key.used()) {
      gemm(false, false, r, s.d, keys, T(1), block, s.m, k + ko[b], ldk, T(0),
           gq + gqo[b] + r0 * ldgq, ldgq, status);
    }
  };

  if (s.batches >= kMinItems) {
    // A matrix per item: grad_key and grad_value gather each block's share while its dS and P
    // are in cache, and dS never reaches memory. They gather transposed, grad_key^T [d, m] +=
    // query[rows]^T dS and grad_value^T [dv, m] += grad[rows]^T P, in scratch, and are transposed
    // into place once at the end: oneDNN's sgemm runs the product with a [64, m] output faster
    // than the one with an [m, 64] output (transposed first operand).
    // Where the AVX-512 path runs (from kMinKeysGrouped keys on), these two products run on
    // avx512::gemm_tn, which keeps each panel of the sums in L1 across a block's rows and packs
    // dS and P as its first tile reads them, as fast as oneDNN's sgemm or faster there; with
    // fewer keys oneDNN's is the faster. Not where oneDNN runs AMX (dnnl_runs_amx): there
    // oneDNN's sgemm is the faster one (benchmark_libtorch --profile, "attention_backward";
    // docs/attention.md).
    // Scratch per thread, allocated here: nothing may throw inside the team.
    const bool own_tn = packed_value.used() && !dnnl_runs_amx();
    const std::int64_t block_elements = std::min(rows, s.n) * s.m;
    const std::int64_t tn_elements = own_tn ? avx512::gemm_tn_scratch_size() : 0;
    const std::int64_t per_thread = block_elements + (s.d + s.dv) * s.m + tn_elements;
    const Tensor scratch = scratch_tensor<T>(per_thread * threads);
    T* const scratch_data = scratch.data<T>();
    for_items_with_slots(s.batches, threads, [&](std::int64_t item, int slot) {
      const std::size_t b = static_cast<std::size_t>(item);
      T* block = scratch_data + slot * per_thread;
      T* gk_t = block + block_elements;  // [d, m]
      T* gv_t = gk_t + s.d * s.m;        // [dv, m]
      T* tn_scratch = gv_t + s.dv * s.m;
      // Causal, a block adds to the columns of its keys only: start every column at 0.
      if (s.n == 0 || causal) std::fill(gk_t, gk_t + (s.d + s.dv) * s.m, T(0));
      for (std::int64_t r0 = 0; r0 < s.n; r0 += rows) {
        const std::int64_t r = std::min(rows, s.n - r0);
        const std::int64_t keys = causal_keys(causal, r0, r, s.m);
        const bool accumulate = r0 > 0 || causal;
        const T* pb = p + (static_cast<std::int64_t>(b) * s.n + r0) * s.m;
        ds_rows(b, r0, r, block);
        if constexpr (std::is_same_v<T, float>) {
          if (own_tn) {
            avx512::gemm_tn(s.d, keys, r, q + qo[b] + r0 * ldq, ldq, block, s.m, gk_t, s.m,
                            tn_scratch, accumulate);
            avx512::gemm_tn(s.dv, keys, r, g + go[b] + r0 * ldg, ldg, pb, s.m, gv_t, s.m,
                            tn_scratch, accumulate);
            continue;
          }
        }
        const T beta = accumulate ? T(1) : T(0);
        gemm(true, false, s.d, keys, r, T(1), q + qo[b] + r0 * ldq, ldq, block, s.m, beta, gk_t,
             s.m, status);
        gemm(true, false, s.dv, keys, r, T(1), g + go[b] + r0 * ldg, ldg, pb, s.m, beta, gv_t, s.m,
             status);
      }
      transpose_into(gk_t, s.d, s.m, gk + gko[b], ldgk);
      transpose_into(gv_t, s.dv, s.m, gv + gvo[b], ldgv);
    });
    status.check(op);
    return;
  }

  // Few matrices: pass 1 by blocks of query rows writes dS whole, pass 2 by blocks of key
  // columns reads it back for grad_key (and P for grad_value).
  const Tensor ds_tensor = empty(probs.shape(), {.dtype = probs.dtype(), .device = probs.device()});
  T* ds = ds_tensor.data<T>();
  const std::int64_t row_blocks = (s.n + rows - 1) / rows;
  for_items(s.batches * row_blocks, threads, [&](std::int64_t item) {
    const std::size_t b = static_cast<std::size_t>(item / row_blocks);
    const std::int64_t r0 = (item % row_blocks) * rows, r = std::min(rows, s.n - r0);
    ds_rows(b, r0, r, ds + (static_cast<std::int64_t>(b) * s.n + r0) * s.m);
  });
  status.check(op);
  const std::int64_t cols = block_size(s.m, s.batches);
  const std::int64_t col_blocks = (s.m + cols - 1) / cols;
  for_items(s.batches * col_blocks, threads, [&](std::int64_t item) {
    const std::size_t b = static_cast<std::size_t>(item / col_blocks);
    const std::int64_t c0 = (item % col_blocks) * cols, c = std::min(cols, s.m - c0);
    // Causal, key j has weight only from queries i >= j: the rows from c0 on.
    const std::int64_t i0 = causal ? std::min(c0, s.n) : 0;
    const std::int64_t at = (static_cast<std::int64_t>(b) * s.n + i0) * s.m + c0;
    gemm(true, false, c, s.d, s.n - i0, T(1), ds + at, s.m, q + qo[b] + i0 * ldq, ldq, T(0),
         gk + gko[b] + c0 * ldgk, ldgk, status);
    gemm(true, false, c, s.dv, s.n - i0, T(1), p + at, s.m, g + go[b] + i0 * ldg, ldg, T(0),
         gv + gvo[b] + c0 * ldgv, ldgv, status);
  });
  status.check(op);
}

}  // namespace

void CpuBackend::attention(const Tensor& query, const Tensor& key, const Tensor& value,
                           const Tensor& excluded_mask, bool causal, double scale,
                           const Tensor& probs, const Tensor& out) {
  const AttentionShape s =
      check_attention_args(query, key, value, excluded_mask, causal, scale, probs, out, *this);
  if (s.batches == 0 || s.n == 0) return;
  if (query.dtype() == DType::float32) {
    attention_forward<float>(query, key, value, excluded_mask, causal, scale, probs, out, s);
  } else {
    attention_forward<double>(query, key, value, excluded_mask, causal, scale, probs, out, s);
  }
}

void CpuBackend::attention_backward(const Tensor& grad, const Tensor& query, const Tensor& key,
                                    const Tensor& value, const Tensor& probs, bool causal,
                                    double scale, const Tensor& grad_query, const Tensor& grad_key,
                                    const Tensor& grad_value) {
  const AttentionShape s = check_attention_backward_args(grad, query, key, value, probs, scale,
                                                         grad_query, grad_key, grad_value, *this);
  if (s.batches == 0) return;
  if (query.dtype() == DType::float32) {
    attention_backward_impl<float>(grad, query, key, value, probs, causal, scale, grad_query,
                                   grad_key, grad_value, s);
  } else {
    attention_backward_impl<double>(grad, query, key, value, probs, causal, scale, grad_query,
                                    grad_key, grad_value, s);
  }
}

}  // namespace tinyformer::cpu
