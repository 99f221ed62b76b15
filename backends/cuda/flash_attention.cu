// CudaBackend::flash_attention and flash_attention_backward: memory-efficient exact attention
// (FlashAttention-2's scheme) over the leading (batch) dims, as shared-memory tiled kernels that
// never hold an [n, m] matrix (core/ops.def).
//
// A tile is kTile queries by kTile keys, worked on by one block of kThreads threads: thread t
// owns the pairs (t / 8, t % 8 + 8 u), u < 4, so the 8 threads of a tile row are 8 adjacent
// lanes of one warp and reduce over the row by shuffles. The head dims d and dv are walked in
// chunks of kTile columns staged through shared memory, so any size works.
//
// Forward: one block per (batch matrix, tile of queries), looping over the tiles of keys with a
// running row maximum mx and sum l:
//   s = scale q k^T, -inf where attention_excluded() or past the last key
//   mx' = max(mx, rowmax s),  l' = l exp(mx - mx') + rowsum exp(s - mx')
//   out = out exp(mx - mx') + (exp(s - mx') keep / (1 - p)) v     in out's rows, the block's own
// then out /= l and lse = mx + log(l). A row whose maximum stays -inf (every key excluded) gets
// NaN in out and lse. causal: the key tiles after the tile's last query hold no allowed key and
// are skipped.
//
// Backward: D = rowsum(grad * out) (one warp per row, into a [batches n] scratch tensor), then per
// tile, with f = keep / (1 - p) (1 without dropout):
//   P = exp(s - lse)   s = -inf where excluded: P = 0 there, or NaN in a row whose lse is NaN,
//                      as the reference backend's softmax of a row of -inf alone is
//   dP = grad v^T,  Pd = P f,  dS = P (f dP - D)
// One kernel per (batch matrix, tile of keys) loops over the query tiles for grad_value = Pd^T
// grad and grad_key = scale dS^T query; one per (batch matrix, tile of queries) loops over the
// key tiles for grad_query = scale dS key. causal: the first skips a query tile that lies wholly
// before its keys unless one of the tile's rows has a NaN lse (whose P is NaN at every key); the
// second skips the key tiles after its last query (a NaN row is NaN from the first key tile on).
//
// Determinism: every output element is summed by one thread in a fixed order, in the output
// tensor itself (each block owns its rows of it); no atomics. Accumulation is in T (float32 in
// float, float64 in double). Dropout redraws dropout.keep((b n + i) m + j) for element (i, j) of
// batch matrix b wherever it is needed.
//
// Empty problems: no batches or n = 0 leave nothing to compute but zero gradients of key and
// value; m = 0 makes out a sum of nothing (0) and lse NaN, as in the reference backend, and
// grad_query 0.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/strided.cuh"
#include "core/error.h"
#include "core/math.h"
#include "core/op_checks.h"
#include "core/softmax_math.h"

namespace tinyformer::cuda {

namespace {

constexpr int kTile = 32;                        // queries, keys and head columns per tile
constexpr int kThreads = 256;                    // threads per block
constexpr int kRowThreads = kThreads / kTile;    // threads per tile row
constexpr int kPerThread = kTile / kRowThreads;  // pairs of a tile row per thread
constexpr std::int64_t kMaxBlocks = 65535;       // blocks of a grid-stride launch
constexpr unsigned kFullWarp = 0xffffffffu;

// A [kTile, kTile] block of a matrix in shared memory; the padding column puts the rows of one
// column in different banks.
template <typename T>
using Tile = T[kTile][kTile + 1];

// One operand's batch matrices: matrix b starts batch.offset(b) elements after data, its row r
// row_stride elements after that; the last dim has unit stride.
template <typename T>
struct Rows {
  T* data;
  StridedIndex batch;
  std::int64_t row_stride;

  __device__ T* matrix(std::int64_t b) const { return data + batch.offset(b); }
};

template <typename T>
Rows<T> rows_of(const Tensor& t, const Shape& batch, const char* op) {
  const Shape strides(t.strides().begin(),
                      t.strides().begin() + static_cast<std::ptrdiff_t>(batch.size()));
  return {static_cast<T*>(t.data_ptr()), strided_index(batch, strides, op), t.stride(-2)};
}

// excluded_mask's matrices (data null when there is none): entry (i, j) of matrix b lies at
// batch.offset(b) + i row_stride + j col_stride.
struct MaskRows {
  const bool* data = nullptr;
  StridedIndex batch;
  std::int64_t row_stride = 0, col_stride = 0;

