// CpuBackend::flash_attention and flash_attention_backward: exact attention that never holds the
// [n, m] probabilities, only tiles of kQueryTile x kKeyTile scores in a thread's scratch.
//
// Forward, per (matrix, tile of query rows), on one thread, for each tile of keys in turn:
//   S   = scale q[rows] k[keys]^T                      GEMM into the scratch tile
//   -inf where excluded; the rows' running maximum mx and sum l move to the tile's maximum:
//   acc = acc exp(mx_old - mx),  l = l exp(mx_old - mx) + rowsum(exp(S - mx))
//   acc += dropout(exp(S - mx)) v[keys]                GEMM
// then out = acc / l and lse = mx + log(l). A row with every key excluded (mx = -inf) gets NaN
// in out and lse, as softmax over -inf alone gives; with no keys at all (m = 0) out is 0, the
// empty sum, and lse NaN.
//
// Backward, with D = rowsum(grad * out) computed first ([..., n], the only scratch that grows
// with n), for a tile of query rows against a tile of keys:
//   P  = exp(scale q k^T - lse)  (0 where excluded; NaN throughout a row whose lse is NaN)
//   Pd = dropout(P),  dP = grad v^T,  dS = scale P (dropout(dP) - D)
//   grad_value[keys] += Pd^T grad[rows],  grad_key[keys] += dS^T q[rows],
//   grad_query[rows] += dS k[keys]
// With at least kMinMatrices matrices, each item is one matrix: its key tiles in turn, each
// against every query tile that may attend to it, so that grad_query gathers its sum in place
// (one pass over the tiles). With fewer matrices the items would not fill the threads, so two
// passes split the work finer: items (matrix, key tile) for grad_key and grad_value, then items
// (matrix, query tile) for grad_query, each recomputing the tile's P and dS. The shape alone
// chooses, so every sum runs in the same order on any number of threads.
//
// Under the causal rule a tile of rows [r0, r0 + r) meets keys [0, r0 + r) only, and a tile of
// keys from c0 on meets the rows from c0 on; tiles outside are skipped.
//
// Dropout redraws each element's keep from its coordinates (AttentionDropout, core/ops.def) in
// either direction; the mask is never stored.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_gemm.h"
#include "backends/cpu/avx512.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/softmax_row.h"
#include "core/error.h"
#include "core/math.h"
#include "core/op_checks.h"
#include "core/softmax_math.h"

namespace tinyformer::cpu {

namespace {

// A tile's scores: kQueryTile x kKeyTile (128 KiB in float32) stay in L2 between the products
// and the row pass that runs between them.
constexpr std::int64_t kQueryTile = 128, kKeyTile = 256;
// From this many matrices on, the backward runs one matrix per item (the file comment).
constexpr std::int64_t kMinMatrices = 8;

// y[j] = exp(x[j]) for x[j] <= 0, -inf or NaN.
template <typename T>
void exp_row(const T* x, T* y, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (avx512::available()) return avx512::exp_nonpositive(x, y, n);
  }
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) y[j] = math::exp_nonpositive(x[j]);
}

// What every tile of a call reads: the operands' base pointers, row strides and per-matrix
// offsets, and the rules that exclude or drop an element.
template <typename T>
struct Operands {
  const AttentionShape& s;
  const T *q, *k, *v;
  std::int64_t ldq, ldk, ldv;
  std::vector<std::int64_t> qo, ko, vo, mo;
  const bool* mask;
  std::int64_t mask_row, mask_col;
  bool causal;
  T scale;
  const AttentionDropout& dropout;

  Operands(const AttentionShape& shape, const Tensor& query, const Tensor& key, const Tensor& value,
           const Tensor& excluded_mask, bool is_causal, double scale_,
           const AttentionDropout& dropout_)
      : s(shape),
        q(query.data<T>()),
        k(key.data<T>()),
        v(value.data<T>()),
        ldq(row_stride(query)),
        ldk(row_stride(key)),
        ldv(row_stride(value)),
        qo(batch_offsets(query, shape.batch)),
        ko(batch_offsets(key, shape.batch)),
        vo(batch_offsets(value, shape.batch)),
        mo(excluded_mask.defined() ? batch_offsets(excluded_mask, shape.batch)
                                   : std::vector<std::int64_t>{}),
        mask(excluded_mask.defined() ? excluded_mask.data<bool>() : nullptr),
        mask_row(excluded_mask.defined() ? excluded_mask.stride(-2) : 0),
        mask_col(excluded_mask.defined() ? excluded_mask.stride(-1) : 0),
        causal(is_causal),
        scale(static_cast<T>(scale_)),
        dropout(dropout_) {}

