// The CPU backend's matrix products: the GEMM operand rule (core/gemm.h, shared with the CUDA
// backend), whether oneDNN has native bfloat16 kernels on this CPU, and the tiled transpose that
// ends a product computed in the other orientation.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cpu/parallel.h"
#include "core/gemm.h"
#include "core/shape.h"

namespace tinyformer::cpu {

using tinyformer::gemm_operand;
using tinyformer::GemmOperand;

// True when oneDNN multiplies bfloat16 matrices on this CPU itself (bfloat16 kernels, float32
// accumulation); false where it has none (oneDNN 2.x before AVX-512), and bfloat16 products
// run on the float32 path between two conversions.
bool bf16_matmul_native();
// True when those kernels run on bfloat16 instructions (AVX-512 BF16, AMX), faster than float32:
// then float32 products round their operands to bfloat16 under MatmulPrecision::bf16.
bool bf16_matmul_fast();
// True when they run on AMX tiles (oneDNN's avx512_core_amx), several times faster again than on
// AVX-512 BF16: there every bfloat16 product goes to oneDNN's blocked (brgemm) kernel, the only
// one of its kernels that uses the tiles (docs/matmul.md).
bool bf16_matmul_amx();

// The largest M*N*K that a float32 product with a batch of one sends to cblas_sgemm (its lower
// fixed cost at that size), and up to which MatmulPrecision::bf16 keeps a product exact; the
// fused linear follows the same rule, so a Linear layer rounds where matmul would.
inline constexpr std::int64_t kSmallGemm = 64 * 64 * 64;

// v as a BLAS int; Error naming `op` and `what` when it does not fit.
int blas_int(std::int64_t v, const char* op, const char* what);

// out [cols, rows] (row stride ldo) = in^T, in: [rows, cols] contiguous; in tiles, so that both
// sides are read and written a cache line at a time; the column tiles go to the team where the
// pass is worth it (never inside a parallel region). A product computed in the other
// orientation ends here: matmul's swapped weight gradients, attention's transposed key and value
// gradients.
template <typename T>
void transpose_into(const T* in, std::int64_t rows, std::int64_t cols, T* out, std::int64_t ldo) {
  constexpr std::int64_t kTile = 16;
  const std::int64_t tiles = (cols + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (std::int64_t t = 0; t < tiles; ++t) {
    const std::int64_t j0 = t * kTile, j1 = std::min(cols, j0 + kTile);
    for (std::int64_t i0 = 0; i0 < rows; i0 += kTile) {
      const std::int64_t i1 = std::min(rows, i0 + kTile);
      for (std::int64_t j = j0; j < j1; ++j) {
        for (std::int64_t i = i0; i < i1; ++i) out[j * ldo + i] = in[i * cols + j];
      }
    }
  }
}

}  // namespace tinyformer::cpu
