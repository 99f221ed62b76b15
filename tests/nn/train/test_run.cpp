// TrainingRun: a run stopped and resumed takes exactly the steps of an uninterrupted one; the
// log, the checkpoint's metadata, and the refusals of a checkpoint that does not fit.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("tinyformer_run_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A regression y = x w + noise on 24 examples, with dropout so that the generator's position
// matters, trained by a script shaped like train_mlm's main.
struct Script {
  static constexpr std::int64_t kExamples = 24;
  std::vector<float> x, y;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<nn::optim::AdamW> optimizer;
  std::unique_ptr<nn::data::Loader> loader;
  std::vector<double> losses;  // of every step this script took

  explicit Script(std::uint64_t seed = 7) {
    for (std::int64_t i = 0; i < kExamples; ++i) {
      float target = 0;
      for (std::int64_t j = 0; j < 4; ++j) {
        const float v = std::sin(static_cast<float>(i * 4 + j));
        x.push_back(v);
        target += static_cast<float>(j + 1) * v;
      }
      y.push_back(target);
    }
    manual_seed(seed);
    model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(4, 8));
    model->push_back(std::make_shared<nn::Dropout>(0.3));
    model->push_back(std::make_shared<nn::Linear>(8, 1));
    optimizer = std::make_unique<nn::optim::AdamW>(model->parameters(),
                                                   nn::optim::AdamWOptions{.lr = 1e-2});
    loader = std::make_unique<nn::data::Loader>(
        kExamples,
        nn::data::LoaderOptions{.batch_size = 5, .shuffle = true, .drop_last = true, .seed = 3});
  }

  void train(nn::TrainingRun& run, std::vector<double> (*evaluate)(Script&) = nullptr) {
    while (run.running()) {
      const nn::data::LoaderBatch order = loader->next();
      std::vector<float> bx, by;
      for (std::int64_t i : order.indices) {
        bx.insert(bx.end(), x.begin() + i * 4, x.begin() + i * 4 + 4);
        by.push_back(y[i]);
      }
      const auto b = static_cast<std::int64_t>(order.indices.size());
      const Tensor inputs = from(bx, {b, 4});
      const Tensor targets = from(by, {b, 1});
      run.start_step();
      const double lr = 1e-2 / (1.0 + static_cast<double>(run.step()));
      optimizer->set_lr(lr);
      const Tensor error = model->forward(inputs) - targets;
      const Tensor loss = sum(error * error) * (1.0 / static_cast<double>(b));
      optimizer->zero_grad();
      loss.backward();
      const double norm = nn::optim::clip_grad_norm(model->parameters(), 1.0);
      optimizer->step();
      losses.push_back(loss.item<double>());
      run.end_step(
          {.loss = losses.back(), .lr = lr, .grad_norm = norm, .tokens = b, .epoch = order.epoch});
      if (run.evaluation_due() && evaluate != nullptr) {
        run.pause();
        run.report_evaluation(evaluate(*this), "evaluated");
      }
      run.log_and_checkpoint();
    }
    run.finish();
  }
};

nn::ProgressOptions quiet() {
  static std::FILE* null = std::fopen("/dev/null", "w");
  return {.out = null, .terminal = false};
}

nn::TrainingRunOptions options(const TempDir& dir, const std::string& name) {
  return {.program = "test_run",
          .steps = 12,
          .checkpoint = dir.file(name + ".safetensors"),
          .checkpoint_every = 4,
          .eval_every = 4,
          .log = dir.file(name + ".csv"),
          .log_every = 1,
          .eval_columns = {"val"},
          .progress = quiet()};
}

std::vector<double> fixed_eval(Script&) {
  return {0.5};
}

// The log's rows without the last two columns (throughput and time differ between runs).
std::vector<std::string> log_rows(const std::string& path) {
  std::vector<std::string> rows;
  std::istringstream in(read_all(path));
  std::string line;
  while (std::getline(in, line)) {
    std::size_t cut = line.size();
    for (int i = 0; i < 2; ++i) cut = line.rfind(',', cut - 1);
    rows.push_back(line.substr(0, cut));
  }
  return rows;
}

}  // namespace