  const T* query(std::size_t b, std::int64_t row) const { return q + qo[b] + row * ldq; }
  const T* key(std::size_t b, std::int64_t row) const { return k + ko[b] + row * ldk; }
  const T* value(std::size_t b, std::int64_t row) const { return v + vo[b] + row * ldv; }

  // Sets row[j] to -inf where query i may not attend to key c0 + j (j < c).
  void exclude(T* row, std::size_t b, std::int64_t i, std::int64_t c0, std::int64_t c) const {
    const T minus_inf = -std::numeric_limits<T>::infinity();
    if (mask != nullptr) {
      const bool* m = mask + mo[b] + i * mask_row + c0 * mask_col;
      for (std::int64_t j = 0; j < c; ++j) {
        if (m[j * mask_col]) row[j] = minus_inf;
      }
    }
    if (causal) {
      for (std::int64_t j = std::max<std::int64_t>(i + 1 - c0, 0); j < c; ++j) row[j] = minus_inf;
    }
  }

  // Multiplies row[j] by the dropout factor of element (i, c0 + j) of matrix b: the kept ones by
  // 1 / (1 - p), the rest to 0. keep: scratch of c bytes.
  void drop(T* row, std::size_t b, std::int64_t i, std::int64_t c0, std::int64_t c,
            unsigned char* keep) const {
    const std::uint64_t g =
        static_cast<std::uint64_t>((static_cast<std::int64_t>(b) * s.n + i) * s.m + c0);
    dropout.keep_run(g, c, keep);
    const T factor = static_cast<T>(dropout.scale);
#pragma omp simd
    for (std::int64_t j = 0; j < c; ++j) row[j] = keep[j] ? row[j] * factor : T(0);
  }

  // The keys rows [r0, r0 + r) may attend to lie in [0, key_end(r0, r)).
  std::int64_t key_end(std::int64_t r0, std::int64_t r) const {
    return causal ? std::min(s.m, r0 + r) : s.m;
  }
  // The rows that may attend to keys from c0 on start at row_begin(c0) (a tile boundary).
  std::int64_t row_begin(std::int64_t c0) const {
    return causal ? std::min(s.n, c0) / kQueryTile * kQueryTile : 0;
  }
};

