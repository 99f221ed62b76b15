// The masked-LM validation set and its loss; a classifier's accuracy and loss.
#include "nn/train/evaluate.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "nn/distributed/distributed.h"
#include "nn/metrics.h"

namespace tinyformer::nn {

MlmValidationSet mlm_validation_set(const data::TokenChunks& chunks, std::int64_t max_sequences,
                                    std::int64_t batch, const data::MlmConfig& mlm,
                                    std::uint64_t seed) {
  TF_CHECK(max_sequences > 0 && batch > 0,
           "mlm_validation_set: expected positive max_sequences and batch, got ", max_sequences,
           " and ", batch);
  MlmValidationSet set;
  set.ignore_index = mlm.ignore_index;
  set.sequences = std::min(chunks.size(), max_sequences);
  std::vector<std::int64_t> indices;
  for (std::int64_t i = 0; i < set.sequences; ++i) {
    indices.push_back(i * chunks.size() / set.sequences);
  }
  for (std::int64_t first = 0; first < set.sequences; first += batch) {
    const std::vector<std::int64_t> part(indices.begin() + first,
                                         indices.begin() + std::min(first + batch, set.sequences));
    data::MlmBatch b = data::mlm_batch(chunks, part, mlm, data::mix_seed(seed, 7), 0);
    for (std::int64_t label : b.labels.to_vector<std::int64_t>()) {
      set.targets += label != mlm.ignore_index;
    }
    set.batches.push_back(std::move(b));
  }
  return set;
}

double mlm_validation_loss(MaskedLM& model, const MlmValidationSet& set, Device device,
                           bool split_over_processes) {
  TF_CHECK(set.targets > 0, "mlm_validation_loss: the validation set has no masked position");
  NoGradGuard no_grad;
  const bool training = model.is_training();
  model.eval();  // no dropout
  double total = 0;
  try {
    const std::size_t parts = split_over_processes ? distributed::world_size() : 1;
    const std::size_t part = split_over_processes ? distributed::rank() : 0;
    for (std::size_t i = part; i < set.batches.size(); i += parts) {
      const data::MlmBatch& b = set.batches[i];
      const Tensor logits = model.forward(b.tokens.to(device));  // [B, n, V]
      const Tensor loss =
          cross_entropy(logits.reshape({-1, logits.size(2)}), b.labels.to(device).reshape({-1}),
                        set.ignore_index, Reduction::sum);
      total += loss.item<double>();
    }
  } catch (...) {
    if (training) model.train();
    throw;
  }
  if (training) model.train();
  if (split_over_processes && distributed::world_size() > 1) {
    const Tensor sum = scalar_tensor(total, {.dtype = DType::float64});
    distributed::all_reduce(sum);
    total = sum.item<double>();
  }
  return total / static_cast<double>(set.targets);
}

ClassifierScore evaluate_classifier(SequenceClassifier& model,
                                    const std::vector<data::ClassifierBatch>& batches,
                                    Device device) {
  NoGradGuard no_grad;
  const bool training = model.is_training();
  model.eval();  // no dropout
  ClassifierScore score;
  double correct = 0, total_loss = 0;
  try {
    for (const data::ClassifierBatch& b : batches) {
      TF_CHECK(b.labels.defined() && b.labels.dim() == 1 && b.labels.dtype() == DType::int64,
               "evaluate_classifier: expected int64 labels [B]");
      for (const std::int64_t label : b.labels.to_vector<std::int64_t>()) {
        TF_CHECK(label >= 0, "evaluate_classifier: expected class indices, got the label ", label);
      }
      const Tensor mask = b.padding_mask.defined() ? b.padding_mask.to(device) : Tensor();
      const Tensor logits = model.forward(b.tokens.to(device), mask);  // [B, classes]
      const Tensor labels = b.labels.to(device);
      total_loss += cross_entropy(logits, labels, -100, Reduction::sum).item<double>();
      correct += accuracy(logits, labels) * static_cast<double>(b.labels.size(0));
      score.examples += b.labels.size(0);
    }
  } catch (...) {
    if (training) model.train();
    throw;
  }
  if (training) model.train();
  TF_CHECK(score.examples > 0, "evaluate_classifier: the batches hold no example");
  score.accuracy = correct / static_cast<double>(score.examples);
  score.loss = total_loss / static_cast<double>(score.examples);
  return score;
}

double next_token_loss(CausalLM& model, const data::TokenChunks& chunks, std::int64_t max_sequences,
                       std::int64_t batch, Device device) {
  const char* op = "next_token_loss";
  TF_CHECK(max_sequences > 0 && batch > 0, op, ": expected positive max_sequences and batch, got ",
           max_sequences, " and ", batch);
  TF_CHECK(chunks.size() > 0, op, ": no sequence to evaluate");
  NoGradGuard no_grad;
  const bool training = model.is_training();
  model.eval();  // no dropout
  const std::int64_t count = std::min(chunks.size(), max_sequences);
  double total = 0;
  std::int64_t targets = 0;
  try {
    for (std::int64_t first = 0; first < count; first += batch) {
      std::vector<std::int64_t> indices;
      for (std::int64_t i = first; i < std::min(first + batch, count); ++i) {
        indices.push_back(i * chunks.size() / count);
      }
      const Tensor both = chunks.batch(indices);  // [B, n + 1]
      const std::int64_t n = both.size(1) - 1;
      TF_CHECK(n >= 1, op, ": expected sequences of at least 2 tokens, got ", both.size(1));
      const Tensor inputs = both.narrow(1, 0, n).contiguous().to(device);
      const Tensor labels = both.narrow(1, 1, n).contiguous().to(device);
      const Tensor logits = model.forward(inputs);  // [B, n, V]
      total += cross_entropy(logits.reshape({-1, logits.size(2)}), labels.reshape({-1}), -100,
                             Reduction::sum)
                   .item<double>();
      targets += labels.numel();
    }
  } catch (...) {
    if (training) model.train();
    throw;
  }
  if (training) model.train();
  return total / static_cast<double>(targets);
}

}  // namespace tinyformer::nn
