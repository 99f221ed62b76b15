// The AVX-512 kernels of avx512.h. Every function that uses AVX-512 carries the target attribute
// itself and lives in this file's anonymous namespace or is one of the entry points: nothing
// generic (no inline function or template of another header) is compiled here for AVX-512, so
// the linker can never pick such a copy for code that runs on other CPUs.
#include "backends/cpu/avx512.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_ps() (the unused lanes of an unmasked
// conversion or reduction) as (maybe) uninitialized where they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "backends/cpu/dnnl_context.h"
#include "core/math.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define TF_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))

namespace tinyformer::cpu::avx512 {

namespace {

constexpr std::int64_t kPanel = 64;    // columns of C per packed panel: four vectors of 16
constexpr std::int64_t kTileRows = 6;  // rows of C per register tile: 6 x 4 = 24 accumulators

// Lanes [0, count) of a vector of 16, count clamped to [0, 16].
TF_AVX512 inline __mmask16 lanes(std::int64_t count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << count) - 1u);
}

// The masks of a panel's four vectors of 16 columns, `cols` columns of the matrix left from the
// panel's first: lanes past the matrix's end are off.
struct PanelMasks {
  __mmask16 v[4];
};
TF_AVX512 inline PanelMasks panel_masks(std::int64_t cols) {
  return {{lanes(cols), lanes(cols - 16), lanes(cols - 32), lanes(cols - 48)}};
}

// C [m, n] (row stride ldc) = 0: a product's empty sum (k = 0).
void zero_matrix(std::int64_t m, std::int64_t n, float* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = 0.0f;
  }
}

// math::exp_poly_nonpositive on 16 lanes, the same operations in the same order: the bits of the
// scalar function for every x <= 0 and NaN where the compiler contracts its products and sums
// into the same fused multiply-adds (GCC from -O2 on), within one ulp where it does not
// (tests/backends/test_cpu_avx512.cpp checks all of them). A NaN lane converts to the integer
// 0x80000000, which the shift by 23 turns into 0, so p, NaN too, gets nothing added to its
// exponent.
TF_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 min = _mm512_set1_ps(math::kExpMin);
  const __m512 xc = _mm512_max_ps(min, x);  // NaN stays NaN: max returns its second operand
  const __m512 round = _mm512_set1_ps(12582912.0f);
  const __m512 n =
      _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), round), round);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(r, _mm512_mul_ps(p, r), r), _mm512_set1_ps(1.0f));
  const __m512i exponent = _mm512_slli_epi32(_mm512_cvttps_epi32(n), 23);
  const __m512 y = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), exponent));
  // Below kExpMin the result is 0; NaN compares unordered, "not less than", and is kept.
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, min, _CMP_NLT_UQ), y);
}

TF_AVX512 float row_max(const float* x, std::int64_t n) {
  const __m512 minus_inf = _mm512_set1_ps(-__builtin_inff());
  __m512 m0 = minus_inf, m1 = minus_inf;
  std::int64_t i = 0;
  // max(v, m): a NaN v leaves m, as row_max in softmax_row.h leaves NaNs out.
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = lanes(n - i);
    m0 = _mm512_max_ps(_mm512_mask_loadu_ps(minus_inf, mask, x + i), m0);
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

// y = exp(x - m), returns the sum of y.
TF_AVX512 float exp_sum(const float* x, float* y, std::int64_t n, float max) {
  const __m512 m = _mm512_set1_ps(max);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
    const __m512 b = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), m));
    _mm512_storeu_ps(y + i, a);
    _mm512_storeu_ps(y + i + 16, b);
    s0 = _mm512_add_ps(s0, a);
    s1 = _mm512_add_ps(s1, b);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = lanes(n - i);
    const __m512 a = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), m));
    _mm512_mask_storeu_ps(y + i, mask, a);
    s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(mask, a));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

TF_AVX512 void scale_row(float* y, std::int64_t n, float factor) {
  const __m512 f = _mm512_set1_ps(factor);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), f));
  if (i < n) {
    const __mmask16 mask = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, y + i), f));
  }
}

// M(r) for each row r of a register tile.
#define TF_EACH_ROW(M) \
  M(0);                \
  M(1);                \
  M(2);                \
  M(3);                \
  M(4);                \
  M(5)

// The sum of a register tile, written once for both tiles: for kk < k, the 64 columns of
// panel row kk times a0[kk] .. a5[kk], into the accumulators c00 .. c53, in order over kk.
#define TF_TILE_SUM(k)                                                       \
  for (std::int64_t kk = 0; kk < (k); ++kk) {                                \
    const float* b = panel + kk * kPanel;                                    \
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16),      \
                 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48); \
    TF_ROW_FMA(0, kk);                                                       \
    TF_ROW_FMA(1, kk);                                                       \
    TF_ROW_FMA(2, kk);                                                       \
    TF_ROW_FMA(3, kk);                                                       \
    TF_ROW_FMA(4, kk);                                                       \
    TF_ROW_FMA(5, kk);                                                       \
  }
