// The negative log-likelihood loss on the GPU: a gather of -log_probs[i, target[i]] per row, and
// its backward, a scatter of -grad_loss[i] into a zeroed [N, C] gradient.
//
// Both ops synchronise with the device once: the targets are checked on the GPU first and the
// host waits for the verdict, so that a target outside [0, C) throws an Error naming its row
// (as on the CPU) before any kernel reads or writes through it.
#include <cstdint>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/strided.cuh"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

// Records in *first_bad the smallest row whose target is neither ignore_index nor in
// [0, classes). *first_bad starts at the largest unsigned value (no bad row).
// target: [N] int64 with stride `ts`
__global__ void find_bad_target_kernel(const std::int64_t* target, std::int64_t ts, std::int64_t n,
                                       std::int64_t classes, std::int64_t ignore_index,
                                       unsigned long long* first_bad) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = target[i * ts];
    if (c != ignore_index && (c < 0 || c >= classes)) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

// loss[i] = -log_probs[i, target[i]], or 0 where target[i] == ignore_index.
// log_probs: [N, C] contiguous; target: [N] (stride ts), loss: [N] (stride ls)
template <typename T>
__global__ void nll_loss_kernel(const T* log_probs, const std::int64_t* target, std::int64_t ts,
                                std::int64_t ignore_index, T* loss, std::int64_t ls, std::int64_t n,
                                std::int64_t classes) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t k = target[i * ts];
    loss[i * ls] =
        k == ignore_index ? from_acc<T>(0.0f) : from_acc<T>(-to_acc(log_probs[i * classes + k]));
  }
}

// out[i, target[i]] = -grad_loss[i] for every row not ignored; the rest of out is already 0.
// grad_loss: [N] (stride gs, 0 after a mean); target: [N] (stride ts); out: [N, C] contiguous
template <typename T>
__global__ void nll_loss_backward_kernel(const T* grad_loss, std::int64_t gs,
                                         const std::int64_t* target, std::int64_t ts,
                                         std::int64_t ignore_index, T* out, std::int64_t n,
                                         std::int64_t classes) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t k = target[i * ts];
    if (k != ignore_index) out[i * classes + k] = from_acc<T>(-to_acc(grad_loss[i * gs]));
  }
}

// Throws unless every target (shape, dtype and device checked already) lies in [0, classes) or
// equals ignore_index, naming the first bad one. Waits for the device (see the top of the file).
void check_targets(const char* op, const Tensor& target, std::int64_t rows, std::int64_t classes,
                   std::int64_t ignore_index) {
  if (rows == 0) return;
  const Tensor flag = empty({1}, {.dtype = DType::int64, .device = target.device()});
  auto* first_bad = static_cast<unsigned long long*>(flag.data_ptr());
  TF_CUDA_CHECK(op, cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), stream()));
  const std::int64_t* t = device_data<std::int64_t>(target);
  const std::int64_t ts = target.stride(0);
  find_bad_target_kernel<<<grid_for(rows), kBlock, 0, stream()>>>(t, ts, rows, classes,
                                                                  ignore_index, first_bad);
  TF_CUDA_CHECK_LAUNCH(op);
  unsigned long long row = 0;
  TF_CUDA_CHECK(op,
                cudaMemcpyAsync(&row, first_bad, sizeof(row), cudaMemcpyDeviceToHost, stream()));
  TF_CUDA_CHECK(op, cudaStreamSynchronize(stream()));
  if (row == ~0ull) return;
  const auto i = static_cast<std::int64_t>(row);
  std::int64_t c = 0;
  TF_CUDA_CHECK(op, cudaMemcpyAsync(&c, t + i * ts, sizeof(c), cudaMemcpyDeviceToHost, stream()));
  TF_CUDA_CHECK(op, cudaStreamSynchronize(stream()));
  fail_target_out_of_range(op, c, i, classes, ignore_index);
}

}  // namespace

// log_probs: [N, C] contiguous, target: [N] int64, loss: [N];
// loss[i] = -log_probs[i, target[i]], or 0 where target[i] == ignore_index.
void CudaBackend::nll_loss(const Tensor& log_probs, const Tensor& target, std::int64_t ignore_index,
                           const Tensor& loss) {
  const char* op = "nll_loss";
  check_nll_loss_args(log_probs, target, loss, *this);
  const std::int64_t n = log_probs.size(0), c = log_probs.size(1);
  check_targets(op, target, n, c, ignore_index);
  if (n == 0) return;
  dispatch_floating(log_probs.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    nll_loss_kernel<T><<<grid_for(n), kBlock, 0, stream()>>>(
        device_data<T>(log_probs), device_data<std::int64_t>(target), target.stride(0),
        ignore_index, device_data<T>(loss), loss.stride(0), n, c);
    TF_CUDA_CHECK_LAUNCH(op);
  });
}

// grad_loss: [N] (any strides, a stride-0 view after a mean), target: [N] int64,
// out: [N, C] contiguous; out[i, target[i]] = -grad_loss[i], 0 elsewhere and on ignored rows.
void CudaBackend::nll_loss_backward(const Tensor& grad_loss, const Tensor& target,
                                    std::int64_t ignore_index, const Tensor& out) {
  const char* op = "nll_loss_backward";
  check_nll_loss_backward_args(grad_loss, target, out, *this);
  const std::int64_t n = out.size(0), c = out.size(1);
  check_targets(op, target, n, c, ignore_index);
  if (out.numel() == 0) return;
  dispatch_floating(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    // All-zero bits are +0 in every floating dtype.
    TF_CUDA_CHECK(op, cudaMemsetAsync(out.data_ptr(), 0, out.numel() * sizeof(T), stream()));
    nll_loss_backward_kernel<T><<<grid_for(n), kBlock, 0, stream()>>>(
        device_data<T>(grad_loss), grad_loss.stride(0), device_data<std::int64_t>(target),
        target.stride(0), ignore_index, device_data<T>(out), n, c);
    TF_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace tinyformer::cuda