  __device__ const bool* matrix(std::int64_t b) const {
    return data != nullptr ? data + batch.offset(b) : nullptr;
  }
  // Whether query i attends to key j of `matrix` (from matrix(); null: no mask).
  __device__ bool allowed(const bool* matrix, bool causal, std::int64_t i, std::int64_t j) const {
    return !attention_excluded(matrix != nullptr && matrix[i * row_stride + j * col_stride], causal,
                               i, j);
  }
};

MaskRows mask_rows_of(const Tensor& excluded_mask, const Shape& batch, const char* op) {
  MaskRows mask;
  if (!excluded_mask.defined()) return mask;
  const Rows<const bool> rows = rows_of<const bool>(excluded_mask, batch, op);
  mask.data = rows.data;
  mask.batch = rows.batch;
  mask.row_stride = rows.row_stride;
  mask.col_stride = excluded_mask.stride(-1);
  return mask;
}

struct Sizes {
  std::int64_t batches, n, m, d, dv;
  bool causal;
};

unsigned blocks_for(std::int64_t tiles) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(tiles, 1, kMaxBlocks));
}

__host__ __device__ inline std::int64_t tiles_of(std::int64_t size) {
  return (size + kTile - 1) / kTile;
}

template <typename T>
__device__ inline bool is_nan(T v) {
  return v != v;
}

// The sum and the maximum over the kRowThreads lanes of a tile row; every lane of the warp
// calls them.
template <typename T>
__device__ inline T row_sum(T v) {
  for (int s = kRowThreads / 2; s > 0; s >>= 1) v += __shfl_xor_sync(kFullWarp, v, s);
  return v;
}
// A NaN never wins (as block_max's comparison); it reaches the row through the sum instead.
template <typename T>
__device__ inline T row_max(T v) {
  for (int s = kRowThreads / 2; s > 0; s >>= 1) {
    const T o = __shfl_xor_sync(kFullWarp, v, s);
    v = o > v ? o : v;
  }
  return v;
}

// tile = rows [row0, row0 + kTile) x columns [col0, col0 + kTile) of a rows x cols matrix, 0
// outside it.
template <typename T>
__device__ void load_tile(Tile<T>& tile, const T* matrix, std::int64_t row_stride,
                          std::int64_t row0, std::int64_t rows, std::int64_t col0,
                          std::int64_t cols) {
  for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
    const int r = e / kTile, c = e % kTile;
    const std::int64_t row = row0 + r, column = col0 + c;
    tile[r][c] = row < rows && column < cols ? matrix[row * row_stride + column] : T(0);
  }
}

// acc[u] = a[i0 + row] . b[j0 + col + kRowThreads u] over all `width` columns, for a: [n, width]
// and b: [m, width] (0 for rows past them), staged chunk by chunk through sa and sb.
template <typename T>
__device__ void tile_dots(T (&acc)[kPerThread], Tile<T>& sa, Tile<T>& sb, const T* a,
                          std::int64_t a_stride, std::int64_t i0, std::int64_t n, const T* b,
                          std::int64_t b_stride, std::int64_t j0, std::int64_t m,
                          std::int64_t width, int row, int col) {
  for (int u = 0; u < kPerThread; ++u) acc[u] = T(0);
  for (std::int64_t c0 = 0; c0 < width; c0 += kTile) {
    load_tile(sa, a, a_stride, i0, n, c0, width);
    load_tile(sb, b, b_stride, j0, m, c0, width);
    __syncthreads();
    for (int c = 0; c < kTile; ++c) {
      const T x = sa[row][c];
      for (int u = 0; u < kPerThread; ++u) acc[u] += x * sb[col + kRowThreads * u][c];
    }
    __syncthreads();
  }
}

// acc[u] = sum_k w[row][k] x[k][col + kRowThreads u], or with w's transpose (w[k][row]) when
// kTranspose: row `row` of w x or w^T x over one chunk of x's columns.
template <bool kTranspose, typename T>
__device__ void tile_product(T (&acc)[kPerThread], const Tile<T>& w, const Tile<T>& x, int row,
                             int col) {
  for (int u = 0; u < kPerThread; ++u) acc[u] = T(0);
  for (int k = 0; k < kTile; ++k) {
    const T weight = kTranspose ? w[k][row] : w[row][k];
    for (int u = 0; u < kPerThread; ++u) acc[u] += weight * x[k][col + kRowThreads * u];
  }
}