#define TF_ROW_FMA(r, kk)                       \
  do {                                          \
    const __m512 ar = _mm512_set1_ps(a##r[kk]); \
    c##r##0 = _mm512_fmadd_ps(ar, b0, c##r##0); \
    c##r##1 = _mm512_fmadd_ps(ar, b1, c##r##1); \
    c##r##2 = _mm512_fmadd_ps(ar, b2, c##r##2); \
    c##r##3 = _mm512_fmadd_ps(ar, b3, c##r##3); \
  } while (false)

// The register tile: out[r, 0:64] = alpha sum_kk A[r, kk] panel[kk, 0:64] for the 6 rows at a[r]
// (pointers, so that a short tile can repeat a row), each sum in order over kk. Not inlined, and
// nothing else to hold, so that GCC keeps its 24 accumulators, 4 panel vectors and a broadcast in
// the 32 registers (inlined into the loops around it, it spilled, at up to a third of the speed).
template <bool kMax>
TF_AVX512 __attribute__((noinline)) void tile_6x64(std::int64_t k, const float* const* a,
                                                   const float* panel, float alpha, float* out,
                                                   std::int64_t ldo, __m512* running_max) {
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
#define TF_ROW_ZERO(r)                                                 \
  __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps(), \
         c##r##2 = _mm512_setzero_ps(), c##r##3 = _mm512_setzero_ps()
  TF_EACH_ROW(TF_ROW_ZERO);
#undef TF_ROW_ZERO
  TF_TILE_SUM(k)
  const __m512 scale = _mm512_set1_ps(alpha);
  // With kMax, running_max[r] = max(o, running_max[r]) lane-wise: a NaN o keeps the running max.
#define TF_ROW_STORE(r)                                                                  \
  do {                                                                                   \
    const __m512 o0 = _mm512_mul_ps(c##r##0, scale), o1 = _mm512_mul_ps(c##r##1, scale), \
                 o2 = _mm512_mul_ps(c##r##2, scale), o3 = _mm512_mul_ps(c##r##3, scale); \
    _mm512_storeu_ps(out + r * ldo, o0);                                                 \
    _mm512_storeu_ps(out + r * ldo + 16, o1);                                            \
    _mm512_storeu_ps(out + r * ldo + 32, o2);                                            \
    _mm512_storeu_ps(out + r * ldo + 48, o3);                                            \
    if constexpr (kMax) {                                                                \
      const __m512 m = running_max[r];                                                   \
      running_max[r] = _mm512_max_ps(_mm512_max_ps(o0, _mm512_max_ps(o1, m)),            \
                                     _mm512_max_ps(o2, _mm512_max_ps(o3, m)));           \
    }                                                                                    \
  } while (false)
  TF_EACH_ROW(TF_ROW_STORE);
#undef TF_ROW_STORE
}

// Register tiles per band of gemm_nt: a band's rows (24) go through each panel of B in turn, so
// that the panel (16 KiB at k = 64) is read from L2 once and stays in L1 for the band's four
// tiles, rather than streamed from L2 once per tile, which is slower from 256 keys to 4096
// (benchmark_attention --n 1024,4096 --profile shows the attention op's time in the layer).
constexpr std::int64_t kBandTiles = 4;

// Rows [i, i + rows) of C, rows <= kBandTiles * kTileRows, panel by panel, and within a panel tile
// by tile: a full tile straight into C, a short one (fewer rows, or the last panel's fewer
// columns) into `spill` and copied from there. With row_max, each row's largest element (NaNs
// left out: max(v, m) with a NaN v keeps m), from the registers of a full tile, from `spill` for
// a short one. Before each tile, a few of prefetch_lines cache lines from `prefetch` on go to
// L2.
TF_AVX512 void band_nt(std::int64_t rows, std::int64_t n, std::int64_t k, float alpha,
                       const float* a, std::int64_t lda, const float* packed_b, float* c,
                       std::int64_t ldc, float* row_max, const char* prefetch,
                       std::int64_t prefetch_lines) {
  const std::int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  const std::int64_t panels = (n + kPanel - 1) / kPanel;
  const std::int64_t steps = panels * tiles;
  const std::int64_t per_step = steps > 0 ? (prefetch_lines + steps - 1) / steps : 0;
  std::int64_t prefetched = 0;
  // Each tile's row pointers (a short tile repeats its last row) and running maxima.
  const float* a_rows[kBandTiles][kTileRows];
  __m512 running_max[kBandTiles][kTileRows];
  std::int64_t tile_rows[kBandTiles];
  for (std::int64_t t = 0; t < tiles; ++t) {
    tile_rows[t] = rows - t * kTileRows < kTileRows ? rows - t * kTileRows : kTileRows;
    for (std::int64_t r = 0; r < kTileRows; ++r) {
      a_rows[t][r] = a + (t * kTileRows + (r < tile_rows[t] ? r : tile_rows[t] - 1)) * lda;
      running_max[t][r] = _mm512_set1_ps(-__builtin_inff());
    }
  }
  alignas(64) float spill[kTileRows * kPanel];
  for (std::int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const std::int64_t cols = n - j0 < kPanel ? n - j0 : kPanel;
    const float* panel = packed_b + j0 * k;
    for (std::int64_t t = 0; t < tiles; ++t) {
      for (std::int64_t line = 0; line < per_step && prefetched < prefetch_lines; ++line) {
        _mm_prefetch(prefetch + 64 * prefetched++, _MM_HINT_T1);
      }
      float* ct = c + t * kTileRows * ldc;
      if (tile_rows[t] == kTileRows && cols == kPanel) {
        if (row_max != nullptr) {
          tile_6x64<true>(k, a_rows[t], panel, alpha, ct + j0, ldc, running_max[t]);
        } else {
          tile_6x64<false>(k, a_rows[t], panel, alpha, ct + j0, ldc, nullptr);
        }
        continue;
      }
      tile_6x64<false>(k, a_rows[t], panel, alpha, spill, kPanel, nullptr);
      for (std::int64_t r = 0; r < tile_rows[t]; ++r) {
        const float* o = spill + r * kPanel;
        __m512 m = running_max[t][r];
        for (std::int64_t v = 0; v < cols; v += 16) {
          const __mmask16 mask = lanes(cols - v);
          const __m512 x = _mm512_maskz_loadu_ps(mask, o + v);
          _mm512_mask_storeu_ps(ct + r * ldc + j0 + v, mask, x);
          m = _mm512_mask_max_ps(m, mask, x, m);
        }
        running_max[t][r] = m;
      }
    }
  }
  if (row_max != nullptr) {
    for (std::int64_t t = 0; t < tiles; ++t) {
      for (std::int64_t r = 0; r < tile_rows[t]; ++r) {
        row_max[t * kTileRows + r] = _mm512_reduce_max_ps(running_max[t][r]);
      }
    }
  }
}

// The register tile of gemm_nn: out[r][cols] (+)= sum over kk < k of a[r][offset + kk] times
// panel[kk][0:64], for the 6 rows at a[r] and out[r] (pointers, so that a short tile repeats a
// row: the repeated row computes and stores the same values). The columns past the matrix's end
// are masked off (mask.v[i] for the i-th vector of 16). Starts from zero, or from out with
// kAccumulate: one fused multiply-add chain per element across the calls over consecutive kk.
template <bool kAccumulate>
TF_AVX512 __attribute__((noinline)) void tile_nn_6x64(std::int64_t k, const float* const* a,
                                                      std::int64_t offset, const float* panel,
                                                      float* const* out, const PanelMasks& mask) {
  const float *a0 = a[0] + offset, *a1 = a[1] + offset, *a2 = a[2] + offset, *a3 = a[3] + offset,
              *a4 = a[4] + offset, *a5 = a[5] + offset;
  const __mmask16 m0 = mask.v[0], m1 = mask.v[1], m2 = mask.v[2], m3 = mask.v[3];
#define TF_ROW_INIT(r)                                                                         \
  __m512 c##r##0 = kAccumulate ? _mm512_maskz_loadu_ps(m0, out[r]) : _mm512_setzero_ps(),      \
         c##r##1 = kAccumulate ? _mm512_maskz_loadu_ps(m1, out[r] + 16) : _mm512_setzero_ps(), \
         c##r##2 = kAccumulate ? _mm512_maskz_loadu_ps(m2, out[r] + 32) : _mm512_setzero_ps(), \
         c##r##3 = kAccumulate ? _mm512_maskz_loadu_ps(m3, out[r] + 48) : _mm512_setzero_ps()
  TF_EACH_ROW(TF_ROW_INIT);
#undef TF_ROW_INIT
  TF_TILE_SUM(k)
#define TF_ROW_STORE(r)                              \
  do {                                               \
    _mm512_mask_storeu_ps(out[r], m0, c##r##0);      \
    _mm512_mask_storeu_ps(out[r] + 16, m1, c##r##1); \
    _mm512_mask_storeu_ps(out[r] + 32, m2, c##r##2); \
    _mm512_mask_storeu_ps(out[r] + 48, m3, c##r##3); \
  } while (false)
  TF_EACH_ROW(TF_ROW_STORE);
#undef TF_ROW_STORE
}

// Rows of B per packed chunk of gemm_tn: a chunk of one panel (32 KiB) stays in L1 while every
// register tile of C's rows reads it, and the matching rows of A (kTnChunk x m) stay in L2 for
// the next panels.
constexpr std::int64_t kTnChunk = 128;

// Elements of A up to which gemm_tn runs panel by panel, A staying in L2 whole (128 KiB:
// attention's 256 rows of a head up to 128 wide).
constexpr std::int64_t kTnSmallA = 32768;

// The start of a gemm_tn register tile (float32 or bfloat16 operands, rows <= 6 of out at row
// stride ldo, column masks `mask`): the offsets o1 .. o5 of its rows (a short tile repeats its
// last row), their outputs, the masks, and the 24 accumulators at zero.
#define TF_TN_TILE_BEGIN                                                                           \
  const std::int64_t last = rows - 1;                                                              \
  const std::int64_t o1 = 1 < last ? 1 : last, o2 = 2 < last ? 2 : last, o3 = 3 < last ? 3 : last, \
                     o4 = 4 < last ? 4 : last, o5 = 5 < last ? 5 : last;                           \
  float* const out_rows[kTileRows] = {                                                             \
      out, out + o1 * ldo, out + o2 * ldo, out + o3 * ldo, out + o4 * ldo, out + o5 * ldo};        \
  const __mmask16 m0 = mask.v[0], m1 = mask.v[1], m2 = mask.v[2], m3 = mask.v[3];                  \
  TF_EACH_ROW(TF_TN_ROW_ZERO)
#define TF_TN_ROW_ZERO(r)                                              \
  __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps(), \
         c##r##2 = _mm512_setzero_ps(), c##r##3 = _mm512_setzero_ps()

// The end of a gemm_tn register tile: with kAccumulate, out's values added to the sums (every
// row's before any is stored: a short tile's repeated rows share out), then the stores.
#define TF_TN_TILE_END            \
  do {                            \
    if constexpr (kAccumulate) {  \
      TF_EACH_ROW(TF_TN_ROW_ADD); \
    }                             \
    TF_EACH_ROW(TF_TN_ROW_STORE); \
  } while (false)
#define TF_TN_ROW_ADD(r)                                                           \
  do {                                                                             \
    c##r##0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, out_rows[r]), c##r##0);      \
    c##r##1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, out_rows[r] + 16), c##r##1); \
    c##r##2 = _mm512_add_ps(_mm512_maskz_loadu_ps(m2, out_rows[r] + 32), c##r##2); \
    c##r##3 = _mm512_add_ps(_mm512_maskz_loadu_ps(m3, out_rows[r] + 48), c##r##3); \
  } while (false)
#define TF_TN_ROW_STORE(r)                                \
  do {                                                    \
    _mm512_mask_storeu_ps(out_rows[r], m0, c##r##0);      \
    _mm512_mask_storeu_ps(out_rows[r] + 16, m1, c##r##1); \
    _mm512_mask_storeu_ps(out_rows[r] + 32, m2, c##r##2); \
    _mm512_mask_storeu_ps(out_rows[r] + 48, m3, c##r##3); \
  } while (false)

// The register tile of gemm_tn: out[r][cols] (+)= sum over kk < k of a[kk * lda + r] times
// panel[kk * ldp + 0:64] for r < rows (at most 6): row r of the tile is column r of A's storage,
// so the six factors of step kk are neighbours in A's row kk. A short tile repeats its last row
// (which computes and stores the same values). Columns past the matrix's end are masked off, as
// in tile_nn_6x64. The sum is one fused multiply-add chain from zero; kAccumulate adds it to out.
// Step kk prefetches the line at prefetch + kk * prefetch_stride (bytes) into L2. With kPack
// (a full panel), step kk also stores the panel's row into pack[kk * 64 + 0:64] for the tiles
// after it.
template <bool kAccumulate, bool kPack = false>
TF_AVX512 __attribute__((noinline)) void tile_tn_6x64(std::int64_t k, const float* a,
                                                      std::int64_t lda, std::int64_t rows,
                                                      const float* panel, std::int64_t ldp,
                                                      float* out, std::int64_t ldo,
                                                      const PanelMasks& mask, const char* prefetch,
                                                      std::int64_t prefetch_stride, float* pack) {
  TF_TN_TILE_BEGIN;
  const float* ak = a;
  for (std::int64_t kk = 0; kk < k; ++kk, ak += lda, prefetch += prefetch_stride) {
    const float* b = panel + kk * ldp;
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16),
                 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
    if constexpr (kPack) {
      float* p = pack + kk * kPanel;
      _mm512_storeu_ps(p, b0);
      _mm512_storeu_ps(p + 16, b1);
      _mm512_storeu_ps(p + 32, b2);
      _mm512_storeu_ps(p + 48, b3);
    }
    _mm_prefetch(prefetch, _MM_HINT_T1);
    const float* a0 = ak;
    const float* a1 = ak + o1;
    const float* a2 = ak + o2;
    const float* a3 = ak + o3;
    const float* a4 = ak + o4;
    const float* a5 = ak + o5;
    TF_ROW_FMA(0, 0);
    TF_ROW_FMA(1, 0);
    TF_ROW_FMA(2, 0);
    TF_ROW_FMA(3, 0);
    TF_ROW_FMA(4, 0);
    TF_ROW_FMA(5, 0);
  }
  TF_TN_TILE_END;
}

#define TF_AVX512_BF16 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,fma")))

// Index vector interleaving two vectors of 16 16-bit lanes (the low halves of x and y): lane 2j
// of permutex2var(x, idx, y) is x[j], lane 2j + 1 is y[j].
TF_AVX512_BF16 inline __m512i pair_index() {
  return _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38,
                          6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
}

// rows [2p, 2p + 1] of a bfloat16 matrix (row stride ld) at columns [c, c + count), count <= 16,
// as count pairs (row 2p's element, row 2p + 1's) of 32 bits at out; `second` false: the second
// row is past the end and reads as zeros.
TF_AVX512_BF16 inline void pack_pairs16(const std::uint16_t* first, const std::uint16_t* second_row,
                                        bool second, std::int64_t count, std::uint32_t* out) {
  const __mmask16 mask = lanes(count);
  const __m512i x = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(mask, first));
  const __m512i y = second ? _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(mask, second_row))
                           : _mm512_setzero_si512();
  _mm512_mask_storeu_epi32(out, mask, _mm512_permutex2var_epi16(x, pair_index(), y));
}

// The register tile of gemm_tn_bf16: out[r][cols] (+)= sum over pairs pp < pairs of the pair
// products of a[pp * lda + r] (two bfloat16 of A's rows 2pp and 2pp + 1, packed) and panel[pp]
// (64 such pairs of B), r < rows (at most 6), as tile_tn_6x64 does in float32.
template <bool kAccumulate>
TF_AVX512_BF16 __attribute__((noinline)) void tile_tn_bf16_6x64(
    std::int64_t pairs, const std::uint32_t* a, std::int64_t lda, std::int64_t rows,
    const std::uint32_t* panel, float* out, std::int64_t ldo, const PanelMasks& mask) {
  TF_TN_TILE_BEGIN;
  const std::uint32_t* ak = a;
  for (std::int64_t pp = 0; pp < pairs; ++pp, ak += lda) {
    const std::uint32_t* b = panel + pp * kPanel;
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16),
                   b2 = (__m512bh)_mm512_loadu_si512(b + 32),
                   b3 = (__m512bh)_mm512_loadu_si512(b + 48);
    const std::int64_t offsets[kTileRows] = {0, o1, o2, o3, o4, o5};
#define TF_ROW_DP(r)                                                                   \
  do {                                                                                 \
    const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(ak[offsets[r]])); \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, ar, b0);                                       \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, ar, b1);                                       \
    c##r##2 = _mm512_dpbf16_ps(c##r##2, ar, b2);                                       \
    c##r##3 = _mm512_dpbf16_ps(c##r##3, ar, b3);                                       \
  } while (false)
    TF_EACH_ROW(TF_ROW_DP);
#undef TF_ROW_DP
  }
  TF_TN_TILE_END;
}

#undef TF_TN_TILE_BEGIN
#undef TF_TN_ROW_ZERO
#undef TF_TN_TILE_END
#undef TF_TN_ROW_ADD
#undef TF_TN_ROW_STORE
#undef TF_TILE_SUM
#undef TF_EACH_ROW
#undef TF_ROW_FMA

// Sums of gemm_nn per pass over the rows: a chunk of kNnChunk rows of a packed panel (32 KiB)
// stays in L1 while every register tile of the rows reads it.
constexpr std::int64_t kNnChunk = 128;

}  // namespace

TF_AVX512 float exp_shifted_sum(const float* x, float* y, std::int64_t n, float shift) {
  return exp_sum(x, y, n, shift);
}

bool available() {
  static const bool yes = dnnl_runs_avx512() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
}

TF_AVX512 void exp_nonpositive(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, mask, exp16(_mm512_maskz_loadu_ps(mask, x + i)));
  }
}

TF_AVX512 float softmax_row(const float* x, float* y, std::int64_t n, const float* max_known) {
  const float max = max_known != nullptr ? *max_known : row_max(x, n);
  const float sum = exp_sum(x, y, n, max);
  scale_row(y, n, 1.0f / sum);
  return max;
}

namespace {

// bfloat16::round on 16 lanes: to nearest even, a NaN kept quiet (its top bits with the quiet
// bit set), packed to 16 bits.
TF_AVX512 inline __m256i round_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i nearest_even =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(nearest_even, nan, quiet_nan));
}

