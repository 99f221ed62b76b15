// The argument rules of the primitive ops of core/ops.def that every backend enforces the same
// way: shapes, dtypes, devices, layouts and scalar ranges, with one error message per rule. A
// backend's kernel file calls the op's check first, passing itself, and keeps only its own
// concerns (a library's limits, aliasing its kernels cannot handle). The rules are the same for
// every backend: which dtypes its kernels take is the backend's answer to supports(), and every
// operand must be on the output's device, which must be of the backend's device type.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/attention_dropout.h"
#include "core/dtype.h"
#include "core/ops.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tinyformer {

class Backend;

// --- checks shared by many ops ---

// Throws unless every tensor is defined, has `out`'s shape and is on out's device, and that device
// is the backend's kind.
void check_same_shape(const char* op, const Tensor& out, std::initializer_list<Tensor> inputs,
                      const Backend& backend);
// Throws unless `t` is defined and has dtype `dtype`; `what` names the argument.
void check_dtype(const char* op, const char* what, const Tensor& t, DType dtype);

// --- one check per op (the op's shape comment in ops.def says what each tensor is) ---

void check_unary_args(UnaryOp op, const Tensor& x, const Tensor& out, const Backend& backend);
void check_unary_backward_args(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                               const Tensor& out, const Backend& backend);

// Returns which dims of x are reduced; out's shape is x's with those dims set to 1. max and min
// reject an empty reduced dim.
std::vector<bool> check_reduce_args(ReduceOp op, const Tensor& x, const Shape& dims,
                                    const Tensor& out, const Backend& backend);
// Returns `dim` normalized to [0, x.dim()) (0 for a 0-dim x).
std::int64_t check_max_dim_args(const Tensor& x, std::int64_t dim, const Tensor& values,
                                const Tensor& indices, const Backend& backend);

void check_matmul_args(const Tensor& a, const Tensor& b, const Tensor& out, const Backend& backend);

// The sizes of one linear problem: x [m, k] with row stride ld (>= k; k when m <= 1), weight
// [n, k], out [m, n].
struct LinearShape {
  std::int64_t m, k, n, ld;
};
LinearShape check_linear_args(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              Epilogue epilogue, const Tensor& out, const Backend& backend);
// linear_backward_epilogue (core/ops.def); returns {M, N}.
struct LinearGradShape {
  std::int64_t m, n;
};
LinearGradShape check_linear_backward_epilogue_args(const Tensor& grad, const Tensor& y,
                                                    Epilogue epilogue, const Tensor& grad_z,
                                                    const Tensor& grad_bias,
                                                    const Backend& backend);

// attention and attention_backward (core/ops.def): the leading (batch) dims, their number of
// matrices, and the sizes n (queries), m (keys), d (query and key width) and dv (value width).
struct AttentionShape {
  Shape batch;
  std::int64_t batches, n, m, d, dv;
};
AttentionShape check_attention_args(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& excluded_mask, bool causal, double scale,
                                    const Tensor& probs, const Tensor& out, const Backend& backend);
AttentionShape check_attention_backward_args(const Tensor& grad, const Tensor& query,
                                             const Tensor& key, const Tensor& value,
                                             const Tensor& probs, double scale,
                                             const Tensor& grad_query, const Tensor& grad_key,
                                             const Tensor& grad_value, const Backend& backend);
// flash_attention and flash_attention_backward (core/ops.def): attention's checks, with lse
// [..., n] contiguous in the query's dtype in place of probs, and a dropout probability in [0, 1].
AttentionShape check_flash_attention_args(const Tensor& query, const Tensor& key,
                                          const Tensor& value, const Tensor& excluded_mask,
                                          double scale, const AttentionDropout& dropout,
                                          const Tensor& out, const Tensor& lse,
                                          const Backend& backend);
AttentionShape check_flash_attention_backward_args(
    const Tensor& grad, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, const Tensor& lse, const Tensor& excluded_mask, double scale,
    const AttentionDropout& dropout, const Tensor& grad_query, const Tensor& grad_key,
    const Tensor& grad_value, const Backend& backend);
// The element offset of each matrix of t (whose leading dims are `batch`) from t's data, in
// row-major order of the batch index.
std::vector<std::int64_t> batch_offsets(const Tensor& t, const Shape& batch);

