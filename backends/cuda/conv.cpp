// CudaBackend::conv1d and conv1d_backward on cuDNN, with PyTorch's semantics as on the CPU
// (backends/cpu/conv.cpp): cross-correlation, zero padding on both sides,
// Lout = (L + 2 padding - K) / stride + 1. The 1-D problem is cuDNN's 2-D one with a height of 1:
// x [B, Cin, 1, L], weight [Cout, Cin, 1, K], padding (0, padding), stride (1, stride).
//
// Algorithms come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7), picked once per
// shape and cached (cudnn_context.h); the workspace comes from the caching allocator. float32
// runs in full precision unless matmul_precision() allows TF32 tensor cores; bfloat16 runs on
// tensor cores with float32 accumulation; float64 is supported as well.
#include <cstdint>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cudnn_context.h"
#include "core/error.h"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

// cuDNN takes stride and padding as int.
void check_cudnn_ints(const ConvShape& s, const char* op) {
  TF_CHECK(s.stride <= INT32_MAX && s.padding <= INT32_MAX, op,
           ": cuDNN takes stride and padding as int, got ", s.stride, " and ", s.padding);
}

// Zeros a contiguous tensor on the stream: cuDNN rejects problems with a zero-sized dim, whose
// gradients (and a forward without input channels) are sums over nothing.
void zero(const Tensor& t, const char* op) {
  if (t.numel() == 0) return;
  TF_CUDA_CHECK(
      op, cudaMemsetAsync(t.data_ptr(), 0,
                          static_cast<std::size_t>(t.numel()) * element_size(t.dtype()), stream()));
}

// --- the cuDNN problem: descriptors of x, weight, the output and the convolution ---

struct ConvProblem {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  DType dtype;
  bool fma_only;  // float32 in exact mode: no algorithm may round to TF32

  ConvProblem(const ConvShape& s, DType dt, const char* op)
      : x(op), y(op), w(op), conv(op), dtype(dt) {
    describe_ncw(x, dtype, s.batch, s.c_in, s.length, op);
    describe_ncw(y, dtype, s.batch, s.c_out, s.out_length, op);
    TF_CHECK(s.c_out * s.c_in * s.kernel <= INT32_MAX, op, ": cuDNN indexes weights of at most ",
             INT32_MAX, " elements, got [", s.c_out, ", ", s.c_in, ", ", s.kernel, "]");
    TF_CUDNN_CHECK(
        op, cudnnSetFilter4dDescriptor(w.get(), cudnn_dtype(dtype, op), CUDNN_TENSOR_NCHW,
                                       static_cast<int>(s.c_out), static_cast<int>(s.c_in), 1,
                                       static_cast<int>(s.kernel)));
    // bfloat16 accumulates in float32; float64 in double.
    const cudnnDataType_t compute = dtype == DType::float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    TF_CUDNN_CHECK(op, cudnnSetConvolution2dDescriptor(conv.get(), 0, static_cast<int>(s.padding),
                                                       1, static_cast<int>(s.stride), 1, 1,
                                                       CUDNN_CROSS_CORRELATION, compute));
    // The math type the heuristics rank for: FMA only for exact float32, tensor cores for
    // bfloat16, cuDNN's default (which allows TF32 for float32) otherwise.
    fma_only = dtype == DType::float32 && matmul_precision() == MatmulPrecision::exact;
    const cudnnMathType_t math = fma_only                   ? CUDNN_FMA_MATH
                                 : dtype == DType::bfloat16 ? CUDNN_TENSOR_OP_MATH
                                                            : CUDNN_DEFAULT_MATH;
    TF_CUDNN_CHECK(op, cudnnSetConvolutionMathType(conv.get(), math));
    // Our Lout formula and cuDNN's must agree, or the output descriptor would be wrong.
    int n = 0, c = 0, h = 0, l = 0;
    TF_CUDNN_CHECK(
        op, cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &n, &c, &h, &l));
    TF_CHECK(n == s.batch && c == s.c_out && h == 1 && l == s.out_length, op,
             ": internal error: cuDNN computes an output of [", n, ", ", c, ", ", h, ", ", l,
             "], expected [", s.batch, ", ", s.c_out, ", 1, ", s.out_length, "]");
  }

  // The cache key of one direction of this problem.
  std::vector<std::int64_t> key(int direction, const ConvShape& s) const {
    int device_index = 0;
    TF_CUDA_CHECK("conv1d", cudaGetDevice(&device_index));
    return {direction,
            static_cast<std::int64_t>(dtype),
            static_cast<std::int64_t>(matmul_precision()),
            device_index,
            s.batch,
            s.c_in,
            s.length,
            s.c_out,
            s.kernel,
            s.stride,
            s.padding};
  }

  // Runs with the chosen algorithm's math type (cuDNN needs both to pick its kernels).
  void use(const ConvAlgorithm& a, const char* op) const {
    TF_CUDNN_CHECK(op, cudnnSetConvolutionMathType(conv.get(), a.math));
  }
};