// 16 bfloat16 values (bits; lanes outside `mask` read as 0) widened to float32, exactly.
TF_AVX512 inline __m512 load_bf16(const std::uint16_t* bits, __mmask16 mask = 0xFFFF) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, bits)), 16));
}

// The lanes of a float32 row, and of a bfloat16 row widened, for row_dot.
struct Float32Lanes {
  const float* row;
  TF_AVX512 __m512 operator()(std::int64_t i, __mmask16 mask = 0xFFFF) const {
    return _mm512_maskz_loadu_ps(mask, row + i);
  }
};
struct Bfloat16Lanes {
  const std::uint16_t* row;
  TF_AVX512 __m512 operator()(std::int64_t i, __mmask16 mask = 0xFFFF) const {
    return load_bf16(row + i, mask);
  }
};

// The sum of p g over a row of n, on every lane: in four chains, so that the adds' latency does
// not bound the pass.
template <typename Lanes>
TF_AVX512 __m512 row_dot(Lanes p, const float* g, std::int64_t n) {
  __m512 d0 = _mm512_setzero_ps(), d1 = _mm512_setzero_ps(), d2 = _mm512_setzero_ps(),
         d3 = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    d0 = _mm512_fmadd_ps(p(i), _mm512_loadu_ps(g + i), d0);
    d1 = _mm512_fmadd_ps(p(i + 16), _mm512_loadu_ps(g + i + 16), d1);
    d2 = _mm512_fmadd_ps(p(i + 32), _mm512_loadu_ps(g + i + 32), d2);
    d3 = _mm512_fmadd_ps(p(i + 48), _mm512_loadu_ps(g + i + 48), d3);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = lanes(n - i);
    d0 = _mm512_fmadd_ps(p(i, mask), _mm512_maskz_loadu_ps(mask, g + i), d0);
  }
  return _mm512_set1_ps(
      _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(d0, d1), _mm512_add_ps(d2, d3))));
}