template <typename T>
void flash_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                   const Tensor& excluded_mask, bool causal, double scale,
                   const AttentionDropout& dropout, const Tensor& out, const Tensor& lse,
                   const AttentionShape& s) {
  const char* op = "flash_attention";
  const Operands<T> a(s, query, key, value, excluded_mask, causal, scale, dropout);
  const auto oo = batch_offsets(out, s.batch);
  T* o = out.data<T>();
  T* l_out = lse.data<T>();
  const std::int64_t ldo = row_stride(out);
  check_blas_sizes<T>(op, s, {a.ldq, a.ldk, a.ldv, ldo});
  const std::int64_t tiles = (s.n + kQueryTile - 1) / kQueryTile;
  const int threads =
      pass_threads(s.batches * s.n * std::max<std::int64_t>(s.m, 1), 2 * (s.d + s.dv) + 8);
  // Per thread: the scores tile, the output accumulator, the rows' maximum and sum, and the
  // dropout keeps of one row. Allocated here: nothing may throw inside the team.
  const std::int64_t per_thread =
      kQueryTile * kKeyTile + kQueryTile * s.dv + 2 * kQueryTile +
      (kKeyTile + static_cast<std::int64_t>(sizeof(T)) - 1) / static_cast<std::int64_t>(sizeof(T));
  const Tensor scratch = scratch_tensor<T>(per_thread * threads);
  T* const scratch_data = scratch.data<T>();
  GemmStatus status;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for_items(s.batches * tiles, threads, [&](std::int64_t item) {
    const std::size_t b = static_cast<std::size_t>(item / tiles);
    const std::int64_t r0 = (item % tiles) * kQueryTile, r = std::min(kQueryTile, s.n - r0);
    T* tile = scratch_data + omp_get_thread_num() * per_thread;
    T* acc = tile + kQueryTile * kKeyTile;
    T* mx = acc + kQueryTile * s.dv;
    T* sum = mx + kQueryTile;
    unsigned char* keep = reinterpret_cast<unsigned char*>(sum + kQueryTile);
    std::fill(acc, acc + r * s.dv, T(0));
    std::fill(mx, mx + r, minus_inf);
    std::fill(sum, sum + r, T(0));
    const std::int64_t keys = a.key_end(r0, r);
    for (std::int64_t c0 = 0; c0 < keys; c0 += kKeyTile) {
      const std::int64_t c = std::min(kKeyTile, keys - c0);
      gemm(false, true, r, c, s.d, a.scale, a.query(b, r0), a.ldq, a.key(b, c0), a.ldk, T(0), tile,
           kKeyTile, status);
      for (std::int64_t i = 0; i < r; ++i) {
        T* row = tile + i * kKeyTile;
        a.exclude(row, b, r0 + i, c0, c);
        const T top = std::max(mx[i], row_max(row, c));
        if (top == minus_inf) {  // every key so far excluded: this tile adds nothing
          std::fill(row, row + c, T(0));
          continue;
        }
        const T alpha = math::exp_nonpositive(mx[i] - top);  // 0 while mx was -inf
#pragma omp simd
        for (std::int64_t j = 0; j < c; ++j) row[j] -= top;
        exp_row(row, row, c);
        T total = 0;
#pragma omp simd reduction(+ : total)
        for (std::int64_t j = 0; j < c; ++j) total += row[j];
        sum[i] = sum[i] * alpha + total;
        mx[i] = top;
        if (dropout.active()) a.drop(row, b, r0 + i, c0, c, keep);
        if (alpha != T(1)) {
          T* acc_i = acc + i * s.dv;
#pragma omp simd
          for (std::int64_t e = 0; e < s.dv; ++e) acc_i[e] *= alpha;
        }
      }
      gemm(false, false, r, s.dv, c, T(1), tile, kKeyTile, a.value(b, c0), a.ldv, T(1), acc, s.dv,
           status);
    }
    T* out_rows = o + oo[b] + r0 * ldo;
    T* lse_rows = l_out + static_cast<std::int64_t>(b) * s.n + r0;
    for (std::int64_t i = 0; i < r; ++i) {
      T* out_i = out_rows + i * ldo;
      const T* acc_i = acc + i * s.dv;
      if (mx[i] == minus_inf) {
        for (std::int64_t e = 0; e < s.dv; ++e) out_i[e] = s.m == 0 ? T(0) : nan;
        lse_rows[i] = nan;
        continue;
      }
      const T inv = T(1) / sum[i];
#pragma omp simd
      for (std::int64_t e = 0; e < s.dv; ++e) out_i[e] = acc_i[e] * inv;
      lse_rows[i] = mx[i] + std::log(sum[i]);
    }
  });
  status.check(op);
}