constexpr int kForward = 0, kBackwardData = 1, kBackwardFilter = 2;
constexpr int kMaxAlgorithms = 16;  // more than cuDNN 9 has in any direction

ConvAlgorithm forward_algorithm(const ConvProblem& p, const ConvShape& s) {
  const char* op = "conv1d";
  return cached_conv_algorithm(p.key(kForward, s), [&] {
    cudnnConvolutionFwdAlgoPerf_t results[kMaxAlgorithms];
    int count = 0;
    TF_CUDNN_CHECK(
        op, cudnnGetConvolutionForwardAlgorithm_v7(cudnn(), p.x.get(), p.w.get(), p.conv.get(),
                                                   p.y.get(), kMaxAlgorithms, &count, results));
    const auto& best = results[choose_algorithm(results, count, p.fma_only, op)];
    ConvAlgorithm a{static_cast<int>(best.algo), best.mathType, 0};
    p.use(a, op);
    TF_CUDNN_CHECK(
        op, cudnnGetConvolutionForwardWorkspaceSize(cudnn(), p.x.get(), p.w.get(), p.conv.get(),
                                                    p.y.get(), best.algo, &a.workspace));
    return a;
  });
}

ConvAlgorithm backward_data_algorithm(const ConvProblem& p, const ConvShape& s) {
  const char* op = "conv1d_backward";
  return cached_conv_algorithm(p.key(kBackwardData, s), [&] {
    cudnnConvolutionBwdDataAlgoPerf_t results[kMaxAlgorithms];
    int count = 0;
    TF_CUDNN_CHECK(op, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                           cudnn(), p.w.get(), p.y.get(), p.conv.get(), p.x.get(), kMaxAlgorithms,
                           &count, results));
    const auto& best = results[choose_algorithm(results, count, p.fma_only, op)];
    ConvAlgorithm a{static_cast<int>(best.algo), best.mathType, 0};
    p.use(a, op);
    TF_CUDNN_CHECK(
        op, cudnnGetConvolutionBackwardDataWorkspaceSize(
                cudnn(), p.w.get(), p.y.get(), p.conv.get(), p.x.get(), best.algo, &a.workspace));
    return a;
  });
}

ConvAlgorithm backward_filter_algorithm(const ConvProblem& p, const ConvShape& s) {
  const char* op = "conv1d_backward";
  return cached_conv_algorithm(p.key(kBackwardFilter, s), [&] {
    cudnnConvolutionBwdFilterAlgoPerf_t results[kMaxAlgorithms];
    int count = 0;
    TF_CUDNN_CHECK(op, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                           cudnn(), p.x.get(), p.y.get(), p.conv.get(), p.w.get(), kMaxAlgorithms,
                           &count, results));
    const auto& best = results[choose_algorithm(results, count, p.fma_only, op)];
    ConvAlgorithm a{static_cast<int>(best.algo), best.mathType, 0};
    p.use(a, op);
    TF_CUDNN_CHECK(
        op, cudnnGetConvolutionBackwardFilterWorkspaceSize(
                cudnn(), p.x.get(), p.y.get(), p.conv.get(), p.w.get(), best.algo, &a.workspace));
    return a;
  });
}

// out[b, o, t] += bias[o]; out: [B, Cout, Lout] described by `out_desc`.
void add_bias(const Tensor& bias, const TensorDescriptor& out_desc, const Tensor& out,
              const char* op) {
  TensorDescriptor bias_desc(op);
  describe_ncw(bias_desc, bias.dtype(), 1, bias.size(0), 1, op);
  TF_CUDNN_CHECK(op,
                 cudnnAddTensor(cudnn(), cudnn_one(bias.dtype()), bias_desc.get(), bias.data_ptr(),
                                cudnn_one(bias.dtype()), out_desc.get(), out.data_ptr()));
}

}  // namespace