// y (g - dot) for softmax_grad_row_bf16, lanes [i, i + 16) of those in `mask`.
TF_AVX512 inline __m512 bf16_grad(const std::uint16_t* y, const float* g, __m512 dot,
                                  std::int64_t i, __mmask16 mask) {
  return _mm512_mul_ps(load_bf16(y + i, mask),
                       _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, g + i), dot));
}

}  // namespace

TF_AVX512 float softmax_row_bf16(const float* x, float* e, std::uint16_t* y, std::int64_t n) {
  const float max = row_max(x, n);
  const __m512 factor = _mm512_set1_ps(1.0f / exp_sum(x, e, n, max));
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i r = round_bf16(_mm512_mul_ps(_mm512_loadu_ps(e + i), factor));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), r);
  }
  if (i < n) {
    const __mmask16 mask = lanes(n - i);
    const __m256i r = round_bf16(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, e + i), factor));
    _mm256_mask_storeu_epi16(y + i, mask, r);
  }
  return max;
}

TF_AVX512 void softmax_grad_row_bf16(const std::uint16_t* y, const float* g, std::uint16_t* out,
                                     std::int64_t n) {
  const __m512 dot = row_dot(Bfloat16Lanes{y}, g, n);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i r = round_bf16(bf16_grad(y, g, dot, i, 0xFFFF));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), r);
  }
  if (i < n) {
    const __mmask16 mask = lanes(n - i);
    _mm256_mask_storeu_epi16(out + i, mask, round_bf16(bf16_grad(y, g, dot, i, mask)));
  }
}

