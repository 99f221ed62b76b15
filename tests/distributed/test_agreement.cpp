// The start-up agreement on two ranks: equal settings pass; a value that differs, a name that one
// rank lacks, or a TrainingRun started with other steps, another seed or at another checkpoint
// step is the same Error on both ranks, naming the first difference with rank 0's value and
// rank 1's; the ranks stay in step for the collectives after it.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/random.h"
#include "nn/distributed/agreement.h"
#include "nn/distributed/distributed.h"
#include "nn/io/checkpoint.h"
#include "nn/linear.h"
#include "nn/optim.h"
#include "nn/train/run.h"

namespace tf = tinyformer;
namespace dist = tinyformer::distributed;
namespace nn = tinyformer::nn;
namespace fs = std::filesystem;

namespace {

// The Error every rank throws, with the difference that rank 1 reports.
std::string refusal(const std::string& difference) {
  return "the processes of this job were started differently: " + difference +
         "; start every process with the same flags and data";
}

// `a` on rank 0, `b` on rank 1.
std::string per_rank(const std::string& a, const std::string& b) {
  return dist::rank() == 0 ? a : b;
}

nn::ProgressOptions quiet() {
  static std::FILE* null = std::fopen("/dev/null", "w");
  return {.out = null, .terminal = false};
}

}  // namespace

TEST_CASE("check_agreement: equal settings pass") {
  dist::check_agreement({});
  dist::check_agreement({{"--lr", "0.001"}, {"--steps", "40"}, {"data.fingerprint", "1a2b3c4d"}});
  // Any bytes in names and values.
  dist::check_agreement({{std::string("a\0:b", 4), "12:x\n"}, {"", ""}});
  CHECK(dist::all_reduce_max(1) == 1);  // the ranks are in step
}

TEST_CASE("check_agreement: a difference is the same Error on every rank, naming it") {
  CHECK_THROWS_WITH_AS(dist::check_agreement({{"--steps", per_rank("40", "30")}}),
                       refusal("--steps is 40 on rank 0 but 30 on rank 1").c_str(), tf::Error);
  // The first name, in sorted order, that differs.
  CHECK_THROWS_WITH_AS(dist::check_agreement({{"--batch", "8"},
                                              {"--seed", per_rank("1", "2")},
                                              {"--steps", per_rank("40", "30")},
                                              {"data.bytes", per_rank("100", "200")}}),
                       refusal("--seed is 1 on rank 0 but 2 on rank 1").c_str(), tf::Error);
  // A name that one rank lacks.
  dist::Settings lacking = {{"--lr", "0.1"}};
  if (dist::rank() == 0) lacking["--k"] = "32";
  CHECK_THROWS_WITH_AS(dist::check_agreement(lacking),
                       refusal("--k is 32 on rank 0 but not set on rank 1").c_str(), tf::Error);
  dist::Settings extra = {{"--lr", "0.1"}};
  if (dist::rank() == 1) extra["--dropout"] = "0.1";
  CHECK_THROWS_WITH_AS(dist::check_agreement(extra),
                       refusal("--dropout is not set on rank 0 but 0.1 on rank 1").c_str(),
                       tf::Error);
  // Long values are cut, and stay on one line.
  const std::string long_value = std::string(100, 'x') + "\n";
  CHECK_THROWS_WITH_AS(
      dist::check_agreement({{"model", per_rank("short", long_value)}}),
      refusal("model is short on rank 0 but " + std::string(80, 'x') + "... on rank 1").c_str(),
      tf::Error);
  CHECK(dist::all_reduce_max(dist::rank()) == 1);  // still in step
}

TEST_CASE("TrainingRun: processes started with other steps or another seed are refused") {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  auto options = [&](std::int64_t steps) {
    return nn::TrainingRunOptions{.program = "test_agreement",
                                  .steps = steps,
                                  .progress = quiet(),
                                  .handle_interrupts = false};
  };
  tf::manual_seed(5);
  {
    nn::TrainingRun same(options(4), *model, optimizer, nullptr, {{"config.lr", "0.1"}});
    CHECK(same.running());
  }
  CHECK_THROWS_WITH_AS(
      nn::TrainingRun(options(dist::rank() == 0 ? 4 : 3), *model, optimizer, nullptr, {}),
      refusal("--steps is 4 on rank 0 but 3 on rank 1").c_str(), tf::Error);
  // A configuration key "config.<flag>" is named as the flag.
  CHECK_THROWS_WITH_AS(nn::TrainingRun(options(4), *model, optimizer, nullptr,
                                       {{"config.seed", per_rank("1", "2")}}),
                       refusal("--seed is 1 on rank 0 but 2 on rank 1").c_str(), tf::Error);
  // A loop that seeds its generator differently on each rank, though it records no seed.
  tf::manual_seed(dist::rank() == 0 ? 5 : 6);
  CHECK_THROWS_WITH_AS(nn::TrainingRun(options(4), *model, optimizer, nullptr, {}),
                       refusal("generator is 5 0 on rank 0 but 6 0 on rank 1").c_str(), tf::Error);
  tf::manual_seed(5);
}

TEST_CASE("TrainingRun: processes resumed at different steps are refused") {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  // Each rank's own file (as on machines that do not share a disk), at step 1 on rank 0 and 2 on
  // rank 1.
  const fs::path dir =
      fs::temp_directory_path() / ("tinyformer_agreement_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "run.safetensors").string();
  tf::manual_seed(5);
  nn::save_checkpoint(path, *model, &optimizer,
                      {{"program", "test_agreement"},
                       {"step", std::to_string(1 + dist::rank())},
                       {"generator", nn::generator_state()}});
  CHECK_THROWS_WITH_AS(nn::TrainingRun({.program = "test_agreement",
                                        .steps = 4,
                                        .checkpoint = path,
                                        .resume = true,
                                        .progress = quiet(),
                                        .handle_interrupts = false},
                                       *model, optimizer, nullptr, {}),
                       refusal("the step of --checkpoint is 1 on rank 0 but 2 on rank 1").c_str(),
                       tf::Error);
  fs::remove_all(dir);
}