template <typename T>
void flash_backward(const Tensor& grad, const Tensor& query, const Tensor& key, const Tensor& value,
                    const Tensor& out, const Tensor& lse, const Tensor& excluded_mask, bool causal,
                    double scale, const AttentionDropout& dropout, const Tensor& grad_query,
                    const Tensor& grad_key, const Tensor& grad_value, const AttentionShape& s) {
  const char* op = "flash_attention_backward";
  const Operands<T> a(s, query, key, value, excluded_mask, causal, scale, dropout);
  const auto go = batch_offsets(grad, s.batch), oo = batch_offsets(out, s.batch),
             gqo = batch_offsets(grad_query, s.batch), gko = batch_offsets(grad_key, s.batch),
             gvo = batch_offsets(grad_value, s.batch);
  const T* g = grad.data<T>();
  const T* o = out.data<T>();
  const T* l_in = lse.data<T>();
  T* gq = grad_query.data<T>();
  T* gk = grad_key.data<T>();
  T* gv = grad_value.data<T>();
  const std::int64_t ldg = row_stride(grad), ldo = row_stride(out), ldgq = row_stride(grad_query),
                     ldgk = row_stride(grad_key), ldgv = row_stride(grad_value);
  check_blas_sizes<T>(op, s, {a.ldq, a.ldk, a.ldv, ldg, ldo, ldgq, ldgk, ldgv});
  const int threads =
      pass_threads(s.batches * s.n * std::max<std::int64_t>(s.m, 1), 3 * s.d + 2 * s.dv + 8);

  // D = rowsum(grad * out), one value per query row.
  const Tensor d_tensor = scratch_tensor<T>(s.batches * s.n);
  T* const d_rows = d_tensor.data<T>();
  for_items(s.batches, pass_threads(s.batches * s.n * s.dv, 2), [&](std::int64_t item) {
    const std::size_t b = static_cast<std::size_t>(item);
    for (std::int64_t i = 0; i < s.n; ++i) {
      const T* g_i = g + go[b] + i * ldg;
      const T* o_i = o + oo[b] + i * ldo;
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (std::int64_t e = 0; e < s.dv; ++e) dot += g_i[e] * o_i[e];
      d_rows[item * s.n + i] = dot;
    }
  });

  // Per thread: P (or, with dropout, P and dropout(P)), dP turned into dS, one row's keeps.
  const std::int64_t tile_elements = kQueryTile * kKeyTile;
  const std::int64_t per_thread =
      (dropout.active() ? 3 : 2) * tile_elements +
      (kKeyTile + static_cast<std::int64_t>(sizeof(T)) - 1) / static_cast<std::int64_t>(sizeof(T));
  const Tensor scratch = scratch_tensor<T>(per_thread * threads);
  T* const scratch_data = scratch.data<T>();
  GemmStatus status;

  // Rows [r0, r0 + r) of matrix b against keys [c0, c0 + c): P (and Pd) and dS into the
  // thread's scratch, whose pointers it returns.
  struct Tile {
    T* p;
    T* pd;
    T* ds;
  };
  const auto tile = [&](std::size_t b, std::int64_t r0, std::int64_t r, std::int64_t c0,
                        std::int64_t c) {
    T* base = scratch_data + omp_get_thread_num() * per_thread;
    Tile t{base, base, base + tile_elements};
    if (dropout.active()) t.pd = base + 2 * tile_elements;
    unsigned char* keep =
        reinterpret_cast<unsigned char*>(base + (dropout.active() ? 3 : 2) * tile_elements);
    gemm(false, true, r, c, s.d, a.scale, a.query(b, r0), a.ldq, a.key(b, c0), a.ldk, T(0), t.p,
         kKeyTile, status);
    gemm(false, true, r, c, s.dv, T(1), g + go[b] + r0 * ldg, ldg, a.value(b, c0), a.ldv, T(0),
         t.ds, kKeyTile, status);
    const T* lse_rows = l_in + static_cast<std::int64_t>(b) * s.n + r0;
    const T* d_of = d_rows + static_cast<std::int64_t>(b) * s.n + r0;
    for (std::int64_t i = 0; i < r; ++i) {
      T* p_i = t.p + i * kKeyTile;
      T* ds_i = t.ds + i * kKeyTile;
      a.exclude(p_i, b, r0 + i, c0, c);
      const T l = lse_rows[i];
#pragma omp simd
      for (std::int64_t j = 0; j < c; ++j) {
        const T x = p_i[j] - l;  // <= 0 up to rounding; -inf where excluded; NaN for NaN lse
        p_i[j] = x > T(0) ? T(0) : x;
      }
      exp_row(p_i, p_i, c);
      if (dropout.active()) {
        T* pd_i = t.pd + i * kKeyTile;
        std::copy(p_i, p_i + c, pd_i);
        a.drop(pd_i, b, r0 + i, c0, c, keep);
        a.drop(ds_i, b, r0 + i, c0, c, keep);
      }
      const T d_i = d_of[i];
#pragma omp simd
      for (std::int64_t j = 0; j < c; ++j) ds_i[j] = a.scale * p_i[j] * (ds_i[j] - d_i);
    }
    return t;
  };

  const auto zero_rows = [](T* rows, std::int64_t count, std::int64_t width, std::int64_t ld) {
    for (std::int64_t i = 0; i < count; ++i) std::fill(rows + i * ld, rows + i * ld + width, T(0));
  };

  // grad_key and grad_value for keys [c0, c0 + c) of matrix b, from every query tile that may
  // attend to them; with_query: grad_query gathers its share in the same pass.
  const auto key_tile = [&](std::size_t b, std::int64_t c0, std::int64_t c, bool with_query) {
    T* gk_tile = gk + gko[b] + c0 * ldgk;
    T* gv_tile = gv + gvo[b] + c0 * ldgv;
    const std::int64_t first = a.row_begin(c0);
    if (first >= s.n) {  // no query attends to these keys
      zero_rows(gk_tile, c, s.d, ldgk);
      zero_rows(gv_tile, c, s.dv, ldgv);
      return;
    }
    for (std::int64_t r0 = first; r0 < s.n; r0 += kQueryTile) {
      const std::int64_t r = std::min(kQueryTile, s.n - r0);
      const Tile t = tile(b, r0, r, c0, c);
      const T beta = r0 == first ? T(0) : T(1);
      gemm(true, false, c, s.dv, r, T(1), t.pd, kKeyTile, g + go[b] + r0 * ldg, ldg, beta, gv_tile,
           ldgv, status);
      gemm(true, false, c, s.d, r, T(1), t.ds, kKeyTile, a.query(b, r0), a.ldq, beta, gk_tile, ldgk,
           status);
      if (with_query) {
        gemm(false, false, r, s.d, c, T(1), t.ds, kKeyTile, a.key(b, c0), a.ldk, T(1),
             gq + gqo[b] + r0 * ldgq, ldgq, status);
      }
    }
  };

  const std::int64_t key_tiles = (s.m + kKeyTile - 1) / kKeyTile;
  if (s.batches >= kMinMatrices) {
    for_items(s.batches, threads, [&](std::int64_t item) {
      const std::size_t b = static_cast<std::size_t>(item);
      zero_rows(gq + gqo[b], s.n, s.d, ldgq);
      for (std::int64_t c0 = 0; c0 < s.m; c0 += kKeyTile) {
        key_tile(b, c0, std::min(kKeyTile, s.m - c0), true);
      }
    });
    status.check(op);
    return;
  }

  for_items(s.batches * key_tiles, threads, [&](std::int64_t item) {
    const std::size_t b = static_cast<std::size_t>(item / key_tiles);
    const std::int64_t c0 = (item % key_tiles) * kKeyTile;
    key_tile(b, c0, std::min(kKeyTile, s.m - c0), false);
  });
  status.check(op);
  const std::int64_t query_tiles = (s.n + kQueryTile - 1) / kQueryTile;
  for_items(s.batches * query_tiles, threads, [&](std::int64_t item) {
    const std::size_t b = static_cast<std::size_t>(item / query_tiles);
    const std::int64_t r0 = (item % query_tiles) * kQueryTile, r = std::min(kQueryTile, s.n - r0);
    T* gq_rows = gq + gqo[b] + r0 * ldgq;
    const std::int64_t keys = a.key_end(r0, r);
    if (keys == 0) zero_rows(gq_rows, r, s.d, ldgq);
    for (std::int64_t c0 = 0; c0 < keys; c0 += kKeyTile) {
      const std::int64_t c = std::min(kKeyTile, keys - c0);
      const Tile t = tile(b, r0, r, c0, c);
      gemm(false, false, r, s.d, c, T(1), t.ds, kKeyTile, a.key(b, c0), a.ldk,
           c0 == 0 ? T(0) : T(1), gq_rows, ldgq, status);
    }
  });
  status.check(op);
}

}  // namespace