// Adds acc to columns e0 + col + kRowThreads u (< cols) of `out_row`, or stores it there when
// `first`: the running sums kept in an output row.
template <typename T>
__device__ void accumulate_row(T* out_row, const T (&acc)[kPerThread], std::int64_t e0,
                               std::int64_t cols, int col, bool first) {
  for (int u = 0; u < kPerThread; ++u) {
    const std::int64_t e = e0 + col + kRowThreads * u;
    if (e < cols) out_row[e] = first ? acc[u] : out_row[e] + acc[u];
  }
}

// --- forward ---

// query: [B, n, d], key: [B, m, d], value: [B, m, dv], out: [B, n, dv] (B = s.batches, at the
// Rows' offsets), lse: [B n] contiguous; m > 0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(Rows<const T> query, Rows<const T> key, Rows<const T> value, MaskRows mask,
                         Rows<T> out, T* lse, Sizes s, T scale, AttentionDropout dropout) {
  __shared__ Tile<T> sa, sb, probs;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const T kept = static_cast<T>(dropout.scale);
  const int row = threadIdx.x / kRowThreads, col = threadIdx.x % kRowThreads;
  const std::int64_t query_tiles = tiles_of(s.n);
  // The tile is the same for the whole block, so every thread reaches each barrier and shuffle.
  for (std::int64_t tile = blockIdx.x; tile < s.batches * query_tiles; tile += gridDim.x) {
    const std::int64_t b = tile / query_tiles, i0 = tile % query_tiles * kTile;
    const std::int64_t i = i0 + row;
    const bool row_ok = i < s.n;
    const T* q = query.matrix(b);
    const T* k = key.matrix(b);
    const T* v = value.matrix(b);
    T* o = out.matrix(b) + i * out.row_stride;
    const bool* excluded = mask.matrix(b);
    const std::int64_t last = std::min<std::int64_t>(i0 + kTile, s.n) - 1;
    const std::int64_t key_end = s.causal ? std::min<std::int64_t>(s.m, last + 1) : s.m;
    T mx = minus_inf, l = T(0);
    for (std::int64_t j0 = 0; j0 < key_end; j0 += kTile) {
      T sc[kPerThread];
      tile_dots(sc, sa, sb, q, query.row_stride, i0, s.n, k, key.row_stride, j0, s.m, s.d, row,
                col);
      T tile_max = minus_inf;
      for (int u = 0; u < kPerThread; ++u) {
        const std::int64_t j = j0 + col + kRowThreads * u;
        const bool allowed = row_ok && j < s.m && mask.allowed(excluded, s.causal, i, j);
        sc[u] = allowed ? scale * sc[u] : minus_inf;
        tile_max = sc[u] > tile_max ? sc[u] : tile_max;
      }
      tile_max = row_max(tile_max);
      const T mx_next = tile_max > mx ? tile_max : mx;
      // While every key so far is excluded, nothing is added (exp(-inf - -inf) would be NaN).
      const bool live = mx_next != minus_inf;
      const T alpha = live ? math::exp(mx - mx_next) : T(1);
      T sum = T(0);
      for (int u = 0; u < kPerThread; ++u) {
        const std::int64_t j = j0 + col + kRowThreads * u;
        T p = live ? math::exp(sc[u] - mx_next) : T(0);
        sum += p;
        if (dropout.active()) {
          p *= dropout.keep(static_cast<std::uint64_t>((b * s.n + i) * s.m + j)) ? kept : T(0);
        }
        probs[row][col + kRowThreads * u] = p;
      }
      l = l * alpha + row_sum(sum);
      mx = mx_next;
      __syncthreads();  // probs is complete
      for (std::int64_t e0 = 0; e0 < s.dv; e0 += kTile) {
        load_tile(sb, v, value.row_stride, j0, s.m, e0, s.dv);
        __syncthreads();
        T acc[kPerThread];
        tile_product<false>(acc, probs, sb, row, col);
        for (int u = 0; u < kPerThread && row_ok; ++u) {
          const std::int64_t e = e0 + col + kRowThreads * u;
          if (e < s.dv) o[e] = j0 == 0 ? acc[u] : o[e] * alpha + acc[u];
        }
        __syncthreads();
      }
    }
    if (row_ok) {
      // The thread owns the columns e = col (mod kRowThreads) of its row, as in the loop above.
      const bool none = mx == minus_inf;
      const T nan = std::numeric_limits<T>::quiet_NaN();
      for (std::int64_t e = col; e < s.dv; e += kRowThreads) o[e] = none ? nan : o[e] / l;
      if (col == 0) lse[b * s.n + i] = none ? nan : mx + math::log(l);
    }
  }
}

