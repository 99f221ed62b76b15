// Classification losses: nll_loss on log-probabilities, and cross_entropy = log_softmax then
// nll_loss. The per-row loss is one fused kernel; the reductions are ordinary ops, so their
// backward comes free.
#include "autograd/loss.h"

#include "autograd/autocast.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

namespace {

// input: [N, C] with targets [N], or [C] with a 0-dim target.
void check_loss_inputs(const Tensor& input, const Tensor& targets, const char* op) {
  TF_CHECK(input.defined() && targets.defined(), op,
           ": expected defined tensors, got an undefined Tensor");
  TF_CHECK(is_floating(input.dtype()), op, ": expected floating scores, got ", input.dtype());
  TF_CHECK(input.dim() == 1 || input.dim() == 2, op,
           ": expected scores of shape [N, C] or [C], got ", shape_str(input.shape()));
  TF_CHECK(targets.dtype() == DType::int64, op, ": expected int64 class indices as targets, got ",
           targets.dtype());
  TF_CHECK(targets.device() == input.device(), op, ": the targets are on ", targets.device(),
           ", the scores on ", input.device());
  const Shape expected = input.dim() == 2 ? Shape{input.size(0)} : Shape{};
  TF_CHECK(targets.shape() == expected, op, ": expected targets of shape ", shape_str(expected),
           " for scores of shape ", shape_str(input.shape()), ", got ", shape_str(targets.shape()));
  TF_CHECK(input.size(-1) > 0, op, ": expected at least one class, got scores of shape ",
           shape_str(input.shape()));
}

// loss[i] = -log_probs[i, targets[i]], 0 where targets[i] == ignore_index.
//   d loss[i] / d log_probs[i, targets[i]] = -1; every other entry has no gradient.
Tensor nll_rows(const Tensor& log_probs, const Tensor& targets, std::int64_t ignore_index) {
  const bool unbatched = log_probs.dim() == 1;
  const std::int64_t n = unbatched ? 1 : log_probs.size(0), c = log_probs.size(-1);
  // lp: [N, C], t: [N], loss: [N].
  const Tensor lpc = raw::contiguous(log_probs);
  const Tensor lp = raw::as_strided(lpc, {n, c}, {c, 1}, lpc.offset());
  const Tensor tc = raw::contiguous(targets);
  const Tensor t = raw::as_strided(tc, {n}, {1}, tc.offset());
  Tensor loss = empty({n}, {.dtype = log_probs.dtype(), .device = log_probs.device()});
  if (n > 0) backend(loss.device()).nll_loss(lp, t, ignore_index, loss);
  const Shape in_shape = log_probs.shape();
  Tensor saved_t = save(t);
  if (unbatched) loss = raw::as_strided(loss, {}, {}, 0);
  return record("nll_loss", loss, {log_probs},
                [saved_t, ignore_index, n, c, in_shape](const Tensor& g) {
                  const Tensor gc = raw::contiguous(g);
                  Tensor gx = empty(in_shape, {.dtype = g.dtype(), .device = g.device()});
                  if (n > 0) {
                    backend(g.device())
                        .nll_loss_backward(raw::as_strided(gc, {n}, {1}, gc.offset()), saved_t,
                                           ignore_index, raw::as_strided(gx, {n, c}, {c, 1}, 0));
                  }
                  return std::vector<Tensor>{gx};
                });
}

Tensor reduce_loss(const Tensor& rows, const Tensor& targets, std::int64_t ignore_index,
                   Reduction reduction) {
  switch (reduction) {
    case Reduction::none:
      return rows;
    case Reduction::sum:
      return sum(rows);
    case Reduction::mean: {
      // Divide by the number of rows that count; with none left this is 0 / 0 = NaN, as in
      // PyTorch. The count stays on the device (no synchronisation).
      const Tensor ignore = scalar_tensor(static_cast<double>(ignore_index),
                                          {.dtype = DType::int64, .device = targets.device()});
      const Tensor counted = sum(to(ne(targets, ignore), rows.dtype()));
      return sum(rows) / counted;
    }
  }
  fail("loss: unknown reduction ", static_cast<int>(reduction));
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& targets, std::int64_t ignore_index,
                Reduction reduction) {
  const Tensor log_probs = autocast_to_float(log_probs_in);  // float32 under autocast
  check_loss_inputs(log_probs, targets, "nll_loss");
  return reduce_loss(nll_rows(log_probs, targets, ignore_index), targets, ignore_index, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     Reduction reduction) {
  check_loss_inputs(logits, targets, "cross_entropy");
  return reduce_loss(nll_rows(log_softmax(logits, -1), targets, ignore_index), targets,
                     ignore_index, reduction);
}

}  // namespace tinyformer