TEST_CASE("TrainingRun: a run stopped and resumed takes the steps of an uninterrupted one") {
  TempDir dir;
  Script whole;
  {
    nn::TrainingRun run(options(dir, "whole"), *whole.model, *whole.optimizer, whole.loader.get(),
                        {{"config.width", "8"}});
    whole.train(run, fixed_eval);
    CHECK_FALSE(run.stopped_early());
    CHECK(run.steps_this_run() == 12);
    CHECK(run.tokens_this_run() == 12 * 5);
    run.log_final({0.25});
  }
  REQUIRE(whole.losses.size() == 12);

  Script first;
  nn::TrainingRunOptions stop = options(dir, "parts");
  stop.stop_at = 5;
  {
    nn::TrainingRun run(stop, *first.model, *first.optimizer, first.loader.get(),
                        {{"config.width", "8"}});
    first.train(run, fixed_eval);
    CHECK(run.step() == 5);
    CHECK(run.stopped_early());
  }
  const nn::Metadata saved = nn::load_safetensors(stop.checkpoint).metadata;
  CHECK(saved.at("step") == "5");
  CHECK(saved.at("program") == "test_run");
  CHECK(saved.at("config.width") == "8");
  CHECK(saved.at("loader") == first.loader->state().to_string());
  CHECK(saved.at("generator") == nn::generator_state());

  // A fresh process: another initialisation, another generator position; the checkpoint
  // restores all of them.
  Script second(99);
  (void)randn({10});
  nn::TrainingRunOptions resume = options(dir, "parts");
  resume.resume = true;
  {
    nn::TrainingRun run(resume, *second.model, *second.optimizer, second.loader.get(),
                        {{"config.width", "8"}});
    CHECK(run.resumed());
    CHECK(run.step() == 5);
    second.train(run, fixed_eval);
    CHECK(run.step() == 12);
    CHECK(run.steps_this_run() == 7);
    run.log_final({0.25});
  }
  std::vector<double> parts = first.losses;
  parts.insert(parts.end(), second.losses.begin(), second.losses.end());
  REQUIRE(parts.size() == 12);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    CAPTURE(i);
    CHECK(parts[i] == whole.losses[i]);  // bit for bit: the same batches, dropout and updates
  }
  // The resumed log keeps the first run's rows and continues: the same rows as the whole run.
  const std::vector<std::string> rows = log_rows(dir.file("whole.csv"));
  CHECK(rows == log_rows(dir.file("parts.csv")));
  REQUIRE(rows.size() == 13);  // the header and steps 1..12
  CHECK(rows[0] == "step,epoch,loss,lr,grad_norm,val");
  CHECK(rows[4].ends_with(",0.5"));    // step 4 was evaluated
  CHECK(rows[5].ends_with(","));       // step 5 was not: an empty cell
  CHECK(rows[12].ends_with(",0.25"));  // the final evaluation
}

TEST_CASE("TrainingRun refuses a checkpoint that does not fit, and changes nothing") {
  TempDir dir;
  Script a;
  nn::TrainingRunOptions opts = options(dir, "a");
  opts.stop_at = 2;
  opts.log.clear();
  {
    nn::TrainingRun run(opts, *a.model, *a.optimizer, a.loader.get(), {{"config.width", "8"}});
    a.train(run);
  }
  const std::string before = read_all(opts.checkpoint);

  Script b;
  const Tensor weight = b.model->parameters()[0].clone();
  const nn::data::LoaderState loader_before = b.loader->state();
  opts.resume = true;
  opts.log = dir.file("b.csv");
  CHECK_THROWS_WITH_AS(nn::TrainingRun(opts, *b.model, *b.optimizer, b.loader.get(),
                                       {{"config.width", "16"}}, {"config.width"}),
                       doctest::Contains("another configuration: --width 8 there, 16 now"), Error);
  nn::TrainingRunOptions other = opts;
  other.program = "another_program";
  CHECK_THROWS_WITH_AS(
      nn::TrainingRun(other, *b.model, *b.optimizer, b.loader.get(), {{"config.width", "8"}}),
      doctest::Contains("was written by test_run, not another_program"), Error);
  nn::TrainingRunOptions missing = opts;
  missing.checkpoint = dir.file("none.safetensors");
  CHECK_THROWS_WITH_AS(
      nn::TrainingRun(missing, *b.model, *b.optimizer, b.loader.get(), {{"config.width", "8"}}),
      doctest::Contains("no checkpoint at"), Error);
  CHECK(b.loader->state() == loader_before);
  CHECK(b.model->parameters()[0].to_vector<float>() == weight.to_vector<float>());
  CHECK_FALSE(fs::exists(opts.log));
  CHECK(read_all(opts.checkpoint) == before);

  // The same configuration resumes; a key outside must_match that differs is only a note.
  nn::TrainingRun run(opts, *b.model, *b.optimizer, b.loader.get(), {{"config.width", "16"}});
  CHECK(run.step() == 2);
  CHECK(b.loader->state() == a.loader->state());
}

