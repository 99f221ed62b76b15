// Evaluation metrics.
#include "nn/metrics.h"

#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace tinyformer::nn {

double accuracy(const Tensor& logits, const Tensor& labels, std::int64_t ignore_index) {
  TF_CHECK(logits.defined() && labels.defined(),
           "accuracy: expected defined logits and labels, got an undefined Tensor");
  TF_CHECK(logits.dim() >= 1 && is_floating(logits.dtype()),
           "accuracy: expected floating logits [..., classes], got ", shape_str(logits.shape()),
           " ", logits.dtype());
  TF_CHECK(labels.dtype() == DType::int64, "accuracy: expected int64 labels, got ", labels.dtype());
  Shape expected = logits.shape();
  expected.pop_back();
  TF_CHECK(labels.shape() == expected, "accuracy: logits ", shape_str(logits.shape()),
           " need labels of shape ", shape_str(expected), ", got ", shape_str(labels.shape()));
  TF_CHECK(labels.device() == logits.device(), "accuracy: the logits are on ", logits.device(),
           ", the labels on ", labels.device());
  NoGradGuard no_grad;
  const Tensor counted = labels != static_cast<double>(ignore_index);
  const Tensor right = (argmax(logits, -1) == labels).to(DType::int64) * counted.to(DType::int64);
  const auto total = sum(counted).item<std::int64_t>();
  if (total == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(sum(right).item<std::int64_t>()) / static_cast<double>(total);
}

}  // namespace tinyformer::nn
