// train_classifier: a sequence classifier on generated balanced brackets, with padding, AdamW and
// a warm-up schedule: the classifier-first program of docs/training.md, its loop in main.
//
//   train_classifier [STEPS [SEED [full|linformer [POSITION_STD]]]]   (1500, 1, full, library's)
#include <cstdio>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
using nn::data::BracketVocab;

int main(int argc, char** argv) {
  try {
    const std::int64_t steps = argc > 1 ? std::stoll(argv[1]) : 1500;
    const std::uint64_t seed = argc > 2 ? std::stoull(argv[2]) : 1;
    const std::string attention = argc > 3 ? argv[3] : "full";
    nn::InitConfig init;  // the library's defaults, unless a position std is given
    if (argc > 4) init.position_std = std::stod(argv[4]);
    TF_CHECK(steps > 0 && (attention == "full" || attention == "linformer"),
             "usage: train_classifier [STEPS [SEED [full|linformer [POSITION_STD]]]]");

    // 2 to 16 brackets of 3 kinds, half of them balanced; the same data for every seed.
    const auto train = nn::data::balanced_brackets(20'000, 16, /*seed=*/1000);
    const auto test = nn::data::balanced_brackets(2'000, 16, /*seed=*/2000);
    std::vector<nn::data::ClassifierBatch> test_batches;
    for (std::int64_t first = 0; first < 2'000; first += 200) {
      std::vector<std::int64_t> indices(200);
      std::iota(indices.begin(), indices.end(), first);
      test_batches.push_back(nn::data::bracket_batch(test, indices));
    }

    // No dropout: 20,000 generated sequences, seen about twice, leave nothing to overfit.
    nn::EncoderConfig config{
        .layers = 2, .d_model = 64, .heads = 4, .d_ff = 128, .max_seq_len = 16, .dropout = 0.0};
    if (attention == "linformer") {  // mean pooling to k = 8 rows, over the real positions
      config.attention = nn::AttentionKind::linformer;
      config.linformer = {.k = 8, .projection = nn::ProjectionKind::mean};
    }
    manual_seed(seed);
    auto model = std::make_shared<nn::SequenceClassifier>(
        config, BracketVocab::vocab_size, BracketVocab::num_classes, nn::Pooling::mean,
        nn::PositionEncoding::learned, init);
    nn::optim::AdamW optimizer(nn::optim::decay_groups(*model, 0.01),
                               {.lr = 1e-3, .weight_decay = 0.01});
    const nn::optim::WarmupCosine schedule(1e-3, /*warmup_steps=*/100, steps, 1e-4);
    nn::data::Loader loader(20'000, {.batch_size = 32, .drop_last = true, .seed = seed});

    for (std::int64_t step = 0; step < steps; ++step) {
      const nn::data::ClassifierBatch b = nn::data::bracket_batch(train, loader.next().indices);
      optimizer.set_lr(schedule.lr_at(step));
      const Tensor loss = cross_entropy(model->forward(b.tokens, b.padding_mask), b.labels);
      optimizer.zero_grad();
      loss.backward();
      nn::optim::clip_grad_norm(model->parameters(), 1.0);
      optimizer.step();
      if ((step + 1) % 250 == 0)
        std::printf("step %lld: loss %.4f\n", static_cast<long long>(step + 1),
                    loss.item<double>());
    }
    const nn::ClassifierScore score = nn::evaluate_classifier(*model, test_batches);
    std::printf("test accuracy %.2f%% (loss %.4f)\n", 100 * score.accuracy, score.loss);
    return 0;
  } catch (...) {
    return nn::report_error("train_classifier", std::current_exception(), "");
  }
}