TF_AVX512 void softmax_grad_row_bf16(const std::uint16_t* y, const float* g, float* out,
                                     std::int64_t n) {
  const __m512 dot = row_dot(Bfloat16Lanes{y}, g, n);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = lanes(n - i);
    _mm512_mask_storeu_ps(out + i, mask, bf16_grad(y, g, dot, i, mask));
  }
}

TF_AVX512 void softmax_grad_row(const float* p, const float* g, float* y, std::int64_t n,
                                float scale) {
  const __m512 dot = row_dot(Float32Lanes{p}, g, n);
  const __m512 factor = _mm512_set1_ps(scale);
  // scale * (p * (g - dot)): the portable loop's operations, in its order.
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v =
        _mm512_mul_ps(_mm512_loadu_ps(p + i), _mm512_sub_ps(_mm512_loadu_ps(g + i), dot));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(factor, v));
  }
  if (i < n) {
    const __mmask16 mask = lanes(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, p + i),
                                   _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, g + i), dot));
    _mm512_mask_storeu_ps(y + i, mask, _mm512_mul_ps(factor, v));
  }
}

namespace {

// The sum of four accumulators' lanes.
TF_AVX512 inline float sum_of(__m512 a, __m512 b, __m512 c, __m512 d) {
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

// Loads lanes [i, i + 16) of a row of n, zeros past its end.
TF_AVX512 inline __m512 load_row(const float* x, std::int64_t i, std::int64_t n) {
  return i + 16 <= n ? _mm512_loadu_ps(x + i) : _mm512_maskz_loadu_ps(lanes(n - i), x + i);
}

TF_AVX512 inline void store_row(float* y, std::int64_t i, std::int64_t n, __m512 v) {
  if (i + 16 <= n) {
    _mm512_storeu_ps(y + i, v);
  } else {
    _mm512_mask_storeu_ps(y + i, lanes(n - i), v);
  }
}

}  // namespace

TF_AVX512 void layer_norm_row(const float* x, const float* residual, float* h, const float* w,
                              const float* b, float eps, float* y, float* mean, float* rstd,
                              std::int64_t n) {
  // The row's sum (after h = x + residual), then its squared deviations, each in four chains of
  // 16 lanes (vector i goes to chain i % 4); the zeros past the row's end add nothing.
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (std::int64_t i = 0, chain = 0; i < n; i += 16, chain = (chain + 1) & 3) {
    __m512 v = load_row(x, i, n);
    if (residual != nullptr) {
      v = _mm512_add_ps(v, load_row(residual, i, n));
      store_row(h, i, n, v);
    }
    s[chain] = _mm512_add_ps(s[chain], v);
  }
  const float* src = residual != nullptr ? h : x;
  const float m = sum_of(s[0], s[1], s[2], s[3]) / static_cast<float>(n);
  const __m512 mv = _mm512_set1_ps(m);
  __m512 q[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (std::int64_t i = 0, chain = 0; i < n; i += 16, chain = (chain + 1) & 3) {
    const __mmask16 mask = i + 16 <= n ? __mmask16(0xFFFF) : lanes(n - i);
    const __m512 d = _mm512_maskz_sub_ps(mask, load_row(src, i, n), mv);
    q[chain] = _mm512_fmadd_ps(d, d, q[chain]);
  }
  const float r = math::layer_norm_rstd(sum_of(q[0], q[1], q[2], q[3]), static_cast<float>(n), eps);
  *mean = m;
  *rstd = r;
  const __m512 rv = _mm512_set1_ps(r);
  for (std::int64_t i = 0; i < n; i += 16) {
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(load_row(src, i, n), mv), rv);
    if (w != nullptr) v = _mm512_mul_ps(v, load_row(w, i, n));
    if (b != nullptr) v = _mm512_add_ps(v, load_row(b, i, n));
    store_row(y, i, n, v);
  }
}

TF_AVX512 void layer_norm_backward_row(const float* g, const float* x, const float* w, float mean,
                                       float rstd, float* dx, float* dw, float* db,
                                       std::int64_t n) {
  const __m512 mv = _mm512_set1_ps(mean), rv = _mm512_set1_ps(rstd);
  // sum(gy) and sum(gy xhat) in four chains each, with the column sums on the way.
  __m512 sg[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                  _mm512_setzero_ps()};
  __m512 sx[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                  _mm512_setzero_ps()};
  for (std::int64_t i = 0, chain = 0; i < n; i += 16, chain = (chain + 1) & 3) {
    const __mmask16 mask = i + 16 <= n ? __mmask16(0xFFFF) : lanes(n - i);
    const __m512 gv = load_row(g, i, n);
    const __m512 xhat = _mm512_mul_ps(_mm512_maskz_sub_ps(mask, load_row(x, i, n), mv), rv);
    if (dw != nullptr) store_row(dw, i, n, _mm512_fmadd_ps(gv, xhat, load_row(dw, i, n)));
    if (db != nullptr) store_row(db, i, n, _mm512_add_ps(load_row(db, i, n), gv));
    if (dx == nullptr) continue;
    const __m512 gy = w != nullptr ? _mm512_mul_ps(gv, load_row(w, i, n)) : gv;
    sg[chain] = _mm512_add_ps(sg[chain], gy);
    sx[chain] = _mm512_fmadd_ps(gy, xhat, sx[chain]);
  }
  if (dx == nullptr) return;
  const float count = static_cast<float>(n);
  const __m512 a = _mm512_set1_ps(sum_of(sg[0], sg[1], sg[2], sg[3]) / count);
  const __m512 bq = _mm512_set1_ps(sum_of(sx[0], sx[1], sx[2], sx[3]) / count);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __m512 gv = load_row(g, i, n);
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load_row(x, i, n), mv), rv);
    const __m512 gy = w != nullptr ? _mm512_mul_ps(gv, load_row(w, i, n)) : gv;
    // rstd (gy - mean(gy) - xhat mean(gy xhat)), as math::layer_norm_dx.
    store_row(dx, i, n,
              _mm512_mul_ps(rv, _mm512_sub_ps(_mm512_sub_ps(gy, a), _mm512_mul_ps(xhat, bq))));
  }
}

