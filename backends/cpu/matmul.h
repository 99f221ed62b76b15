// The CPU backend's matrix products: the GEMM operand rule (core/gemm.h, shared with the CUDA
// backend) and whether oneDNN has native bfloat16 kernels on this CPU.
#pragma once

#include <cstdint>

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

// The largest M*N*K that a float32 product with a batch of one sends to cblas_sgemm (its lower
// fixed cost at that size), and up to which MatmulPrecision::bf16 keeps a product exact; the
// fused linear follows the same rule, so a Linear layer rounds where matmul would.
inline constexpr std::int64_t kSmallGemm = 64 * 64 * 64;

// v as a BLAS int; Error naming `op` and `what` when it does not fit.
int blas_int(std::int64_t v, const char* op, const char* what);

}  // namespace tinyformer::cpu
