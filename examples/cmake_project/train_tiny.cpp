// An outside training program built against the installed package: a small masked-LM trained on
// generated sentences with the library's training helpers (nn::TrainingRun: progress bar, CSV
// log, checkpoints that carry the model's description), then the checkpoint reopened with
// nn::load_model, whose validation loss must equal the one measured in training. Exits non-zero
// when anything differs.
//
//   train_tiny [DIR] [--steps N]    # writes (or replaces) DIR/tiny.safetensors and DIR/tiny.csv
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
using nn::data::ByteTokenizer;

namespace {

// A few hundred varied sentences.
std::string sentences() {
  const char* subjects[] = {"the cat", "a dog", "my friend", "the old man", "every child"};
  const char* verbs[] = {"sees", "likes", "finds", "carries", "paints", "remembers"};
  const char* objects[] = {"the red ball", "a small house", "the river", "an apple", "a book"};
  std::string text;
  for (int i = 0; i < 600; ++i) {
    text += std::string(subjects[i % 5]) + " " + verbs[i / 5 % 6] + " " + objects[i / 30 % 5] +
            " on day " + std::to_string(i) + ".\n";
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string dir = ".";
    std::int64_t steps = 20;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--steps" && i + 1 < argc) {
        const std::string value = argv[++i];
        std::string canonical;
        if (const std::string bad = nn::flags::integer(1)(value, &canonical); !bad.empty()) {
          throw nn::UsageError("--steps: " + bad);
        }
        steps = std::stoll(canonical);
      } else {
        dir = arg;
      }
    }
    const std::string checkpoint = dir + "/tiny.safetensors", log = dir + "/tiny.csv";
    nn::check_writable(checkpoint, "the checkpoint");
    const Device device = nn::usable_device("cpu");

    // --- Data: byte tokens cut into sequences; a fixed validation set. ---
    const std::int64_t seq_len = 32, batch = 8;
    const nn::data::TextSplit split = nn::data::split_text(sentences(), 0.1);
    const nn::data::TokenChunks train(ByteTokenizer::encode(split.train), seq_len);
    const nn::data::TokenChunks val(ByteTokenizer::encode(split.validation), seq_len);
    const nn::data::MlmConfig mlm;
    const nn::MlmValidationSet validation = nn::mlm_validation_set(val, 16, batch, mlm, 1);

    // --- Model, optimizer, schedule, data order, and the run around the loop. ---
    const nn::ModelDescription description{
        .kind = nn::ModelKind::masked_lm,
        .encoder = {.layers = 1,
                    .d_model = 32,
                    .heads = 2,
                    .d_ff = 64,
                    .max_seq_len = seq_len,
                    .attention = nn::AttentionKind::linformer,
                    .linformer = {.k = 8}},
        .vocabulary = {.size = ByteTokenizer::vocab_size, .tokenizer = ByteTokenizer::name}};
    manual_seed(1);
    auto model = nn::make_model<nn::MaskedLM>(description);
    nn::optim::AdamW optimizer(nn::optim::decay_groups(*model, 0.01),
                               {.lr = 3e-3, .weight_decay = 0.01});
    const nn::optim::WarmupCosine schedule(3e-3, 4, steps, 3e-4);
    nn::data::Loader loader(train.size(), {.batch_size = batch, .drop_last = true, .seed = 1});
    nn::TrainingRun run({.program = "train_tiny",
                         .steps = steps,
                         .checkpoint = checkpoint,
                         .overwrite = true,  // every run starts over: a fixed demonstration
                         .eval_every = 10,
                         .log = log,
                         .log_every = 5,
                         .eval_columns = {"val_loss"},
                         .model = description},
                        *model, optimizer, &loader, {{"config.seq-len", std::to_string(seq_len)}});

    const std::vector<Tensor> params = model->parameters();
    while (run.running()) {
      const nn::data::LoaderBatch order = loader.next();
      const nn::data::MlmBatch b = nn::data::mlm_batch(train, order.indices, mlm, 1, order.epoch);
      run.start_step();
      const double lr = schedule.lr_at(run.step());
      optimizer.set_lr(lr);
      const Tensor logits = model->forward(b.tokens);  // [B, n, V]
      const Tensor loss = cross_entropy(logits.reshape({-1, ByteTokenizer::vocab_size}),
                                        b.labels.reshape({-1}), mlm.ignore_index);
      optimizer.zero_grad();
      loss.backward();
      const double norm = nn::optim::clip_grad_norm(params, 1.0);
      optimizer.step();
      run.end_step({.loss = loss.item<double>(),
                    .lr = lr,
                    .grad_norm = norm,
                    .tokens = b.tokens.numel(),
                    .epoch = order.epoch});
      if (run.evaluation_due()) {
        run.pause();
        const double val_loss = nn::mlm_validation_loss(*model, validation, device);
        run.report_evaluation({val_loss}, "validation loss " + std::to_string(val_loss));
      }
      run.log_and_checkpoint();
    }
    run.finish();
    if (run.interrupted()) return run.exit_status();
    const double trained = nn::mlm_validation_loss(*model, validation, device);
    run.log_final({trained});

    // --- Another program would do this: the model from the checkpoint alone. ---
    const nn::LoadedModel loaded = nn::load_model(checkpoint);
    const double reloaded = nn::mlm_validation_loss(*loaded.as<nn::MaskedLM>(), validation, device);
    std::printf("validation loss %.9g after training, %.9g from %s (%s, k=%lld, step %s)\n",
                trained, reloaded, checkpoint.c_str(), nn::model_kind_name(loaded.kind()),
                static_cast<long long>(loaded.config().linformer.k),
                loaded.metadata.at("step").c_str());
    if (!(std::abs(trained - reloaded) <= 1e-6 * std::abs(trained))) {
      std::printf("the reloaded model's validation loss differs\n");
      return 1;
    }
    std::ifstream csv(log);
    std::string header;
    std::getline(csv, header);
    if (header.rfind("step,epoch,loss,lr,grad_norm,val_loss,", 0) != 0) {
      std::printf("unexpected CSV log header: %s\n", header.c_str());
      return 1;
    }
    return 0;
  } catch (...) {
    return nn::report_error("train_tiny", std::current_exception());
  }
}