std::int64_t packed_nt_size(std::int64_t n, std::int64_t k) {
  return (n + kPanel - 1) / kPanel * kPanel * k;
}

TF_AVX512 void pack_nt(const float* b, std::int64_t ldb, std::int64_t n, std::int64_t k,
                       float* packed) {
  // 16 rows of B at a time: column kk of them is one gather (element offsets of 32 bits, where
  // 15 rows fit), else one element at a time.
  const bool gather = ldb <= (std::int64_t{1} << 26);
  const __m512i rows16 =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(gather ? static_cast<int>(ldb) : 0));
  for (std::int64_t j0 = 0; j0 < n; j0 += kPanel) {
    float* panel = packed + j0 * k;
    for (std::int64_t v = 0; v < kPanel; v += 16) {
      const std::int64_t rows = n - j0 - v;  // of B left from row j0 + v
      if (gather && rows >= 16) {
        const float* base = b + (j0 + v) * ldb;
        for (std::int64_t kk = 0; kk < k; ++kk) {
          _mm512_storeu_ps(panel + kk * kPanel + v, _mm512_i32gather_ps(rows16, base + kk, 4));
        }
        continue;
      }
      for (std::int64_t jj = v; jj < v + 16; ++jj) {
        for (std::int64_t kk = 0; kk < k; ++kk) {
          panel[kk * kPanel + jj] = j0 + jj < n ? b[(j0 + jj) * ldb + kk] : 0.0f;
        }
      }
    }
  }
}

TF_AVX512 void gemm_nt(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                       std::int64_t lda, const float* packed_b, float* c, std::int64_t ldc,
                       float* row_max, const void* prefetch, std::int64_t prefetch_bytes) {
  // The prefetched lines, spread evenly over the bands of rows.
  const char* lines = static_cast<const char*>(prefetch);
  const std::int64_t total_lines = lines != nullptr ? (prefetch_bytes + 63) / 64 : 0;
  constexpr std::int64_t kBandRows = kBandTiles * kTileRows;
  const std::int64_t bands = (m + kBandRows - 1) / kBandRows;
  const std::int64_t per_band = bands > 0 ? (total_lines + bands - 1) / bands : 0;
  std::int64_t done = 0;
  for (std::int64_t i = 0; i < m; i += kBandRows) {
    const std::int64_t rows = m - i < kBandRows ? m - i : kBandRows;
    const std::int64_t count = total_lines - done < per_band ? total_lines - done : per_band;
    // The band's rows of A into L1 (the next band's too), so that the first panel's broadcasts
    // do not wait for memory.
    for (std::int64_t r = i == 0 ? 0 : kBandRows; r < 2 * kBandRows && i + r < m; ++r) {
      const char* row = reinterpret_cast<const char*>(a + (i + r) * lda);
      for (std::int64_t byte = 0; byte < k * 4; byte += 64) _mm_prefetch(row + byte, _MM_HINT_T0);
    }
    band_nt(rows, n, k, alpha, a + i * lda, lda, packed_b, c + i * ldc, ldc,
            row_max != nullptr ? row_max + i : nullptr,
            lines != nullptr ? lines + 64 * done : nullptr, count);
    done += count;
  }
}

std::int64_t packed_nn_size(std::int64_t k, std::int64_t n) {
  return (n + kPanel - 1) / kPanel * kPanel * k;
}

TF_AVX512 void pack_nn(const float* b, std::int64_t ldb, std::int64_t k, std::int64_t n,
                       float* packed) {
  for (std::int64_t j0 = 0; j0 < n; j0 += kPanel) {
    float* panel = packed + j0 * k;
    const PanelMasks mask = panel_masks(n - j0);
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const float* row = b + kk * ldb + j0;
      for (std::int64_t v = 0; v < 4; ++v) {
        _mm512_storeu_ps(panel + kk * kPanel + 16 * v,
                         _mm512_maskz_loadu_ps(mask.v[v], row + 16 * v));
      }
    }
  }
}

