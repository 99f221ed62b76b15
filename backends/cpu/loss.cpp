// The negative log-likelihood loss on the CPU: a gather of -log_probs[i, target[i]] per row,
// and its backward, a scatter of -grad_loss[i] into a zeroed [N, C] gradient.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"

namespace tinyformer::cpu {

namespace {

// target: [N] int64, each in [0, classes) or equal to ignore_index.
void check_targets(const char* op, const Tensor& target, std::int64_t rows, std::int64_t classes,
                   std::int64_t ignore_index) {
  check_dtype(op, "the target", target, DType::int64);
  TF_CHECK(target.dim() == 1 && target.size(0) == rows, op, ": expected a target of shape [", rows,
           "], got ", shape_str(target.shape()));
  const std::int64_t* t = target.data<std::int64_t>();
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t c = t[i * target.stride(0)];
    TF_CHECK(c == ignore_index || (c >= 0 && c < classes), op, ": target ", c, " of row ", i,
             " is out of range for ", classes, " classes (expected 0 <= target < ", classes,
             " or the ignore_index ", ignore_index, ")");
  }
}

}  // namespace

// log_probs: [N, C] contiguous, target: [N] int64, loss: [N];
// loss[i] = -log_probs[i, target[i]], or 0 where target[i] == ignore_index.
void CpuBackend::nll_loss(const Tensor& log_probs, const Tensor& target, std::int64_t ignore_index,
                          const Tensor& loss) {
  TF_CHECK(log_probs.defined() && log_probs.dim() == 2 && log_probs.is_contiguous(),
           "nll_loss: expected contiguous log-probabilities [N, C], got ",
           log_probs.defined() ? shape_str(log_probs.shape()) : "an undefined Tensor");
  const std::int64_t n = log_probs.size(0), c = log_probs.size(1);
  check_targets("nll_loss", target, n, c, ignore_index);
  TF_CHECK(loss.defined() && loss.shape() == Shape{n}, "nll_loss: expected a loss of shape [", n,
           "], got ", loss.defined() ? shape_str(loss.shape()) : "an undefined Tensor");
  check_dtype("nll_loss", "the loss", loss, log_probs.dtype());
  dispatch_floating(log_probs.dtype(), "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* lp = log_probs.data<T>();
    const std::int64_t* t = target.data<std::int64_t>();
    T* out = loss.data<T>();
    const std::int64_t ts = target.stride(0), ls = loss.stride(0);
    parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t k = t[i * ts];
        out[i * ls] = k == ignore_index ? T(0) : -lp[i * c + k];
      }
    });
  });
}

// grad_loss: [N] (any strides, a stride-0 view after a mean), target: [N] int64,
// out: [N, C] contiguous; out[i, target[i]] = -grad_loss[i], 0 elsewhere and on ignored rows.
void CpuBackend::nll_loss_backward(const Tensor& grad_loss, const Tensor& target,
                                   std::int64_t ignore_index, const Tensor& out) {
  TF_CHECK(out.defined() && out.dim() == 2 && out.is_contiguous(),
           "nll_loss_backward: expected a contiguous output [N, C], got ",
           out.defined() ? shape_str(out.shape()) : "an undefined Tensor");
  const std::int64_t n = out.size(0), c = out.size(1);
  check_targets("nll_loss_backward", target, n, c, ignore_index);
  TF_CHECK(grad_loss.defined() && grad_loss.shape() == Shape{n},
           "nll_loss_backward: expected a gradient of shape [", n, "], got ",
           grad_loss.defined() ? shape_str(grad_loss.shape()) : "an undefined Tensor");
  check_dtype("nll_loss_backward", "the gradient", grad_loss, out.dtype());
  dispatch_floating(out.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad_loss.data<T>();
    const std::int64_t* t = target.data<std::int64_t>();
    T* o = out.data<T>();
    const std::int64_t gs = grad_loss.stride(0), ts = target.stride(0);
    parallel_for(
        n,
        [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) {
            T* row = o + i * c;
            std::fill(row, row + c, T(0));
            const std::int64_t k = t[i * ts];
            if (k != ignore_index) row[k] = -g[i * gs];
          }
        },
        std::max<std::int64_t>(1, kParallelThreshold / std::max<std::int64_t>(c, 1)));
  });
}

}  // namespace tinyformer::cpu