// --- backward ---

// The backward's inputs: grad: [B, n, dv], query, key, value as the forward's, lse and dots (D):
// [B n] contiguous.
template <typename T>
struct BackwardArgs {
  Rows<const T> grad, query, key, value;
  MaskRows mask;
  const T* lse;
  const T* dots;
  Sizes s;
  T scale;
  AttentionDropout dropout;
};

// dots[r] = grad[b, i] . out[b, i] for row r = b n + i of the B n rows: one warp per row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_row_dots_kernel(Rows<const T> grad, Rows<const T> out, T* dots, std::int64_t rows,
                          std::int64_t n, std::int64_t dv) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  // The row is the same for the whole warp, so every lane reaches the warp sum.
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * kWarps) {
    const std::int64_t b = r / n, i = r % n;
    const T* g = grad.matrix(b) + i * grad.row_stride;
    const T* o = out.matrix(b) + i * out.row_stride;
    T acc = T(0);
    for (std::int64_t e = lane; e < dv; e += 32) acc += g[e] * o[e];
    acc = warp_sum(acc);
    if (lane == 0) dots[r] = acc;
  }
}

// Tile (i0, j0) of batch matrix b into shared memory: pd = P f and ds = P (f dP - D) of its
// pairs, 0 for the pairs outside the [n, m] matrix. Ends with a barrier.
template <typename T>
__device__ void backward_tile(const BackwardArgs<T>& a, std::int64_t b, std::int64_t i0,
                              std::int64_t j0, Tile<T>& sa, Tile<T>& sb, Tile<T>& pd, Tile<T>& ds) {
  const Sizes& s = a.s;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const T kept = static_cast<T>(a.dropout.scale);
  const int row = threadIdx.x / kRowThreads, col = threadIdx.x % kRowThreads;
  T sc[kPerThread], dp[kPerThread];
  tile_dots(sc, sa, sb, a.query.matrix(b), a.query.row_stride, i0, s.n, a.key.matrix(b),
            a.key.row_stride, j0, s.m, s.d, row, col);
  tile_dots(dp, sa, sb, a.grad.matrix(b), a.grad.row_stride, i0, s.n, a.value.matrix(b),
            a.value.row_stride, j0, s.m, s.dv, row, col);
  const std::int64_t i = i0 + row;
  const bool row_ok = i < s.n;
  const T lse = row_ok ? a.lse[b * s.n + i] : T(0);
  const T dot = row_ok ? a.dots[b * s.n + i] : T(0);
  const bool* excluded = a.mask.matrix(b);
  for (int u = 0; u < kPerThread; ++u) {
    const std::int64_t j = j0 + col + kRowThreads * u;
    T p_f = T(0), d_s = T(0);
    if (row_ok && j < s.m) {
      const bool allowed = a.mask.allowed(excluded, s.causal, i, j);
      const T p = math::exp((allowed ? a.scale * sc[u] : minus_inf) - lse);
      T f = T(1);
      if (a.dropout.active()) {
        f = a.dropout.keep(static_cast<std::uint64_t>((b * s.n + i) * s.m + j)) ? kept : T(0);
      }
      p_f = p * f;
      d_s = p * (f * dp[u] - dot);
    }
    pd[row][col + kRowThreads * u] = p_f;
    ds[row][col + kRowThreads * u] = d_s;
  }
  __syncthreads();
}