TF_AVX512 void gemm_nn(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                       std::int64_t lda, const float* packed_b, float* c, std::int64_t ldc) {
  if (k == 0) return zero_matrix(m, n, c, ldc);
  for (std::int64_t kk0 = 0; kk0 < k; kk0 += kNnChunk) {
    const std::int64_t chunk = k - kk0 < kNnChunk ? k - kk0 : kNnChunk;
    for (std::int64_t i = 0; i < m; i += kTileRows) {
      const std::int64_t rows = m - i < kTileRows ? m - i : kTileRows;
      const float* a_rows[kTileRows];
      float* out_rows[kTileRows];
      for (std::int64_t j0 = 0; j0 < n; j0 += kPanel) {
        for (std::int64_t r = 0; r < kTileRows; ++r) {
          const std::int64_t row = i + (r < rows ? r : rows - 1);
          a_rows[r] = a + row * lda;
          out_rows[r] = c + row * ldc + j0;
        }
        const PanelMasks mask = panel_masks(n - j0);
        const float* panel = packed_b + j0 * k + kk0 * kPanel;
        if (kk0 == 0) {
          tile_nn_6x64<false>(chunk, a_rows, kk0, panel, out_rows, mask);
        } else {
          tile_nn_6x64<true>(chunk, a_rows, kk0, panel, out_rows, mask);
        }
      }
    }
  }
}

// The sums of the gemm_tn tile at row i (of m; none past m) and panel c (row stride ldc) into L1.
TF_AVX512 inline void prefetch_tn_tile(std::int64_t m, std::int64_t i, const float* c,
                                       std::int64_t ldc) {
  const std::int64_t rows = m - i < kTileRows ? m - i : kTileRows;
  for (std::int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(c + (i + r) * ldc);
    for (int l = 0; l < 4; ++l) _mm_prefetch(row + 64 * l, _MM_HINT_T0);
  }
}

std::int64_t gemm_tn_scratch_size() {
  return kTnChunk * kPanel;
}

// The chunk-outer order of gemm_tn: each chunk of k's rows over every panel, A's chunk (kTnChunk
// x m) staying in L2 across the panels while the tiles prefetch the next chunk's.
TF_AVX512 void gemm_tn_by_chunks(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                                 std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                                 std::int64_t ldc, float* scratch, bool accumulate) {
  const std::int64_t a_stride = static_cast<std::int64_t>(sizeof(float)) * lda;
  for (std::int64_t kk0 = 0; kk0 < k; kk0 += kTnChunk) {
    const std::int64_t chunk = k - kk0 < kTnChunk ? k - kk0 : kTnChunk;
    const bool add = kk0 > 0 || accumulate;
    for (std::int64_t j0 = 0; j0 < n; j0 += kPanel) {
      pack_nn(b + kk0 * ldb + j0, ldb, chunk, n - j0 < kPanel ? n - j0 : kPanel, scratch);
      const PanelMasks mask = panel_masks(n - j0);
      for (std::int64_t i = 0; i < m; i += kTileRows) {
        const std::int64_t rows = m - i < kTileRows ? m - i : kTileRows;
        // The next tile's sums so far into L1 while this tile runs (C outgrows L2 from about
        // 1024 x 256).
        if (add) prefetch_tn_tile(m, i + kTileRows, c + j0, ldc);
        const float* a_tile = a + kk0 * lda + i;
        // The same columns of A one chunk further on.
        const char* prefetch = reinterpret_cast<const char*>(
            reinterpret_cast<std::uintptr_t>(a_tile) + sizeof(float) * kTnChunk * lda);
        if (add) {
          tile_tn_6x64<true>(chunk, a_tile, lda, rows, scratch, kPanel, c + i * ldc + j0, ldc, mask,
                             prefetch, a_stride, nullptr);
        } else {
          tile_tn_6x64<false>(chunk, a_tile, lda, rows, scratch, kPanel, c + i * ldc + j0, ldc,
                              mask, prefetch, a_stride, nullptr);
        }
      }
    }
  }
}

// The panel-outer order of gemm_tn, for an A small enough to stay in L2 whole (attention's
// [rows, head width]): each panel of 64 columns of C over every chunk of k, so that the panel's
// sums stay in L1 between the chunks. A full panel's chunk is packed by the first tile as it
// reads it (a narrower one by pack_nn first); the first four tiles of a chunk prefetch the four
// lines of each row of the next chunk of B (the next panel's first after the last) into L2, and
// with accumulate each tile of the first chunk prefetches the next tile's C into L1.
TF_AVX512 void gemm_tn_by_panels(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                                 std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                                 std::int64_t ldc, float* scratch, bool accumulate) {
  const std::int64_t b_stride = static_cast<std::int64_t>(sizeof(float)) * ldb;
  for (std::int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const PanelMasks mask = panel_masks(n - j0);
    const bool full = n - j0 >= kPanel;
    for (std::int64_t kk0 = 0; kk0 < k; kk0 += kTnChunk) {
      const std::int64_t chunk = k - kk0 < kTnChunk ? k - kk0 : kTnChunk;
      const bool add = kk0 > 0 || accumulate;
      const float* b_chunk = b + kk0 * ldb + j0;
      if (!full) pack_nn(b_chunk, ldb, chunk, n - j0, scratch);
      const float* next = kk0 + chunk < k ? b_chunk + chunk * ldb : b + j0 + kPanel;
      for (std::int64_t i = 0, t = 0; i < m; i += kTileRows, ++t) {
        const std::int64_t rows = m - i < kTileRows ? m - i : kTileRows;
        if (accumulate && kk0 == 0) prefetch_tn_tile(m, i + kTileRows, c + j0, ldc);
        // Tiles past the fourth prefetch the packed panel (in L1 already).
        const char* prefetch = reinterpret_cast<const char*>(t < 4 ? next + 16 * t : scratch);
        const std::int64_t step = t < 4 ? b_stride : 0;
        const float* a_tile = a + kk0 * lda + i;
        float* out = c + i * ldc + j0;
        if (full && t == 0) {
          if (add) {
            tile_tn_6x64<true, true>(chunk, a_tile, lda, rows, b_chunk, ldb, out, ldc, mask,
                                     prefetch, step, scratch);
          } else {
            tile_tn_6x64<false, true>(chunk, a_tile, lda, rows, b_chunk, ldb, out, ldc, mask,
                                      prefetch, step, scratch);
          }
        } else if (add) {
          tile_tn_6x64<true>(chunk, a_tile, lda, rows, scratch, kPanel, out, ldc, mask, prefetch,
                             step, nullptr);
        } else {
          tile_tn_6x64<false>(chunk, a_tile, lda, rows, scratch, kPanel, out, ldc, mask, prefetch,
                              step, nullptr);
        }
      }
    }
  }
}

