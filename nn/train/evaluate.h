// Evaluation for masked-LM training: a fixed validation set (the same sequences with the same
// masks at every evaluation) and its mean loss, as train_mlm reports it and any program that
// opens its checkpoint (examples/evaluate_checkpoint.cpp) recomputes it; a classifier's accuracy
// and mean loss over labelled batches; and the next-token loss of a causal LM, as
// train_causal_lm reports it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "nn/causal_lm.h"
#include "nn/data/batching.h"
#include "nn/data/mlm.h"
#include "nn/models.h"

namespace tinyformer::nn {

struct MlmValidationSet {
  std::vector<data::MlmBatch> batches;
  std::int64_t sequences = 0;
  std::int64_t targets = 0;          // masked positions, the denominator of the mean loss
  std::int64_t ignore_index = -100;  // the label of the other positions (MlmConfig's)
};

// Up to `max_sequences` of `chunks`, evenly spread over them (not only the beginning), in
// batches of `batch`, masked once with `mlm` from `seed` (by mlm_batch with the seed
// data::mix_seed(seed, 7) and epoch 0). The same arguments give the same set in any program.
MlmValidationSet mlm_validation_set(const data::TokenChunks& chunks, std::int64_t max_sequences,
                                    std::int64_t batch, const data::MlmConfig& mlm,
                                    std::uint64_t seed);

// The mean cross-entropy over the masked positions of `set` (nats per target; its exp is the
// perplexity), without dropout and without building a graph. The model's training or
// evaluation mode is left as it was. With `split_over_processes`, in a data-parallel job
// (nn/distributed) each process evaluates every world_size-th batch and the sums are added
// across processes: every process gets the same value, which differs from one process's only
// by the order of the additions. It is then a collective: every process must call it.
double mlm_validation_loss(MaskedLM& model, const MlmValidationSet& set, Device device,
                           bool split_over_processes = false);

struct ClassifierScore {
  double accuracy = 0;        // the fraction of examples whose argmax logit is their label
  double loss = 0;            // the mean cross-entropy per example (nats)
  std::int64_t examples = 0;  // the examples of all the batches
};

// `model`'s score on every example of `batches` (each moved to `device`; padding_mask may be
// undefined), without dropout and without building a graph; the model's training or evaluation
// mode is left as it was. Throws an Error for no examples, or a label outside the classes.
ClassifierScore evaluate_classifier(SequenceClassifier& model,
                                    const std::vector<data::ClassifierBatch>& batches,
                                    Device device = Device::cpu());

// Next-token evaluation for a causal language model: the mean cross-entropy (nats per token)
// of predicting the last n tokens of each sequence of `chunks` (n + 1 tokens each) from the
// first n, over up to `max_sequences` sequences evenly spread over the chunks, in batches of
// `batch`; without dropout and without a graph, the model's mode left as it was. What
// train_causal_lm reports, and any program that opens its checkpoint recomputes.
double next_token_loss(CausalLM& model, const data::TokenChunks& chunks, std::int64_t max_sequences,
                       std::int64_t batch, Device device);

}  // namespace tinyformer::nn
