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

namespace {

void check_targets(const char* op, const Tensor& target, std::int64_t rows, std::int64_t classes,
                   std::int64_t ignore_index) {
  check_dtype(op, "the target", target, DType::int64);
  TF_CHECK(target.dim() == 1 && target.size(0) == rows, op, ": expected a target of shape [", rows,
           "], got ", shape_str(target.shape()));
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t c = get_int(target, i);
    TF_CHECK(c == ignore_index || (c >= 0 && c < classes), op, ": target ", c, " of row ", i,
             " is out of range for ", classes, " classes (expected 0 <= target < ", classes,
             " or the ignore_index ", ignore_index, ")");
  }
}

}  // namespace

void ReferenceBackend::nll_loss(const Tensor& log_probs, const Tensor& target,
                                std::int64_t ignore_index, const Tensor& loss) {
  TF_CHECK(log_probs.defined() && log_probs.dim() == 2,
           "nll_loss: expected log-probabilities [N, C]");
  const std::int64_t n = log_probs.size(0), c = log_probs.size(1);
  check_targets("nll_loss", target, n, c, ignore_index);
  TF_CHECK(loss.defined() && loss.shape() == Shape{n}, "nll_loss: expected a loss of shape [", n,
           "]");
  check_dtype("nll_loss", "the loss", loss, log_probs.dtype());
  TF_CHECK(is_floating(loss.dtype()), "nll_loss: unsupported dtype ", loss.dtype());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = get_int(target, i);
    set(loss, i, k == ignore_index ? 0.0 : -at(log_probs, {i, k}));
  }
}

void ReferenceBackend::nll_loss_backward(const Tensor& grad_loss, const Tensor& target,
                                         std::int64_t ignore_index, const Tensor& out) {
  TF_CHECK(out.defined() && out.dim() == 2, "nll_loss_backward: expected an output [N, C]");
  const std::int64_t n = out.size(0), c = out.size(1);
  check_targets("nll_loss_backward", target, n, c, ignore_index);
  TF_CHECK(grad_loss.defined() && grad_loss.shape() == Shape{n},
           "nll_loss_backward: expected a gradient of shape [", n, "]");
  check_dtype("nll_loss_backward", "the gradient", grad_loss, out.dtype());
  TF_CHECK(is_floating(out.dtype()), "nll_loss_backward: unsupported dtype ", out.dtype());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = get_int(target, i);
    for (std::int64_t j = 0; j < c; ++j) {
      set_at(out, {i, j}, k != ignore_index && j == k ? -get(grad_loss, i) : 0.0);
    }
  }
}

}  // namespace tinyformer::reference
