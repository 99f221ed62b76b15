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

// softmax, log_softmax and their backwards: contiguous [R, C] tensors of one shape and dtype.
void check_softmax_args(const char* op, std::initializer_list<const Tensor*> tensors,
                        const Backend& backend);

void check_layer_norm_args(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                           const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Backend& backend);
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

void check_adamw_step_args(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                           double eps, double weight_decay, double bias_correction1,
                           double bias_correction2, const Backend& backend);

}  // namespace tinyformer
