// CudaBackend::pool1d and pool1d_backward on cuDNN: average or max pooling over full windows of
// a contiguous [B, C, L] tensor (no padding; Lout = (L - kernel) / stride + 1), as on the CPU
// (backends/cpu/pool.cpp). The 1-D problem is cuDNN's 2-D one with a height of 1.
//
// Max pooling uses CUDNN_POOLING_MAX_DETERMINISTIC, so that overlapping windows (stride <
// kernel) add their gradients in a fixed order, and CUDNN_PROPAGATE_NAN, so that a NaN in a
// window comes out as NaN like on the CPU. Its backward routes each window's gradient to one
// maximum, found again by comparing x with the pooled output; the parity tests hold its choice
// among tied maxima against the CPU's (the first one).
#include <algorithm>
#include <cstdint>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cudnn_context.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

// The descriptors of one pooling problem: x [B, C, 1, L], y [B, C, 1, Lout], the window.
struct PoolProblem {
  TensorDescriptor x, y;
  PoolingDescriptor pool;

  PoolProblem(PoolKind kind, const Tensor& input, std::int64_t kernel, std::int64_t stride,
              std::int64_t out_length, const char* op)
      : x(op), y(op), pool(op) {
    const std::int64_t b = input.size(0), c = input.size(1);
    describe_ncw(x, input.dtype(), b, c, input.size(2), op);
    describe_ncw(y, input.dtype(), b, c, out_length, op);
    // kernel <= L and stride fit in int once describe_ncw has accepted L; a larger stride only
    // ever yields one window, as does stride = L.
    const int window = static_cast<int>(kernel);
    const int step = static_cast<int>(std::min<std::int64_t>(stride, input.size(2)));
    // No padding, so "include padding" is the plain average over the full window.
    const cudnnPoolingMode_t mode = kind == PoolKind::max
                                        ? CUDNN_POOLING_MAX_DETERMINISTIC
                                        : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    TF_CUDNN_CHECK(op, cudnnSetPooling2dDescriptor(pool.get(), mode, CUDNN_PROPAGATE_NAN, 1, window,
                                                   0, 0, 1, step));
    int n = 0, ch = 0, h = 0, l = 0;
    TF_CUDNN_CHECK(op, cudnnGetPooling2dForwardOutputDim(pool.get(), x.get(), &n, &ch, &h, &l));
    TF_CHECK(n == b && ch == c && h == 1 && l == out_length, op,
             ": internal error: cuDNN pools to [", n, ", ", ch, ", ", h, ", ", l, "], expected [",
             b, ", ", c, ", 1, ", out_length, "]");
  }
};

}  // namespace

// x: [B, C, L], out: [B, C, Lout]
void CudaBackend::pool1d(PoolKind kind, const Tensor& x, std::int64_t kernel, std::int64_t stride,
                         const Tensor& out) {
  const char* op = kind == PoolKind::max ? "max_pool1d" : "avg_pool1d";
  const std::int64_t out_length = check_pool1d_args(op, x, kernel, stride, out, *this);
  TF_CHECK(out.storage() != x.storage(), op, ": out shares memory with x");
  if (out.numel() == 0) return;  // cuDNN rejects a zero-sized batch or channel count
  const PoolProblem p(kind, x, kernel, stride, out_length, op);
  TF_CUDNN_CHECK(
      op, cudnnPoolingForward(cudnn(), p.pool.get(), cudnn_one(x.dtype()), p.x.get(), x.data_ptr(),
                              cudnn_zero(x.dtype()), p.y.get(), out.data_ptr()));
}

// grad: [B, C, Lout], x: [B, C, L] (the forward's input), grad_x: [B, C, L]
void CudaBackend::pool1d_backward(PoolKind kind, const Tensor& grad, const Tensor& x,
                                  std::int64_t kernel, std::int64_t stride, const Tensor& grad_x) {
  const char* op = kind == PoolKind::max ? "max_pool1d_backward" : "avg_pool1d_backward";
  const std::int64_t out_length =
      check_pool1d_backward_args(op, grad, x, kernel, stride, grad_x, *this);
  const DType dtype = x.dtype();
  TF_CHECK(grad_x.storage() != x.storage() && grad_x.storage() != grad.storage(), op,
           ": grad_x shares memory with an input");
  if (grad_x.numel() == 0) return;
  const PoolProblem p(kind, x, kernel, stride, out_length, op);
  // cuDNN's backward takes the forward's output y: max pooling finds each window's maximum by
  // comparing x with y, so y is pooled again here (the op's inputs are the CPU's: grad and x).
  // Average pooling reads neither x nor y; grad stands in for y (same shape, never written).
  Tensor y = grad;
  if (kind == PoolKind::max) {
    y = empty(grad.shape(), {.dtype = dtype, .device = x.device()});
    TF_CUDNN_CHECK(
        op, cudnnPoolingForward(cudnn(), p.pool.get(), cudnn_one(dtype), p.x.get(), x.data_ptr(),
                                cudnn_zero(dtype), p.y.get(), y.data_ptr()));
  }
  TF_CUDNN_CHECK(
      op, cudnnPoolingBackward(cudnn(), p.pool.get(), cudnn_one(dtype), p.y.get(), y.data_ptr(),
                               p.y.get(), grad.data_ptr(), p.x.get(), x.data_ptr(),
                               cudnn_zero(dtype), p.x.get(), grad_x.data_ptr()));
}

}  // namespace tinyformer::cuda