TEST_CASE("TrainingRun stops a diverged run with an Error") {
  TempDir dir;
  Script s;
  nn::TrainingRunOptions opts = options(dir, "nan");
  opts.checkpoint.clear();
  opts.log.clear();
  nn::TrainingRun run(opts, *s.model, *s.optimizer, s.loader.get(), {});
  run.start_step();
  CHECK_THROWS_WITH_AS(run.end_step({.loss = NAN, .lr = 1e-3}),
                       doctest::Contains("the loss became nan at step 1"), Error);
  run.start_step();
  CHECK_THROWS_WITH_AS(run.end_step({.loss = 1.0, .lr = 1e-3, .grad_norm = INFINITY}),
                       doctest::Contains("diverged"), Error);
  CHECK(run.step() == 0);
  run.start_step();
  run.end_step({.loss = 1.0, .lr = 1e-3});  // no gradient norm measured: not checked
  CHECK(run.step() == 1);
}

TEST_CASE("TrainingRun checks its options") {
  Script s;
  CHECK_THROWS_AS(nn::TrainingRun({.program = "p", .steps = 0, .progress = quiet()}, *s.model,
                                  *s.optimizer, nullptr, {}),
                  Error);
  CHECK_THROWS_AS(nn::TrainingRun({.program = "p", .steps = 4, .stop_at = 5, .progress = quiet()},
                                  *s.model, *s.optimizer, nullptr, {}),
                  Error);
  CHECK_THROWS_WITH_AS(
      nn::TrainingRun({.program = "p", .steps = 4, .resume = true, .progress = quiet()}, *s.model,
                      *s.optimizer, nullptr, {}),
      doctest::Contains("--checkpoint"), Error);
}

namespace {

// Rewrites the checkpoint at `path` with `changes` applied to its metadata, through the
// library's own reader and writer (so the checksums stay valid: only the metadata is wrong).
void edit_metadata(const std::string& path, const nn::Metadata& changes) {
  nn::SafetensorsFile file = nn::load_safetensors(path);
  for (const auto& [key, value] : changes) file.metadata[key] = value;
  nn::save_safetensors(path, file.tensors, file.metadata);
}

}  // namespace

TEST_CASE("parse_integer reads plain decimal integers in range and nothing else") {
  std::int64_t v = 42;
  CHECK(nn::parse_integer("0", 0, 10, v));
  CHECK(v == 0);
  CHECK(nn::parse_integer("-5", -10, 10, v));
  CHECK(v == -5);
  CHECK(nn::parse_integer("9223372036854775807", 0, INT64_MAX, v));
  CHECK(v == INT64_MAX);
  v = 7;
  for (const char* bad : {"", "abc", "1e3", "+5", " 5", "5 ", "-", "0x10", "5.0", "11", "-11",
                          "99999999999999999999", "1\n"}) {
    CAPTURE(bad);
    CHECK_FALSE(nn::parse_integer(bad, -10, 10, v));
    CHECK(v == 7);  // unchanged
  }
}

