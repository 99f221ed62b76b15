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
//
// On a CPU with AVX-512, in float32, the products run on the kernels of avx512.h: key and value
// are packed once per call (linear in m), the head-width products (scores, dP) on gemm_nt over a
// tile's panels of keys, with the rows' maxima from the product where no mask or rule applies;
// the products over a tile's keys (P v, dS k) on gemm_nn; grad_key and grad_value on gemm_tn,
// which adds into them. Elsewhere (float64, other CPUs, or where oneDNN runs AMX) every product
// is a oneDNN sgemm or OpenBLAS dgemm call on the calling thread.
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
#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/softmax_row.h"
#include "core/error.h"
#include "core/math.h"
#include "core/op_checks.h"
#include "core/softmax_math.h"

namespace tinyformer::cpu {

namespace {

// A tile's scores: kQueryTile x kKeyTile (128 KiB in float32) stay in L2 between the products
// and the row pass that runs between them; 512 keys make the products over a tile's keys (P v,
// dS k) long enough to run near the kernels' best rate. gemm_tn sums chunks of 128 rows, so a
// tile of rows is one chunk.
constexpr std::int64_t kQueryTile = 64, kKeyTile = 512;
// From this many matrices on, the backward runs one matrix per item (the file comment).
constexpr std::int64_t kMinMatrices = 8;

// row[j] = exp(row[j] - shift) for j < n, where row[j] <= shift, -inf or NaN (the difference
// floored at 0 against rounding); returns their sum. One pass.
template <typename T>
T exp_shifted(T* row, std::int64_t n, T shift) {
  if constexpr (std::is_same_v<T, float>) {
    if (avx512::available()) return avx512::exp_shifted_sum(row, row, n, shift);
  }
  T total = 0;
#pragma omp simd reduction(+ : total)
  for (std::int64_t j = 0; j < n; ++j) {
    const T x = row[j] - shift;
    row[j] = math::exp_nonpositive(x > T(0) ? T(0) : x);
    total += row[j];
  }
  return total;
}

// Key and value packed for avx512.h's products, once per call, matrix after matrix: nt for
// gemm_nt over any tile of keys (panels of 64 keys: a tile from key c0 starts c0 * width floats
// in), nn for gemm_nn a tile of kKeyTile keys at a time (each tile packed on its own). Empty
// (used() false) where those kernels do not run.
struct Packed {
  Tensor data;
  std::int64_t per_matrix = 0, per_tile = 0;
  bool used() const { return data.defined(); }
  const float* matrix(std::size_t b) const {
    return data.data<float>() + static_cast<std::int64_t>(b) * per_matrix;
  }
};

Packed pack_nt_all(const float* x, const std::vector<std::int64_t>& offsets, std::int64_t ld,
                   std::int64_t rows, std::int64_t width, std::int64_t batches, int threads) {
  Packed p;
  p.per_matrix = avx512::packed_nt_size(rows, width);
  p.data = scratch_tensor<float>(std::max<std::int64_t>(p.per_matrix * batches, 1));
  float* out = p.data.data<float>();
  for_items(batches, threads, [&](std::int64_t b) {
    avx512::pack_nt(x + offsets[static_cast<std::size_t>(b)], ld, rows, width,
                    out + b * p.per_matrix);
  });
  return p;
}

Packed pack_nn_tiles(const float* x, const std::vector<std::int64_t>& offsets, std::int64_t ld,
                     std::int64_t rows, std::int64_t width, std::int64_t batches, int threads,
                     std::int64_t tile) {
  Packed p;
  const std::int64_t tiles = (rows + tile - 1) / tile;
  p.per_tile = avx512::packed_nn_size(tile, width);
  p.per_matrix = tiles * p.per_tile;
  p.data = scratch_tensor<float>(std::max<std::int64_t>(p.per_matrix * batches, 1));
  float* out = p.data.data<float>();
  for_items(batches * tiles, threads, [&](std::int64_t item) {
    const std::int64_t b = item / tiles, t = item % tiles;
    const std::int64_t r0 = t * tile;
    avx512::pack_nn(x + offsets[static_cast<std::size_t>(b)] + r0 * ld, ld,
                    std::min(tile, rows - r0), width, out + b * p.per_matrix + t * p.per_tile);
  });
  return p;
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
      if (mask_col == 1) {
#pragma omp simd
        for (std::int64_t j = 0; j < c; ++j) row[j] = m[j] ? minus_inf : row[j];
      } else {
        for (std::int64_t j = 0; j < c; ++j) {
          if (m[j * mask_col]) row[j] = minus_inf;
        }
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

// Whether the AVX-512 products run: float32 on a CPU that has them (and not where oneDNN runs
// AMX, whose sgemm is the faster there).
template <typename T>
bool avx512_products() {
  return std::is_same_v<T, float> && avx512::available() && !dnnl_runs_amx();
}

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
  Packed packed_key, packed_value;
  if constexpr (std::is_same_v<T, float>) {
    if (avx512_products<T>() && s.m > 0) {
      packed_key = pack_nt_all(a.k, a.ko, a.ldk, s.m, s.d, s.batches, threads);
      packed_value = pack_nn_tiles(a.v, a.vo, a.ldv, s.m, s.dv, s.batches, threads, kKeyTile);
    }
  }
  // The rows' maxima from the scores' product, where nothing is excluded.
  const bool max_from_product = packed_key.used() && !a.mask && !causal;
  // Per thread: the scores tile, the output accumulator, a tile's product with the values (on
  // the AVX-512 path), the rows' maximum and sum, the tile's row maxima, and the dropout keeps of
  // one row. Allocated here: nothing may throw inside the team.
  const std::int64_t product = packed_key.used() ? kQueryTile * s.dv : 0;
  const std::int64_t per_thread =
      kQueryTile * kKeyTile + kQueryTile * s.dv + product + 3 * kQueryTile +
      (kKeyTile + static_cast<std::int64_t>(sizeof(T)) - 1) / static_cast<std::int64_t>(sizeof(T));
  const Tensor scratch = scratch_tensor<T>(per_thread * threads);
  T* const scratch_data = scratch.data<T>();
  GemmStatus status;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for_items_with_slots(s.batches * tiles, threads, [&](std::int64_t item, int slot) {
    const std::size_t b = static_cast<std::size_t>(item / tiles);
    const std::int64_t r0 = (item % tiles) * kQueryTile, r = std::min(kQueryTile, s.n - r0);
    T* tile = scratch_data + slot * per_thread;
    T* acc = tile + kQueryTile * kKeyTile;
    T* pv = acc + kQueryTile * s.dv;
    T* mx = pv + product;
    T* sum = mx + kQueryTile;
    T* tile_max = sum + kQueryTile;
    unsigned char* keep = reinterpret_cast<unsigned char*>(tile_max + kQueryTile);
    std::fill(acc, acc + r * s.dv, T(0));
    std::fill(mx, mx + r, minus_inf);
    std::fill(sum, sum + r, T(0));
    const std::int64_t keys = a.key_end(r0, r);
    for (std::int64_t c0 = 0; c0 < keys; c0 += kKeyTile) {
      const std::int64_t c = std::min(kKeyTile, keys - c0);
      bool maxima = false;
      if constexpr (std::is_same_v<T, float>) {
        if (packed_key.used()) {
          avx512::gemm_nt(r, c, s.d, a.scale, a.query(b, r0), a.ldq,
                          packed_key.matrix(b) + c0 * s.d, tile, kKeyTile,
                          max_from_product ? tile_max : nullptr);
          maxima = max_from_product;
        }
      }
      if (!packed_key.used()) {
        gemm(false, true, r, c, s.d, a.scale, a.query(b, r0), a.ldq, a.key(b, c0), a.ldk, T(0),
             tile, kKeyTile, status);
      }
      for (std::int64_t i = 0; i < r; ++i) {
        T* row = tile + i * kKeyTile;
        T top_here;
        if (maxima) {
          top_here = tile_max[i];
        } else {
          a.exclude(row, b, r0 + i, c0, c);
          top_here = row_max(row, c);
        }
        const T top = std::max(mx[i], top_here);
        tile_max[i] = T(1);      // the factor on the accumulated output: 1 unless the maximum moves
        if (top == minus_inf) {  // every key so far excluded: this tile adds nothing
          std::fill(row, row + c, T(0));
          continue;
        }
        const T alpha = math::exp_nonpositive(mx[i] - top);  // 0 while mx was -inf
        sum[i] = sum[i] * alpha + exp_shifted(row, c, top);
        mx[i] = top;
        tile_max[i] = alpha;
        if (dropout.active()) a.drop(row, b, r0 + i, c0, c, keep);
      }
      // acc = acc * alpha + tile v, row by row.
      if constexpr (std::is_same_v<T, float>) {
        if (packed_value.used()) {
          // The tile was packed with all its keys; those past the causal rule's last get 0.
          const std::int64_t packed = std::min(kKeyTile, s.m - c0);
          for (std::int64_t i = 0; c < packed && i < r; ++i) {
            std::fill(tile + i * kKeyTile + c, tile + i * kKeyTile + packed, T(0));
          }
          avx512::gemm_nn(r, s.dv, packed, tile, kKeyTile,
                          packed_value.matrix(b) + (c0 / kKeyTile) * packed_value.per_tile, pv,
                          s.dv);
          for (std::int64_t i = 0; i < r; ++i) {
            T* acc_i = acc + i * s.dv;
            const T* pv_i = pv + i * s.dv;
            const T alpha = tile_max[i];
#pragma omp simd
            for (std::int64_t e = 0; e < s.dv; ++e) acc_i[e] = acc_i[e] * alpha + pv_i[e];
          }
          continue;
        }
      }
      for (std::int64_t i = 0; i < r; ++i) {
        const T alpha = tile_max[i];
        if (alpha == T(1)) continue;
        T* acc_i = acc + i * s.dv;
#pragma omp simd
        for (std::int64_t e = 0; e < s.dv; ++e) acc_i[e] *= alpha;
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

  Packed key_nt, value_nt, key_nn;
  if constexpr (std::is_same_v<T, float>) {
    if (avx512_products<T>() && s.m > 0 && s.n > 0) {
      key_nt = pack_nt_all(a.k, a.ko, a.ldk, s.m, s.d, s.batches, threads);
      value_nt = pack_nt_all(a.v, a.vo, a.ldv, s.m, s.dv, s.batches, threads);
      key_nn = pack_nn_tiles(a.k, a.ko, a.ldk, s.m, s.d, s.batches, threads, kKeyTile);
    }
  }
  const bool fast = key_nt.used();

  // Per thread: P (or, with dropout, P and dropout(P)), dP turned into dS, a tile's dS k (on the
  // AVX-512 path), gemm_tn's scratch, one row's keeps.
  const std::int64_t tile_elements = kQueryTile * kKeyTile;
  const std::int64_t dq_elements = fast ? kQueryTile * s.d : 0;
  const std::int64_t tn_elements = fast ? avx512::gemm_tn_scratch_size() : 0;
  const std::int64_t keep_offset =
      (dropout.active() ? 3 : 2) * tile_elements + dq_elements + tn_elements;
  const std::int64_t per_thread =
      keep_offset +
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
    T* dq;
    T* tn;
  };
  const auto tile = [&](int slot, std::size_t b, std::int64_t r0, std::int64_t r, std::int64_t c0,
                        std::int64_t c) {
    T* base = scratch_data + slot * per_thread;
    const std::int64_t tiles = dropout.active() ? 3 : 2;
    Tile t{base, base, base + tile_elements, base + tiles * tile_elements,
           base + tiles * tile_elements + dq_elements};
    if (dropout.active()) t.pd = base + 2 * tile_elements;
    unsigned char* keep = reinterpret_cast<unsigned char*>(base + keep_offset);
    bool products = false;
    if constexpr (std::is_same_v<T, float>) {
      if (fast) {
        avx512::gemm_nt(r, c, s.d, a.scale, a.query(b, r0), a.ldq, key_nt.matrix(b) + c0 * s.d, t.p,
                        kKeyTile, nullptr);
        avx512::gemm_nt(r, c, s.dv, 1.0f, g + go[b] + r0 * ldg, ldg, value_nt.matrix(b) + c0 * s.dv,
                        t.ds, kKeyTile, nullptr);
        products = true;
      }
    }
    if (!products) {
      gemm(false, true, r, c, s.d, a.scale, a.query(b, r0), a.ldq, a.key(b, c0), a.ldk, T(0), t.p,
           kKeyTile, status);
      gemm(false, true, r, c, s.dv, T(1), g + go[b] + r0 * ldg, ldg, a.value(b, c0), a.ldv, T(0),
           t.ds, kKeyTile, status);
    }
    const T* lse_rows = l_in + static_cast<std::int64_t>(b) * s.n + r0;
    const T* d_of = d_rows + static_cast<std::int64_t>(b) * s.n + r0;
    for (std::int64_t i = 0; i < r; ++i) {
      T* p_i = t.p + i * kKeyTile;
      T* ds_i = t.ds + i * kKeyTile;
      a.exclude(p_i, b, r0 + i, c0, c);
      // P = exp(S - lse): 0 where excluded, NaN throughout a row whose lse is NaN.
      exp_shifted(p_i, c, lse_rows[i]);
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

  // grad_query[rows] (+)= dS k[keys]: beta 0 writes, 1 adds.
  const auto query_product = [&](const Tile& t, std::size_t b, std::int64_t r0, std::int64_t r,
                                 std::int64_t c0, std::int64_t c, T beta) {
    T* gq_rows = gq + gqo[b] + r0 * ldgq;
    if constexpr (std::is_same_v<T, float>) {
      if (fast) {
        // The tile was packed with all its keys; those past the causal rule's last get 0.
        const std::int64_t packed = std::min(kKeyTile, s.m - c0);
        for (std::int64_t i = 0; c < packed && i < r; ++i) {
          std::fill(t.ds + i * kKeyTile + c, t.ds + i * kKeyTile + packed, T(0));
        }
        avx512::gemm_nn(r, s.d, packed, t.ds, kKeyTile,
                        key_nn.matrix(b) + (c0 / kKeyTile) * key_nn.per_tile, t.dq, s.d);
        for (std::int64_t i = 0; i < r; ++i) {
          T* row = gq_rows + i * ldgq;
          const T* add = t.dq + i * s.d;
          if (beta == T(0)) {
            std::copy(add, add + s.d, row);
          } else {
#pragma omp simd
            for (std::int64_t e = 0; e < s.d; ++e) row[e] += add[e];
          }
        }
        return;
      }
    }
    gemm(false, false, r, s.d, c, T(1), t.ds, kKeyTile, a.key(b, c0), a.ldk, beta, gq_rows, ldgq,
         status);
  };

  // grad_key and grad_value for keys [c0, c0 + c) of matrix b, from every query tile that may
  // attend to them; with_query: grad_query gathers its share in the same pass.
  const auto key_tile = [&](int slot, std::size_t b, std::int64_t c0, std::int64_t c,
                            bool with_query) {
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
      const Tile t = tile(slot, b, r0, r, c0, c);
      const bool accumulate = r0 != first;
      bool done = false;
      if constexpr (std::is_same_v<T, float>) {
        if (fast) {
          avx512::gemm_tn(c, s.dv, r, t.pd, kKeyTile, g + go[b] + r0 * ldg, ldg, gv_tile, ldgv,
                          t.tn, accumulate);
          avx512::gemm_tn(c, s.d, r, t.ds, kKeyTile, a.query(b, r0), a.ldq, gk_tile, ldgk, t.tn,
                          accumulate);
          done = true;
        }
      }
      if (!done) {
        const T beta = accumulate ? T(1) : T(0);
        gemm(true, false, c, s.dv, r, T(1), t.pd, kKeyTile, g + go[b] + r0 * ldg, ldg, beta,
             gv_tile, ldgv, status);
        gemm(true, false, c, s.d, r, T(1), t.ds, kKeyTile, a.query(b, r0), a.ldq, beta, gk_tile,
             ldgk, status);
      }
      if (with_query) query_product(t, b, r0, r, c0, c, T(1));
    }
  };

  const std::int64_t key_tiles = (s.m + kKeyTile - 1) / kKeyTile;
  if (s.batches >= kMinMatrices) {
    for_items_with_slots(s.batches, threads, [&](std::int64_t item, int slot) {
      const std::size_t b = static_cast<std::size_t>(item);
      zero_rows(gq + gqo[b], s.n, s.d, ldgq);
      for (std::int64_t c0 = 0; c0 < s.m; c0 += kKeyTile) {
        key_tile(slot, b, c0, std::min(kKeyTile, s.m - c0), true);
      }
    });
    status.check(op);
    return;
  }

  for_items_with_slots(s.batches * key_tiles, threads, [&](std::int64_t item, int slot) {
    const std::size_t b = static_cast<std::size_t>(item / key_tiles);
    const std::int64_t c0 = (item % key_tiles) * kKeyTile;
    key_tile(slot, b, c0, std::min(kKeyTile, s.m - c0), false);
  });
  status.check(op);
  const std::int64_t query_tiles = (s.n + kQueryTile - 1) / kQueryTile;
  for_items_with_slots(s.batches * query_tiles, threads, [&](std::int64_t item, int slot) {
    const std::size_t b = static_cast<std::size_t>(item / query_tiles);
    const std::int64_t r0 = (item % query_tiles) * kQueryTile, r = std::min(kQueryTile, s.n - r0);
    const std::int64_t keys = a.key_end(r0, r);
    if (keys == 0) zero_rows(gq + gqo[b] + r0 * ldgq, r, s.d, ldgq);
    for (std::int64_t c0 = 0; c0 < keys; c0 += kKeyTile) {
      const std::int64_t c = std::min(kKeyTile, keys - c0);
      query_product(tile(slot, b, r0, r, c0, c), b, r0, r, c0, c, c0 == 0 ? T(0) : T(1));
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
