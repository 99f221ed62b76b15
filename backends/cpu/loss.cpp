// The negative log-likelihood loss on the CPU: a gather of -log_probs[i, target[i]] per row,
// and its backward, a scatter of -grad_loss[i] into a zeroed [N, C] gradient.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"

namespace tinyformer::cpu {

// log_probs: [N, C] contiguous, target: [N] int64, loss: [N];
// loss[i] = -log_probs[i, target[i]], or 0 where target[i] == ignore_index.
void CpuBackend::nll_loss(const Tensor& log_probs, const Tensor& target, std::int64_t ignore_index,
                          const Tensor& loss) {
  check_nll_loss_args(log_probs, target, loss, *this);
  const std::int64_t n = log_probs.size(0), c = log_probs.size(1);
  check_target_values_in_host_memory("nll_loss", target, c, ignore_index);
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
  check_nll_loss_backward_args(grad_loss, target, out, *this);
  const std::int64_t n = out.size(0), c = out.size(1);
  check_target_values_in_host_memory("nll_loss_backward", target, c, ignore_index);
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
        std::max<std::int64_t>(c, 1));
  });
}

}  // namespace tinyformer::cpu