TEST_CASE("TrainingRun checks the step, optimizer counts and generator state of a checkpoint") {
  TempDir dir;
  Script a;
  nn::TrainingRunOptions opts = options(dir, "a");
  opts.stop_at = 4;
  opts.log.clear();
  {
    nn::TrainingRun run(opts, *a.model, *a.optimizer, a.loader.get(), {});
    a.train(run);
  }
  const std::string good = dir.file("good.safetensors");
  fs::copy_file(opts.checkpoint, good);
  opts.resume = true;

  auto expect_refused = [&](const nn::Metadata& changes, const std::string& needle) {
    CAPTURE(needle);
    fs::copy_file(good, opts.checkpoint, fs::copy_options::overwrite_existing);
    edit_metadata(opts.checkpoint, changes);
    Script b;
    const std::vector<float> weight = b.model->parameters()[0].to_vector<float>();
    const nn::data::LoaderState loader_before = b.loader->state();
    const std::string generator_before = nn::generator_state();
    CHECK_THROWS_WITH_AS(nn::TrainingRun(opts, *b.model, *b.optimizer, b.loader.get(), {}),
                         doctest::Contains(needle.c_str()), Error);
    CHECK(nn::generator_state() == generator_before);
    CHECK(b.model->parameters()[0].to_vector<float>() == weight);
    CHECK(b.optimizer->step_count(0) == 0);
    CHECK(b.loader->state() == loader_before);
  };
  for (const char* step : {"abc", "1e3", "-5", "+4", " 4", "4 ", "", "9223372036854775807"}) {
    expect_refused({{"step", step}}, "unreadable step");
  }
  expect_refused({{"step", "99999999999"}}, "beyond --steps 12");
  expect_refused({{"step", "3"}}, "\"optim.state.0.step\" is 4 but the run is at step 3");
  expect_refused({{"step", "5"}}, "the run is at step 5 but its optimizer state has taken 4");
  for (const char* state : {"-1 -1", "1 2 3", "1  2", "7", "", "1 -2", "1 4611686018427387905",
                            "18446744073709551616 0"}) {
    expect_refused({{"generator", state}}, "unreadable generator state");
  }
  expect_refused({{"loader", "epoch=x"}}, "LoaderState::parse");

  // An optimizer count past the run's step, INT64_MAX included.
  {
    fs::copy_file(good, opts.checkpoint, fs::copy_options::overwrite_existing);
    nn::SafetensorsFile file = nn::load_safetensors(opts.checkpoint);
    for (auto& [name, t] : file.tensors) {
      if (name == "optim.state.1.step")
        t = scalar_tensor(0.0, {.dtype = kInt64}) + static_cast<double>(INT64_MAX);
    }
    nn::save_safetensors(opts.checkpoint, file.tensors, file.metadata);
    Script b;
    CHECK_THROWS_WITH_AS(nn::TrainingRun(opts, *b.model, *b.optimizer, b.loader.get(), {}),
                         doctest::Contains("\"optim.state.1.step\" is 9223372036854775807"), Error);
  }
  // The untouched checkpoint resumes.
  fs::copy_file(good, opts.checkpoint, fs::copy_options::overwrite_existing);
  Script c;
  nn::TrainingRun run(opts, *c.model, *c.optimizer, c.loader.get(), {});
  CHECK(run.step() == 4);
}

TEST_CASE("TrainingRun refuses a checkpoint path that is not a regular file before any work") {
  TempDir dir;
  Script s;
  auto expect_refused = [&](const std::string& path, bool resume, const std::string& needle) {
    CAPTURE(path);
    nn::TrainingRunOptions opts = options(dir, "x");
    opts.checkpoint = path;
    opts.resume = resume;
    CHECK_THROWS_WITH_AS(nn::TrainingRun(opts, *s.model, *s.optimizer, s.loader.get(), {}),
                         doctest::Contains(needle.c_str()), Error);
    CHECK_FALSE(fs::exists(opts.log));  // nothing written
  };
  fs::create_directories(dir.file("a_directory"));
  expect_refused(dir.file("a_directory"), false, "not a regular file but a directory");
  expect_refused(dir.file("a_directory"), true, "not a regular file but a directory");
  // A FIFO: opening it to read would wait for a writer forever.
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  expect_refused(dir.file("fifo"), true, "not a regular file but a FIFO");
  expect_refused(dir.file("fifo"), false, "not a regular file but a FIFO");
  CHECK(fs::is_fifo(dir.file("fifo")));
  fs::create_symlink("/dev/null", dir.file("null_link"));
  expect_refused(dir.file("null_link"), false, "a character device");
  expect_refused(dir.file("no/such/dir/run.safetensors"), false, "cannot write to the directory");
}

