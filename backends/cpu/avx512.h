// Kernels of the CPU backend written for AVX-512 (float32), chosen at run time: available() says
// whether this CPU and OS run them, and every caller keeps a portable path for the rest. They are
// compiled for AVX-512 whatever the build's target, so a build for a baseline x86-64 still has
// them (docs/attention.md, "The fused kernels").
//
// - softmax rows: the exponential of core/math.h's exp_nonpositive, 16 lanes at a time, the same
//   bits (tested over every float <= 0); the sums in another order than the portable loop's;
// - the head-width product of attention: C = alpha A B^T with A [m, k], B [n, k] and k small (the
//   head width): scores = scale q k^T and the backward's dP = grad v^T. B is packed once per
//   matrix into panels of 64 columns, and a register tile of 6 rows by 64 columns runs the sum
//   over k; the row maxima of C can come with it, saving softmax's first pass;
// - the product over the keys: C = A B with B [k, n] and n small (the head width): out = P v
//   and the backward's grad_query = dS k for a group of rows still in L2. B is packed once per
//   matrix into panels of 64 columns, and the same register tile shape runs the sum over k in
//   chunks that stay in L1;
// - the product with a transposed first operand: C (+)= A^T B, the weight gradients and
//   attention's key and value gradients, in chunks of 128 rows of k;
// - layer normalisation a row at a time, forward (after a residual add) and backward, with the
//   row sums in several chains.
#pragma once

#include <cstdint>

