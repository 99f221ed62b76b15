// The negative log-likelihood loss, and its backward.
//   nll_loss:          loss[i] = -log_probs[i, target[i]], or 0 where target[i] == ignore_index
//   nll_loss_backward: out[i, c] = -grad_loss[i] if c == target[i] (and the row is not
//                      ignored), else 0
// log_probs, out: [N, C]; target: [N] int64; loss, grad_loss: [N]. A target outside [0, C) that
// is not the ignore_index throws, naming the row.
#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::nll_loss(const Tensor& log_probs, const Tensor& target,
                                std::int64_t ignore_index, const Tensor& loss) {
  check_nll_loss_args(log_probs, target, loss, *this);
  const std::int64_t n = log_probs.size(0), c = log_probs.size(1);
  check_target_values_in_host_memory("nll_loss", target, c, ignore_index);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = get_int(target, i);
    set(loss, i, k == ignore_index ? 0.0 : -at(log_probs, {i, k}));
  }
}

void ReferenceBackend::nll_loss_backward(const Tensor& grad_loss, const Tensor& target,
                                         std::int64_t ignore_index, const Tensor& out) {
  check_nll_loss_backward_args(grad_loss, target, out, *this);
  const std::int64_t n = out.size(0), c = out.size(1);
  check_target_values_in_host_memory("nll_loss_backward", target, c, ignore_index);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = get_int(target, i);
    for (std::int64_t j = 0; j < c; ++j) {
      set_at(out, {i, j}, k != ignore_index && j == k ? -get(grad_loss, i) : 0.0);
    }
  }
}

}  // namespace tinyformer::reference