TEST_CASE("TrainingRun: SIGINT or SIGTERM ends the run after the step with a checkpoint") {
  TempDir dir;
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  REQUIRE(::sigaction(SIGINT, &default_action, &old_int) == 0);
  REQUIRE(::sigaction(SIGTERM, &default_action, &old_term) == 0);

  Script whole;
  nn::TrainingRunOptions whole_opts = options(dir, "whole");
  whole_opts.log.clear();
  {
    nn::TrainingRun run(whole_opts, *whole.model, *whole.optimizer, whole.loader.get(), {});
    whole.train(run);
  }

  for (int signal_number : {SIGINT, SIGTERM}) {
    CAPTURE(signal_number);
    nn::TrainingRunOptions opts = options(dir, "parts");
    opts.log.clear();
    opts.checkpoint_every = 0;
    fs::remove(opts.checkpoint);
    Script first;
    static int pending;
    pending = signal_number;
    {
      nn::TrainingRun run(opts, *first.model, *first.optimizer, first.loader.get(), {});
      // The signal arrives during step 4 (in its evaluation): the step completes, the loop ends.
      first.train(run, [](Script&) {
        ::raise(pending);
        return std::vector<double>{0.5};
      });
      CHECK(run.interrupted() == signal_number);
      CHECK(run.exit_status() == 128 + signal_number);
      CHECK(run.step() == 4);
      CHECK(run.stopped_early());
      CHECK_FALSE(run.running());
    }
    CHECK(nn::load_safetensors(opts.checkpoint).metadata.at("step") == "4");
    // The handlers are the ones from before the run again.
    struct sigaction now {};
    REQUIRE(::sigaction(signal_number, nullptr, &now) == 0);
    CHECK(bool(now.sa_handler == SIG_DFL));

    Script second(99);
    opts.resume = true;
    {
      nn::TrainingRun run(opts, *second.model, *second.optimizer, second.loader.get(), {});
      CHECK(run.interrupted() == 0);
      second.train(run);
      CHECK(run.step() == 12);
    }
    std::vector<double> parts = first.losses;
    parts.insert(parts.end(), second.losses.begin(), second.losses.end());
    CHECK(parts == whole.losses);  // bit for bit
  }

  // A second signal does not wait: the process ends at once (in a child, which only raises).
  {
    nn::TrainingRunOptions opts = options(dir, "twice");
    opts.log.clear();
    nn::TrainingRun run(opts, *whole.model, *whole.optimizer, nullptr, {});
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::raise(SIGINT);
      ::raise(SIGINT);
      ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGINT);
    CHECK(run.interrupted() == 0);  // the parent saw nothing
  }
  // A signal ignored when the run starts stays ignored.
  {
    struct sigaction ignore = default_action;
    ignore.sa_handler = SIG_IGN;
    REQUIRE(::sigaction(SIGINT, &ignore, nullptr) == 0);
    nn::TrainingRunOptions opts = options(dir, "ignored");
    opts.log.clear();
    nn::TrainingRun run(opts, *whole.model, *whole.optimizer, nullptr, {});
    ::raise(SIGINT);
    CHECK(run.interrupted() == 0);
    CHECK(run.running());
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
}

TEST_CASE("TrainingRun: a fresh run refuses an existing checkpoint unless told to overwrite it") {
  TempDir dir;
  Script a;
  nn::TrainingRunOptions opts = options(dir, "a");
  opts.stop_at = 2;
  opts.log.clear();
  {
    nn::TrainingRun run(opts, *a.model, *a.optimizer, a.loader.get(), {});
    a.train(run);
  }
  const std::string before = read_all(opts.checkpoint);
  Script b;
  CHECK_THROWS_WITH_AS(nn::TrainingRun(opts, *b.model, *b.optimizer, b.loader.get(), {}),
                       doctest::Contains(("--checkpoint " + opts.checkpoint +
                                          ": a checkpoint is there already; pass --resume to "
                                          "continue its run, --overwrite to start over")
                                             .c_str()),
                       Error);
  CHECK(read_all(opts.checkpoint) == before);
  // Through a symbolic link too.
  nn::TrainingRunOptions linked = opts;
  linked.checkpoint = dir.file("latest.safetensors");
  fs::create_symlink(opts.checkpoint, linked.checkpoint);
  CHECK_THROWS_WITH_AS(nn::TrainingRun(linked, *b.model, *b.optimizer, b.loader.get(), {}),
                       doctest::Contains("a checkpoint is there already"), Error);

  opts.overwrite = true;
  opts.stop_at = 3;
  {
    nn::TrainingRun run(opts, *b.model, *b.optimizer, b.loader.get(), {});
    CHECK_FALSE(run.resumed());
    CHECK(run.step() == 0);
    b.train(run);
  }
  CHECK(nn::load_safetensors(opts.checkpoint).metadata.at("step") == "3");
}