namespace tinyformer::cpu::avx512 {

// True where this CPU and OS run AVX-512 (F, DQ, BW, VL) and oneDNN's effective ISA is
// avx512_core or better: DNNL_MAX_CPU_ISA=AVX2 (or lower) turns these kernels off with oneDNN's,
// which is how the tests run the portable paths on an AVX-512 machine.
bool available();

// y[i] = exp_nonpositive(x[i]) for i < n: x <= 0 or NaN (the bits of math::exp_nonpositive).
void exp_nonpositive(const float* x, float* y, std::int64_t n);

// y[i] = exp(x[i] - shift) for i < n, where x[i] - shift <= 0, -inf or NaN (y may be x); returns
// the sum of y in two chains of 16 lanes. Memory-efficient attention's pass over a tile of scores.
float exp_shifted_sum(const float* x, float* y, std::int64_t n, float shift);

// y = softmax(x) over one row of n (y may be x); returns the row's maximum. max_known: when not
// null, the row's maximum, already known (the first pass is skipped).
float softmax_row(const float* x, float* y, std::int64_t n, const float* max_known = nullptr);

// y = softmax(x) over one row of n, rounded to bfloat16 (y: the bits): softmax_row's float32
// result rounded to nearest even as bfloat16::round does (NaN stays NaN), the scaling and the
// rounding in one pass. e: float32 scratch of n (the exponentials). Returns the row's maximum.
float softmax_row_bf16(const float* x, float* e, std::uint16_t* y, std::int64_t n);

// Softmax's backward over one row of n, scaled: y = scale * (p * (g - dot)) with dot = the sum of
// p g, from the probabilities p and their gradient g (y may be g): attention's dS from P and dP.
// The elementwise operations are the portable loop's, in its order; the dot product's sum runs in
// another order.
void softmax_grad_row(const float* p, const float* g, float* y, std::int64_t n, float scale);

// Softmax's backward over one row of n from bfloat16 probabilities y (bits) and a float32
// gradient g, rounded to bfloat16 (out: bits): out = round(y (g - dot)), dot = the sum of y g in
// float32, the elementwise operations those of softmax_grad; the sum in four chains (another
// order than the portable loop's).
void softmax_grad_row_bf16(const std::uint16_t* y, const float* g, std::uint16_t* out,
                           std::int64_t n);
// The same with a float32 out: the values the bfloat16 out rounds.
void softmax_grad_row_bf16(const std::uint16_t* y, const float* g, float* out, std::int64_t n);

// Layer normalisation of one row of n: with residual not null, h = x + residual is written to h
// and normalised in place of x; y = (x - mean) rstd w + b (w, b: null for none), rstd =
// math::layer_norm_rstd of the squared deviations from the mean. The row's two sums run in four
// chains of 16 lanes.
void layer_norm_row(const float* x, const float* residual, float* h, const float* w, const float* b,
                    float eps, float* y, float* mean, float* rstd, std::int64_t n);

// Layer normalisation's backward over one row of n, from its input x (h, with a residual), mean
// and rstd: dx = math::layer_norm_dx of gy = g w (g for a null w) and xhat = (x - mean) rstd,
// with the row sums of gy and gy xhat in four chains; dw += g xhat and db += g column by column
// (the caller's partial sums). Any of dx, dw, db may be null.
void layer_norm_backward_row(const float* g, const float* x, const float* w, float mean, float rstd,
                             float* dx, float* dw, float* db, std::int64_t n);

// Floats that pack_nt needs for B [n, k]: n rounded up to 64, times k.
std::int64_t packed_nt_size(std::int64_t n, std::int64_t k);

// Packs B [n, k] (row stride ldb) for gemm_nt: panels of 64 rows of B, each as k rows of 64
// (B^T's columns), the last panel padded with zeros.
void pack_nt(const float* b, std::int64_t ldb, std::int64_t n, std::int64_t k, float* packed);

// C [m, n] (row stride ldc) = alpha A B^T, A [m, k] (row stride lda), B packed by pack_nt. Each
// element is one fused multiply-add chain over k in order, then times alpha: the same bits
// whichever rows or panels a caller splits the work into. row_max: when not null, row_max[i] =
// the largest C[i, :], NaNs left out (as row_max in softmax_row.h), -inf for n = 0.
// prefetch, prefetch_bytes: memory that the caller reads next (the next rows' probabilities in
// attention's backward), brought into L2 a slice before each register tile, so that its
// transfer from memory overlaps the arithmetic; null for none. Bands of 24 rows of C go through B a
// panel at a time (the panel stays in L1 for the band's four register tiles); a band's rows of A,
// and the next band's, are prefetched into L1.
void gemm_nt(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
             std::int64_t lda, const float* packed_b, float* c, std::int64_t ldc, float* row_max,
             const void* prefetch = nullptr, std::int64_t prefetch_bytes = 0);

// Floats that pack_nn needs for B [k, n]: k times n rounded up to 64.
std::int64_t packed_nn_size(std::int64_t k, std::int64_t n);

// Packs B [k, n] (row stride ldb) for gemm_nn: panels of 64 columns of B, each as k rows of 64,
// the last panel padded with zeros.
void pack_nn(const float* b, std::int64_t ldb, std::int64_t k, std::int64_t n, float* packed);

// C [m, n] (row stride ldc) = A B, A [m, k] (row stride lda), B packed by pack_nn: the products
// whose sum runs over the keys (out = P v, grad_query = dS k) for a group of rows that is still
// in L2. Each element is one fused multiply-add chain over k in order, whatever rows a caller
// splits the work into.
void gemm_nn(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
             const float* packed_b, float* c, std::int64_t ldc);

// Floats of scratch that gemm_tn needs: one packed chunk of B.
std::int64_t gemm_tn_scratch_size();

// C [m, n] (row stride ldc) = A^T B, or with accumulate C += A^T B, A [k, m] (row stride lda:
// C's rows are A's columns), B [k, n] (row stride ldb): the weight gradients g^T x, and
// attention's grad_key^T += query^T dS and grad_value^T += grad^T P for a block of rows. Each
// element is the sum of its chunks of 128 rows of k, added in order (to C's value with
// accumulate), each chunk's sum one fused multiply-add chain (chains of 128 rather than k steps:
// a weight gradient's sum runs over every token of a batch): the same bits whatever rows or
// columns a caller splits the work into. Chunks of B's rows are packed into scratch
// (gemm_tn_scratch_size() floats) a panel of 64 columns at a time; an A of up to 32768 elements
// stays in L2 while C is computed a panel at a time, a larger one goes chunk by chunk.
void gemm_tn(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
             const float* b, std::int64_t ldb, float* c, std::int64_t ldc, float* scratch,
             bool accumulate = false);

// True where available() and the CPU has AVX512-BF16 (the pair dot product of bfloat16).
bool bf16_available();

// 32-bit words of scratch that gemm_tn_bf16 needs for m rows of C.
std::int64_t gemm_tn_bf16_scratch_size(std::int64_t m);

// gemm_tn for bfloat16 A and B (their bits as 16-bit integers) with a float32 C: the products of
// mixed precision's weight gradients. A chunk of 128 rows of k at a time, A's rows and each
// 64-column panel of B's are packed as pairs of consecutive rows, and each pair's two products
// go into an element's sum at once (AVX512-BF16's dot product, exact products, float32 sums);
// the chunks' sums are added in order, as in gemm_tn. Where bf16_available().
void gemm_tn_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a,
                  std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, float* c,
                  std::int64_t ldc, std::uint32_t* scratch);

}  // namespace tinyformer::cpu::avx512