TF_AVX512 void gemm_tn(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                       std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                       std::int64_t ldc, float* scratch, bool accumulate) {
  if (k == 0) {
    if (!accumulate) zero_matrix(m, n, c, ldc);
    return;
  }
  if (k * m <= kTnSmallA) {
    gemm_tn_by_panels(m, n, k, a, lda, b, ldb, c, ldc, scratch, accumulate);
  } else {
    gemm_tn_by_chunks(m, n, k, a, lda, b, ldb, c, ldc, scratch, accumulate);
  }
}

bool bf16_available() {
  static const bool yes = available() && __builtin_cpu_supports("avx512bf16");
  return yes;
}

std::int64_t gemm_tn_bf16_scratch_size(std::int64_t m) {
  // 32-bit words: a chunk's pairs of A (kTnChunk / 2 rows of m), then one panel of B's.
  return kTnChunk / 2 * (m + kPanel);
}

TF_AVX512_BF16 void gemm_tn_bf16(std::int64_t m, std::int64_t n, std::int64_t k,
                                 const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
                                 std::int64_t ldb, float* c, std::int64_t ldc,
                                 std::uint32_t* scratch) {
  if (k == 0) return zero_matrix(m, n, c, ldc);
  std::uint32_t* a_pairs = scratch;
  std::uint32_t* panel = scratch + kTnChunk / 2 * m;
  for (std::int64_t kk0 = 0; kk0 < k; kk0 += kTnChunk) {
    const std::int64_t chunk = k - kk0 < kTnChunk ? k - kk0 : kTnChunk;
    const std::int64_t pairs = (chunk + 1) / 2;
    for (std::int64_t pp = 0; pp < pairs; ++pp) {
      const std::uint16_t* r0 = a + (kk0 + 2 * pp) * lda;
      const bool second = 2 * pp + 1 < chunk;
      for (std::int64_t i = 0; i < m; i += 16) {
        pack_pairs16(r0 + i, second ? r0 + lda + i : nullptr, second, m - i, a_pairs + pp * m + i);
      }
    }
    for (std::int64_t j0 = 0; j0 < n; j0 += kPanel) {
      const std::int64_t width = n - j0 < kPanel ? n - j0 : kPanel;
      for (std::int64_t pp = 0; pp < pairs; ++pp) {
        const std::uint16_t* r0 = b + (kk0 + 2 * pp) * ldb + j0;
        const bool second = 2 * pp + 1 < chunk;
        for (std::int64_t v = 0; v < kPanel; v += 16) {
          // Columns past n are zero pairs (the tile's masked lanes compute nothing from them).
          if (v < width) {
            pack_pairs16(r0 + v, second ? r0 + ldb + v : nullptr, second, width - v,
                         panel + pp * kPanel + v);
          }
          if (width - v < 16) {
            const std::int64_t from = width - v > 0 ? width - v : 0;
            for (std::int64_t t = from; t < 16; ++t) panel[pp * kPanel + v + t] = 0;
          }
        }
      }
      const PanelMasks mask = panel_masks(n - j0);
      for (std::int64_t i = 0; i < m; i += kTileRows) {
        const std::int64_t rows = m - i < kTileRows ? m - i : kTileRows;
        if (kk0 == 0) {
          tile_tn_bf16_6x64<false>(pairs, a_pairs + i, m, rows, panel, c + i * ldc + j0, ldc, mask);
        } else {
          tile_tn_bf16_6x64<true>(pairs, a_pairs + i, m, rows, panel, c + i * ldc + j0, ldc, mask);
        }
      }
    }
  }
}

}  // namespace tinyformer::cpu::avx512

#else  // not x86-64: available() is false, and nothing calls the kernels

namespace tinyformer::cpu::avx512 {

bool available() {
  return false;
}
float exp_shifted_sum(const float*, float*, std::int64_t, float) {
  return 0.0f;
}
void exp_nonpositive(const float*, float*, std::int64_t) {}
float softmax_row(const float*, float*, std::int64_t, const float*) {
  return 0.0f;
}
float softmax_row_bf16(const float*, float*, std::uint16_t*, std::int64_t) {
  return 0.0f;
}
void softmax_grad_row_bf16(const std::uint16_t*, const float*, std::uint16_t*, std::int64_t) {}
void softmax_grad_row_bf16(const std::uint16_t*, const float*, float*, std::int64_t) {}
void softmax_grad_row(const float*, const float*, float*, std::int64_t, float) {}
void layer_norm_row(const float*, const float*, float*, const float*, const float*, float, float*,
                    float*, float*, std::int64_t) {}
void layer_norm_backward_row(const float*, const float*, const float*, float, float, float*, float*,
                             float*, std::int64_t) {}
std::int64_t packed_nt_size(std::int64_t, std::int64_t) {
  return 0;
}
void pack_nt(const float*, std::int64_t, std::int64_t, std::int64_t, float*) {}
void gemm_nt(std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
             const float*, float*, std::int64_t, float*, const void*, std::int64_t) {}
std::int64_t packed_nn_size(std::int64_t, std::int64_t) {
  return 0;
}
void pack_nn(const float*, std::int64_t, std::int64_t, std::int64_t, float*) {}
void gemm_nn(std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, const float*,
             float*, std::int64_t) {}
std::int64_t gemm_tn_scratch_size() {
  return 0;
}
void gemm_tn(std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, const float*,
             std::int64_t, float*, std::int64_t, float*, bool) {}
bool bf16_available() {
  return false;
}
std::int64_t gemm_tn_bf16_scratch_size(std::int64_t) {
  return 0;
}
void gemm_tn_bf16(std::int64_t, std::int64_t, std::int64_t, const std::uint16_t*, std::int64_t,
                  const std::uint16_t*, std::int64_t, float*, std::int64_t, std::uint32_t*) {}

}  // namespace tinyformer::cpu::avx512

#endif