// softmax, log_softmax and their backwards: contiguous [R, C] tensors of one shape and dtype,
// except for mixed precision's pairs: out (and a backward's y) may be bfloat16 where the tensor
// that sets the computation's dtype (x forward, grad backward) is float32.
void check_softmax_args(const char* op, std::initializer_list<const Tensor*> tensors,
                        const Backend& backend);

void check_layer_norm_args(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                           const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Backend& backend);
void check_add_layer_norm_args(const Tensor& x, const Tensor& residual, const Tensor& weight,
                               const Tensor& bias, double eps, const Tensor& out, const Tensor& sum,
                               const Tensor& mean, const Tensor& rstd, const Backend& backend);
void check_layer_norm_backward_args(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                    const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                    const Tensor& grad_weight, const Tensor& grad_bias,
                                    const Backend& backend);

// The sizes of one conv1d problem: x [batch, c_in, length], weight [c_out, c_in, kernel],
// out [batch, c_out, out_length].
struct ConvShape {
  std::int64_t batch, c_in, length, c_out, kernel, stride, padding, out_length;
};
ConvShape check_conv1d_args(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            std::int64_t stride, std::int64_t padding, const Tensor& out,
                            const Backend& backend);
ConvShape check_conv1d_backward_args(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                     std::int64_t stride, std::int64_t padding,
                                     const Tensor& grad_x, const Tensor& grad_weight,
                                     const Tensor& grad_bias, const Backend& backend);

// Both return Lout, the pooled length. `op` is the kind's name (max_pool1d, avg_pool1d_backward).
std::int64_t check_pool1d_args(const char* op, const Tensor& x, std::int64_t kernel,
                               std::int64_t stride, const Tensor& out, const Backend& backend);
std::int64_t check_pool1d_backward_args(const char* op, const Tensor& grad, const Tensor& x,
                                        std::int64_t kernel, std::int64_t stride,
                                        const Tensor& grad_x, const Backend& backend);

void check_sum_squares_args(const Tensor& x, const Tensor& out, const Backend& backend);

void check_adamw_step_args(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                           double eps, double weight_decay, double bias_correction1,
                           double bias_correction2, const Backend& backend);

// --- indexing and losses: shapes, dtypes and devices here; the values of indices and
// targets live on the backend's device, so each backend finds the first bad one its own way and
// reports it with the message below ---

// table: [V, D], indices: [N] int64, out: [N, D] of table's dtype.
void check_index_select_args(const Tensor& table, const Tensor& indices, const Tensor& out,
                             const Backend& backend);
// src: [N, D], indices: [N] int64, out: [V, D] of src's dtype, contiguous.
void check_index_add_args(const Tensor& src, const Tensor& indices, const Tensor& out,
                          const Backend& backend);
// log_probs: [N, C] contiguous, target: [N] int64, loss: [N] of log_probs' dtype.
void check_nll_loss_args(const Tensor& log_probs, const Tensor& target, const Tensor& loss,
                         const Backend& backend);
// grad_loss: [N], target: [N] int64, out: [N, C] contiguous of grad_loss's dtype.
void check_nll_loss_backward_args(const Tensor& grad_loss, const Tensor& target, const Tensor& out,
                                  const Backend& backend);

// --- random ---

// RandomKind::scaled_bernoulli's scalars: a probability a in [0, 1] and a finite value b.
void check_scaled_bernoulli_args(double a, double b);

// The errors for a bad value: index `value` at `position` outside [0, rows); target `value` of
// row `row` outside [0, classes) and not ignore_index.
[[noreturn]] void fail_index_out_of_range(const char* op, std::int64_t value, std::int64_t position,
                                          std::int64_t rows);
[[noreturn]] void fail_target_out_of_range(const char* op, std::int64_t value, std::int64_t row,
                                           std::int64_t classes, std::int64_t ignore_index);
// For backends whose tensors live in host memory: scan the values in order and fail on the
// first bad one.
void check_index_values_in_host_memory(const char* op, const Tensor& indices, std::int64_t rows);
void check_target_values_in_host_memory(const char* op, const Tensor& target, std::int64_t classes,
                                        std::int64_t ignore_index);

}  // namespace tinyformer