// grad_key: [B, m, d], grad_value: [B, m, dv]; one block per (batch matrix, tile of keys).
// n > 0 and m > 0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_key_grads_kernel(BackwardArgs<T> a, Rows<T> grad_key, Rows<T> grad_value) {
  __shared__ Tile<T> sa, sb, pd, ds;
  const Sizes& s = a.s;
  const int row = threadIdx.x / kRowThreads, col = threadIdx.x % kRowThreads;
  const std::int64_t key_tiles = tiles_of(s.m), query_tiles = tiles_of(s.n);
  // The tile is the same for the whole block, so every thread reaches each barrier.
  for (std::int64_t tile = blockIdx.x; tile < s.batches * key_tiles; tile += gridDim.x) {
    const std::int64_t b = tile / key_tiles, j0 = tile % key_tiles * kTile;
    const std::int64_t j = j0 + row;
    const bool key_ok = j < s.m;
    const T* q = a.query.matrix(b);
    const T* g = a.grad.matrix(b);
    T* gk = grad_key.matrix(b) + j * grad_key.row_stride;
    T* gv = grad_value.matrix(b) + j * grad_value.row_stride;
    bool written = false;
    for (std::int64_t t = 0; t < query_tiles; ++t) {
      const std::int64_t i0 = t * kTile;
      if (s.causal && std::min<std::int64_t>(i0 + kTile, s.n) - 1 < j0) {
        // Every pair of the tile is excluded: P is 0 there unless a row of it is NaN.
        const std::int64_t i = i0 + row;
        const bool nan_row = col == 0 && i < s.n && is_nan(a.lse[b * s.n + i]);
        if (!__syncthreads_or(nan_row)) continue;
      }
      backward_tile(a, b, i0, j0, sa, sb, pd, ds);
      T acc[kPerThread];
      // grad_value[j] += sum_i Pd[i, j] grad[i]
      for (std::int64_t e0 = 0; e0 < s.dv; e0 += kTile) {
        load_tile(sa, g, a.grad.row_stride, i0, s.n, e0, s.dv);
        __syncthreads();
        tile_product<true>(acc, pd, sa, row, col);
        if (key_ok) accumulate_row(gv, acc, e0, s.dv, col, !written);
        __syncthreads();
      }
      // grad_key[j] += sum_i dS[i, j] query[i], scaled at the end
      for (std::int64_t c0 = 0; c0 < s.d; c0 += kTile) {
        load_tile(sa, q, a.query.row_stride, i0, s.n, c0, s.d);
        __syncthreads();
        tile_product<true>(acc, ds, sa, row, col);
        if (key_ok) accumulate_row(gk, acc, c0, s.d, col, !written);
        __syncthreads();
      }
      written = true;
    }
    if (key_ok) {
      // The thread owns the columns c = col (mod kRowThreads) of its key's rows, as above.
      for (std::int64_t e = col; e < s.dv && !written; e += kRowThreads) gv[e] = T(0);
      for (std::int64_t c = col; c < s.d; c += kRowThreads)
        gk[c] = written ? a.scale * gk[c] : T(0);
    }
  }
}

// grad_query: [B, n, d]; one block per (batch matrix, tile of queries). n > 0 and m > 0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_query_grad_kernel(BackwardArgs<T> a, Rows<T> grad_query) {
  __shared__ Tile<T> sa, sb, pd, ds;
  const Sizes& s = a.s;
  const int row = threadIdx.x / kRowThreads, col = threadIdx.x % kRowThreads;
  const std::int64_t query_tiles = tiles_of(s.n);
  // The tile is the same for the whole block, so every thread reaches each barrier.
  for (std::int64_t tile = blockIdx.x; tile < s.batches * query_tiles; tile += gridDim.x) {
    const std::int64_t b = tile / query_tiles, i0 = tile % query_tiles * kTile;
    const std::int64_t i = i0 + row;
    const bool row_ok = i < s.n;
    const T* k = a.key.matrix(b);
    T* gq = grad_query.matrix(b) + i * grad_query.row_stride;
    const std::int64_t last = std::min<std::int64_t>(i0 + kTile, s.n) - 1;
    const std::int64_t key_end = s.causal ? std::min<std::int64_t>(s.m, last + 1) : s.m;
    bool written = false;
    for (std::int64_t j0 = 0; j0 < key_end; j0 += kTile) {
      backward_tile(a, b, i0, j0, sa, sb, pd, ds);
      // grad_query[i] += sum_j dS[i, j] key[j], scaled at the end
      for (std::int64_t c0 = 0; c0 < s.d; c0 += kTile) {
        load_tile(sa, k, a.key.row_stride, j0, s.m, c0, s.d);
        __syncthreads();
        T acc[kPerThread];
        tile_product<false>(acc, ds, sa, row, col);
        if (row_ok) accumulate_row(gq, acc, c0, s.d, col, !written);
        __syncthreads();
      }
      written = true;
    }
    if (row_ok) {
      for (std::int64_t c = col; c < s.d; c += kRowThreads)
        gq[c] = written ? a.scale * gq[c] : T(0);
    }
  }
}

}  // namespace