TEST_CASE("TrainingRun refuses outputs that are its inputs or each other, before any work") {
  TempDir dir;
  Script s;
  const std::string data = dir.file("d.txt");
  { std::ofstream(data) << "the training data\n"; }
  auto refused = [&](nn::TrainingRunOptions opts, const std::string& needle) {
    CAPTURE(needle);
    CHECK_THROWS_WITH_AS(nn::TrainingRun(opts, *s.model, *s.optimizer, s.loader.get(), {}),
                         doctest::Contains(needle.c_str()), Error);
    CHECK(read_all(data) == "the training data\n");
  };
  nn::TrainingRunOptions opts = options(dir, "run");
  opts.inputs = {{"--data", data}};
  nn::TrainingRunOptions log_on_data = opts;
  log_on_data.checkpoint.clear();
  log_on_data.log = data;
  refused(log_on_data,
          "--log " + data + " is the same file as --data " + data + ": writing it would destroy");
  nn::TrainingRunOptions checkpoint_on_data = opts;
  checkpoint_on_data.checkpoint = dir.file("./d.txt");
  checkpoint_on_data.overwrite = true;  // overwriting a checkpoint never means the data
  refused(checkpoint_on_data,
          "--checkpoint " + dir.file("./d.txt") + " is the same file as --data");
  nn::TrainingRunOptions plot_on_data = opts;
  plot_on_data.outputs = {{"--plot", data}};
  refused(plot_on_data, "--plot " + data + " is the same file as --data");
  nn::TrainingRunOptions log_on_checkpoint = opts;
  log_on_checkpoint.log = opts.checkpoint;
  refused(log_on_checkpoint, "are the same file: one would overwrite the other");
  CHECK_FALSE(fs::exists(opts.checkpoint));

  // A FIFO at the log or the plot is refused and stays a FIFO.
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  nn::TrainingRunOptions log_on_fifo = opts;
  log_on_fifo.log = dir.file("fifo");
  refused(log_on_fifo, "--log " + dir.file("fifo") + ": not a regular file but a FIFO");
  nn::TrainingRunOptions plot_on_fifo = opts;
  plot_on_fifo.outputs = {{"--plot", dir.file("fifo")}};
  refused(plot_on_fifo, "--plot " + dir.file("fifo") + ": not a regular file but a FIFO");
  CHECK(fs::is_fifo(dir.file("fifo")));

  // The resumed checkpoint is read and rewritten by the same run: not a conflict.
  opts.stop_at = 2;
  {
    nn::TrainingRun run(opts, *s.model, *s.optimizer, s.loader.get(), {});
    s.train(run);
  }
  Script t;
  opts.resume = true;
  opts.stop_at = 0;
  nn::TrainingRun run(opts, *t.model, *t.optimizer, t.loader.get(), {});
  CHECK(run.step() == 2);
}

TEST_CASE("TrainingRun: a checkpoint of mode 600 keeps it when a resumed run saves it") {
  TempDir dir;
  Script a;
  nn::TrainingRunOptions opts = options(dir, "private");
  opts.stop_at = 4;
  {
    nn::TrainingRun run(opts, *a.model, *a.optimizer, a.loader.get(), {});
    a.train(run);
  }
  REQUIRE(::chmod(opts.checkpoint.c_str(), 0600) == 0);
  REQUIRE(::chmod(opts.log.c_str(), 0600) == 0);
  Script b;
  opts.resume = true;
  opts.stop_at = 0;
  {
    nn::TrainingRun run(opts, *b.model, *b.optimizer, b.loader.get(), {});
    b.train(run);
  }
  CHECK(nn::load_safetensors(opts.checkpoint).metadata.at("step") == "12");
  struct stat st {};
  REQUIRE(::stat(opts.checkpoint.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  REQUIRE(::stat(opts.log.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
}