void CpuBackend::flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                 const Tensor& excluded_mask, bool causal, double scale,
                                 const AttentionDropout& dropout, const Tensor& out,
                                 const Tensor& lse) {
  const AttentionShape s =
      check_flash_attention_args(query, key, value, excluded_mask, scale, dropout, out, lse, *this);
  if (s.batches == 0 || s.n == 0) return;
  if (query.dtype() == DType::float32) {
    flash_forward<float>(query, key, value, excluded_mask, causal, scale, dropout, out, lse, s);
  } else {
    flash_forward<double>(query, key, value, excluded_mask, causal, scale, dropout, out, lse, s);
  }
}

void CpuBackend::flash_attention_backward(const Tensor& grad, const Tensor& query,
                                          const Tensor& key, const Tensor& value, const Tensor& out,
                                          const Tensor& lse, const Tensor& excluded_mask,
                                          bool causal, double scale,
                                          const AttentionDropout& dropout, const Tensor& grad_query,
                                          const Tensor& grad_key, const Tensor& grad_value) {
  const AttentionShape s =
      check_flash_attention_backward_args(grad, query, key, value, out, lse, excluded_mask, scale,
                                          dropout, grad_query, grad_key, grad_value, *this);
  if (s.batches == 0) return;
  if (query.dtype() == DType::float32) {
    flash_backward<float>(grad, query, key, value, out, lse, excluded_mask, causal, scale, dropout,
                          grad_query, grad_key, grad_value, s);
  } else {
    flash_backward<double>(grad, query, key, value, out, lse, excluded_mask, causal, scale, dropout,
                           grad_query, grad_key, grad_value, s);
  }
}

}  // namespace tinyformer::cpu
