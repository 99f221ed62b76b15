// evaluate_classifier: accuracy and mean loss over batches of different sizes, the model's mode
// kept, no graph built, bad input refused.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;

namespace {

std::shared_ptr<nn::SequenceClassifier> small_classifier() {
  manual_seed(3);
  return std::make_shared<nn::SequenceClassifier>(
      nn::EncoderConfig{
          .layers = 1, .d_model = 8, .heads = 2, .d_ff = 16, .max_seq_len = 6, .dropout = 0.5},
      nn::data::BracketVocab::vocab_size, 2);
}

}  // namespace

TEST_CASE("evaluate_classifier: the accuracy and mean loss of every example, in eval mode") {
  auto model = small_classifier();
  const auto examples = nn::data::balanced_brackets(7, 6, 1);
  // Batches of 5 and 2 examples: the means are over examples, not batches.
  const std::vector<nn::data::ClassifierBatch> batches = {
      nn::data::bracket_batch(examples, {0, 1, 2, 3, 4}),
      nn::data::bracket_batch(examples, {5, 6})};
  const nn::ClassifierScore score = nn::evaluate_classifier(*model, batches);
  CHECK(model->is_training());  // the mode it was in
  CHECK(score.examples == 7);

  // The same sums by hand, without dropout.
  model->eval();
  double loss = 0, correct = 0;
  for (const nn::data::ClassifierBatch& b : batches) {
    const Tensor logits = model->forward(b.tokens, b.padding_mask);
    loss += cross_entropy(logits, b.labels, -100, Reduction::sum).item<double>();
    correct += nn::accuracy(logits, b.labels) * static_cast<double>(b.labels.size(0));
  }
  CHECK(score.loss == doctest::Approx(loss / 7).epsilon(1e-6));
  CHECK(score.accuracy == doctest::Approx(correct / 7).epsilon(1e-12));
  CHECK(std::round(score.accuracy * 7) == doctest::Approx(score.accuracy * 7));

  // A model in eval mode stays there; no graph is built (the loss is not differentiable).
  const nn::ClassifierScore again = nn::evaluate_classifier(*model, batches);
  CHECK_FALSE(model->is_training());
  CHECK(again.loss == score.loss);
  CHECK(again.accuracy == score.accuracy);
  for (const Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("evaluate_classifier: a padding mask changes what mean pooling sees") {
  auto model = small_classifier();
  model->eval();
  const auto examples = nn::data::balanced_brackets(4, 6, 2, {.min_len = 2});
  nn::data::ClassifierBatch padded = nn::data::bracket_batch(examples, {0, 1, 2, 3}, 6);
  nn::data::ClassifierBatch unmasked = padded;
  unmasked.padding_mask = Tensor();  // pad tokens then count as positions
  CHECK(nn::evaluate_classifier(*model, {padded}).loss !=
        nn::evaluate_classifier(*model, {unmasked}).loss);
}

TEST_CASE("evaluate_classifier: no examples or labels that are no classes are Errors") {
  auto model = small_classifier();
  CHECK_THROWS_WITH_AS(nn::evaluate_classifier(*model, {}), doctest::Contains("no example"), Error);
  const auto examples = nn::data::balanced_brackets(2, 4, 1);
  nn::data::ClassifierBatch b = nn::data::bracket_batch(examples, {0, 1});
  b.labels = from(std::vector<std::int64_t>{1, -100}, {2});
  CHECK_THROWS_WITH_AS(nn::evaluate_classifier(*model, {b}), doctest::Contains("the label -100"),
                       Error);
  CHECK(model->is_training());                            // restored after the error
  b.labels = from(std::vector<std::int64_t>{1, 2}, {2});  // two classes: 2 is out of range
  CHECK_THROWS_AS(nn::evaluate_classifier(*model, {b}), Error);
}