// query: [..., n, d], key: [..., m, d], value: [..., m, dv], excluded_mask: bool [..., n, m] or
// undefined, out: [..., n, dv], lse: [..., n] contiguous
void CudaBackend::flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                  const Tensor& excluded_mask, bool causal, double scale,
                                  const AttentionDropout& dropout, const Tensor& out,
                                  const Tensor& lse) {
  const char* op = "flash_attention";
  const AttentionShape s =
      check_flash_attention_args(query, key, value, excluded_mask, scale, dropout, out, lse, *this);
  if (s.batches == 0 || s.n == 0) return;  // out and lse are empty
  if (s.m == 0) {                          // no keys: out is a sum of nothing, lse of nothing
    fill(out, 0.0);
    fill(lse, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const Sizes sizes{s.batches, s.n, s.m, s.d, s.dv, causal};
  const MaskRows mask = mask_rows_of(excluded_mask, s.batch, op);
  const std::int64_t tiles = s.batches * tiles_of(s.n);
  dispatch<float, double>(query.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    flash_forward_kernel<T><<<blocks_for(tiles), kThreads, 0, stream()>>>(
        rows_of<const T>(query, s.batch, op), rows_of<const T>(key, s.batch, op),
        rows_of<const T>(value, s.batch, op), mask, rows_of<T>(out, s.batch, op),
        device_data<T>(lse), sizes, static_cast<T>(scale), dropout);
  });
  TF_CUDA_CHECK_LAUNCH(op);
}

// grad, out: [..., n, dv]; query, key, value, excluded_mask, lse as flash_attention's;
// grad_query, grad_key, grad_value: shaped as query, key, value
void CudaBackend::flash_attention_backward(const Tensor& grad, const Tensor& query,
                                           const Tensor& key, const Tensor& value,
                                           const Tensor& out, const Tensor& lse,
                                           const Tensor& excluded_mask, bool causal, double scale,
                                           const AttentionDropout& dropout,
                                           const Tensor& grad_query, const Tensor& grad_key,
                                           const Tensor& grad_value) {
  const char* op = "flash_attention_backward";
  const AttentionShape s =
      check_flash_attention_backward_args(grad, query, key, value, out, lse, excluded_mask, scale,
                                          dropout, grad_query, grad_key, grad_value, *this);
  if (s.batches == 0) return;  // every tensor is empty
  if (s.n == 0 || s.m == 0) {  // each gradient is empty or a sum of nothing
    fill(grad_query, 0.0);
    fill(grad_key, 0.0);
    fill(grad_value, 0.0);
    return;
  }
  const DType dtype = query.dtype();
  const std::int64_t rows = s.batches * s.n;
  const Tensor dots = empty({rows}, {.dtype = dtype, .device = query.device()});
  const Sizes sizes{s.batches, s.n, s.m, s.d, s.dv, causal};
  const std::int64_t query_tiles = s.batches * tiles_of(s.n);
  const std::int64_t key_tiles = s.batches * tiles_of(s.m);
  dispatch<float, double>(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const BackwardArgs<T> args{rows_of<const T>(grad, s.batch, op),
                               rows_of<const T>(query, s.batch, op),
                               rows_of<const T>(key, s.batch, op),
                               rows_of<const T>(value, s.batch, op),
                               mask_rows_of(excluded_mask, s.batch, op),
                               device_data<const T>(lse),
                               device_data<const T>(dots),
                               sizes,
                               static_cast<T>(scale),
                               dropout};
    flash_row_dots_kernel<T><<<grid_for(rows, kThreads / 32), kThreads, 0, stream()>>>(
        args.grad, rows_of<const T>(out, s.batch, op), device_data<T>(dots), rows, s.n, s.dv);
    TF_CUDA_CHECK_LAUNCH(op);
    flash_key_grads_kernel<T><<<blocks_for(key_tiles), kThreads, 0, stream()>>>(
        args, rows_of<T>(grad_key, s.batch, op), rows_of<T>(grad_value, s.batch, op));
    TF_CUDA_CHECK_LAUNCH(op);
    flash_query_grad_kernel<T><<<blocks_for(query_tiles), kThreads, 0, stream()>>>(
        args, rows_of<T>(grad_query, s.batch, op));
    TF_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace tinyformer::cuda