// x: [B, Cin, L], weight: [Cout, Cin, K], bias: [Cout] or undefined, out: [B, Cout, Lout]
void CudaBackend::conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         std::int64_t stride, std::int64_t padding, const Tensor& out) {
  const char* op = "conv1d";
  const ConvShape s = check_conv1d_args(x, weight, bias, stride, padding, out, *this);
  check_cudnn_ints(s, op);
  TF_CHECK(out.storage() != x.storage() && out.storage() != weight.storage(), op,
           ": out shares memory with an input");
  if (out.numel() == 0) return;
  const DType dtype = x.dtype();
  if (s.c_in == 0 || s.length == 0) {  // an empty sum (all padding): out is the bias alone
    zero(out, op);
    if (bias.defined()) {
      TensorDescriptor out_desc(op);
      describe_ncw(out_desc, dtype, s.batch, s.c_out, s.out_length, op);
      add_bias(bias, out_desc, out, op);
    }
    return;
  }
  const ConvProblem p(s, dtype, op);
  const ConvAlgorithm a = forward_algorithm(p, s);
  p.use(a, op);
  const Tensor workspace = cudnn_workspace(a.workspace, x.device());
  TF_CUDNN_CHECK(
      op, cudnnConvolutionForward(cudnn(), cudnn_one(dtype), p.x.get(), x.data_ptr(), p.w.get(),
                                  weight.data_ptr(), p.conv.get(),
                                  static_cast<cudnnConvolutionFwdAlgo_t>(a.algo),
                                  workspace.defined() ? workspace.data_ptr() : nullptr, a.workspace,
                                  cudnn_zero(dtype), p.y.get(), out.data_ptr()));
  if (bias.defined()) add_bias(bias, p.y, out, op);
}

// grad: [B, Cout, Lout]; x, weight as in the forward; grad_x: [B, Cin, L],
// grad_weight: [Cout, Cin, K], grad_bias: [Cout], each undefined when not wanted.
void CudaBackend::conv1d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                  std::int64_t stride, std::int64_t padding, const Tensor& grad_x,
                                  const Tensor& grad_weight, const Tensor& grad_bias) {
  const char* op = "conv1d_backward";
  const ConvShape s = check_conv1d_backward_args(grad, x, weight, stride, padding, grad_x,
                                                 grad_weight, grad_bias, *this);
  check_cudnn_ints(s, op);
  const DType dtype = x.dtype();
  const Device device = x.device();

  // grad_bias[o] = sum_{b, t} grad[b, o, t]: needs only grad, so it is done even when x has no
  // channels. With no batch it is a sum over nothing.
  if (grad_bias.defined() && grad_bias.numel() > 0) {
    if (s.batch == 0) {
      zero(grad_bias, op);
    } else {
      // The reduce op, not cudnnConvolutionBackwardBias: cuDNN 9 answers NOT_SUPPORTED to the
      // latter for some problems.
      reduce(ReduceOp::sum, grad, {0, 2},
             raw::as_strided(grad_bias, {1, s.c_out, 1}, {0, grad_bias.stride(0), 0},
                             grad_bias.offset()));
    }
  }
  const bool want_x = grad_x.defined() && grad_x.numel() > 0;
  const bool want_w = grad_weight.defined() && grad_weight.numel() > 0;
  if (!want_x && !want_w) return;
  // cuDNN rejects zero-sized problems; their gradients are all zeros.
  if (s.batch == 0 || s.c_in == 0 || s.c_out == 0 || s.length == 0) {
    if (want_x) zero(grad_x, op);
    if (want_w) zero(grad_weight, op);
    return;
  }
  const ConvProblem p(s, dtype, op);
  if (want_x) {  // grad_x = the transposed convolution of grad with weight
    const ConvAlgorithm a = backward_data_algorithm(p, s);
    p.use(a, op);
    const Tensor workspace = cudnn_workspace(a.workspace, device);
    TF_CUDNN_CHECK(
        op, cudnnConvolutionBackwardData(
                cudnn(), cudnn_one(dtype), p.w.get(), weight.data_ptr(), p.y.get(), grad.data_ptr(),
                p.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo),
                workspace.defined() ? workspace.data_ptr() : nullptr, a.workspace,
                cudnn_zero(dtype), p.x.get(), grad_x.data_ptr()));
  }
  if (want_w) {  // grad_weight[o, c, k] = sum_{b, t} grad[b, o, t] x[b, c, t stride - pad + k]
    const ConvAlgorithm a = backward_filter_algorithm(p, s);
    p.use(a, op);
    const Tensor workspace = cudnn_workspace(a.workspace, device);
    TF_CUDNN_CHECK(
        op, cudnnConvolutionBackwardFilter(
                cudnn(), cudnn_one(dtype), p.x.get(), x.data_ptr(), p.y.get(), grad.data_ptr(),
                p.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo),
                workspace.defined() ? workspace.data_ptr() : nullptr, a.workspace,
                cudnn_zero(dtype), p.w.get(), grad_weight.data_ptr()));
  }
}

}  // namespace tinyformer::cuda
