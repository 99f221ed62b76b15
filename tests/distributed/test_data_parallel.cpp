// DistributedDataParallel on two ranks against one process with the same global batch: the
// same parameters after several optimizer steps (float64 to rounding, float32 within its
// reduction-order tolerance), gradient accumulation under no_sync, parameters that get no
// gradient on some ranks, all-reduces that start while backward still runs, and models that
// differ across ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/hooks.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/random.h"
#include "nn/distributed/data_parallel.h"
#include "nn/distributed/distributed.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/optim.h"

namespace tf = tinyformer;
namespace dist = tinyformer::distributed;
namespace nn = tinyformer::nn;
using tf::Tensor;

namespace {

// in -> hidden -> ... -> out, tanh between layers.
struct Mlp : nn::Module {
  std::vector<std::shared_ptr<nn::Linear>> layers;
  explicit Mlp(const std::vector<std::int64_t>& sizes) {
    for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
      layers.push_back(register_module("fc" + std::to_string(i),
                                       std::make_shared<nn::Linear>(sizes[i], sizes[i + 1])));
    }
  }
  Tensor forward(Tensor x) const {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      x = layers[i]->forward(x);
      if (i + 1 < layers.size()) x = tf::tanh(x);
    }
    return x;
  }
};

// The job's global batch: the same on every rank (seeded), each rank takes its rows.
struct Batch {
  Tensor x, y;
};
Batch global_batch(std::int64_t n, std::int64_t in, std::int64_t out, tf::DType dtype,
                   std::uint64_t seed) {
  tf::manual_seed(seed);
  return {tf::randn({n, in}, {.dtype = dtype}), tf::randn({n, out}, {.dtype = dtype})};
}
Batch rows(const Batch& b, std::int64_t start, std::int64_t count) {
  return {b.x.narrow(0, start, count), b.y.narrow(0, start, count)};
}

Tensor mse(const Tensor& pred, const Tensor& target) {
  Tensor d = pred - target;
  return (d * d).mean();
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = tf::raw::to_dtype(a.contiguous(), tf::DType::float64).to_vector<double>();
  const auto vb = tf::raw::to_dtype(b.contiguous(), tf::DType::float64).to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double worst = 0;
  for (std::size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
  return worst;
}

// `steps` optimizer steps (AdamW, or SGD with momentum, which unlike Adam would also see a
// gradient of the wrong scale) of a data-parallel model on each rank's share of a global batch of
// `global` rows, against the same steps of a single-process copy on the whole batch (which every
// rank runs itself). `micro` > 1 splits each rank's share into micro-batches accumulated under
// no_sync. Returns the largest parameter difference.
std::unique_ptr<nn::optim::Optimizer> make_optimizer(const nn::Module& m, bool adam) {
  if (adam)
    return std::make_unique<nn::optim::AdamW>(m.parameters(), nn::optim::AdamWOptions{.lr = 0.05});
  return std::make_unique<nn::optim::SGD>(m.parameters(),
                                          nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

double ddp_vs_single(tf::DType dtype, std::int64_t global, std::int64_t micro, int steps,
                     double bucket_cap_mb, bool adam) {
  const std::vector<std::int64_t> sizes = {6, 16, 16, 3};
  // Ranks start from different values: the wrapper must broadcast rank 0's.
  tf::manual_seed(100 + static_cast<std::uint64_t>(dist::rank()));
  auto model = std::make_shared<Mlp>(sizes);
  model->to(dtype);
  dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = bucket_cap_mb});
  auto reference = std::make_shared<Mlp>(sizes);
  reference->to(dtype);
  reference->load_state_dict(model->state_dict());

  auto opt = make_optimizer(*model, adam);
  auto ref_opt = make_optimizer(*reference, adam);
  const std::int64_t local = global / dist::world_size();
  const std::int64_t micro_rows = local / micro;
  for (int step = 0; step < steps; ++step) {
    const Batch batch = global_batch(global, 6, 3, dtype, 7 + static_cast<std::uint64_t>(step));
    // One process, whole batch.
    ref_opt->zero_grad();
    mse(reference->forward(batch.x), batch.y).backward();
    ref_opt->step();
    // This rank's rows, in micro-batches; the last one synchronises.
    opt->zero_grad();
    for (std::int64_t m = 0; m < micro; ++m) {
      const Batch part = rows(batch, dist::rank() * local + m * micro_rows, micro_rows);
      Tensor loss = mse(model->forward(part.x), part.y) * (1.0 / static_cast<double>(micro));
      if (m + 1 < micro) {
        auto no_sync = ddp.no_sync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    opt->step();
  }
  CHECK(ddp.stats().syncs == steps);
  double worst = 0;
  const auto params = model->parameters();
  const auto ref_params = reference->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    worst = std::max(worst, max_abs_diff(params[i], ref_params[i]));
    // Every rank holds the same values, bit for bit.
    Tensor from_root = params[i].detach().clone();
    dist::broadcast(from_root, 0);
    CHECK(max_abs_diff(from_root, params[i]) == 0.0);
  }
  return worst;
}

}  // namespace

TEST_CASE("DistributedDataParallel: two ranks equal one process with the same global batch") {
  SUBCASE("float64, AdamW, one bucket") {
    CHECK(ddp_vs_single(tf::DType::float64, 8, 1, 4, 25.0, true) < 1e-13);
  }
  SUBCASE("float64, SGD, a bucket per parameter") {
    CHECK(ddp_vs_single(tf::DType::float64, 8, 1, 4, 1e-6, false) < 1e-13);
  }
  SUBCASE("float32, SGD and AdamW") {
    CHECK(ddp_vs_single(tf::DType::float32, 8, 1, 4, 0.001, false) < 2e-5);
    CHECK(ddp_vs_single(tf::DType::float32, 8, 1, 4, 0.001, true) < 2e-5);
  }
  SUBCASE("gradient accumulation: two micro-batches per rank, the first under no_sync") {
    CHECK(ddp_vs_single(tf::DType::float64, 8, 2, 3, 0.001, false) < 1e-13);
    CHECK(ddp_vs_single(tf::DType::float64, 8, 2, 3, 0.001, true) < 1e-13);
  }
}

TEST_CASE("DistributedDataParallel: the check can fail (a rank that trains on other rows)") {
  // Without the all-reduce each rank would follow its own rows: the reference comparison above
  // would see it. Here rank 1 skips synchronisation, and its parameters leave rank 0's.
  tf::manual_seed(5);
  auto model = std::make_shared<Mlp>(std::vector<std::int64_t>{4, 8, 2});
  model->to(tf::DType::float64);
  dist::DistributedDataParallel ddp(model);
  nn::optim::SGD opt(model->parameters(), {.lr = 0.1});
  const Batch batch = global_batch(4, 4, 2, tf::DType::float64, 3);
  const Batch part = rows(batch, dist::rank() * 2, 2);
  {
    auto no_sync = ddp.no_sync();
    CHECK_FALSE(ddp.sync_enabled());
    mse(model->forward(part.x), part.y).backward();
  }
  CHECK(ddp.sync_enabled());
  CHECK(ddp.stats().syncs == 0);
  opt.step();
  Tensor w = model->layers[0]->weight.detach().clone();
  Tensor root = w.clone();
  dist::broadcast(root, 0);
  if (dist::rank() == 1) CHECK(max_abs_diff(root, w) > 1e-6);
}

TEST_CASE("DistributedDataParallel: parameters without a gradient on some ranks") {
  // head_b is used on rank 1 only; head_c on no rank. No hang; head_b's gradient is rank 1's
  // divided by two on both ranks; head_c keeps no gradient anywhere, as in one process.
  struct TwoHeads : nn::Module {
    std::shared_ptr<nn::Linear> body, head_a, head_b, head_c;
    TwoHeads() {
      body = register_module("body", std::make_shared<nn::Linear>(3, 4));
      head_a = register_module("head_a", std::make_shared<nn::Linear>(4, 1));
      head_b = register_module("head_b", std::make_shared<nn::Linear>(4, 1));
      head_c = register_module("head_c", std::make_shared<nn::Linear>(4, 1));
    }
  };
  tf::manual_seed(11);
  auto model = std::make_shared<TwoHeads>();
  model->to(tf::DType::float64);
  for (double cap : {25.0, 1e-6}) {
    CAPTURE(cap);
    dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = cap});
    model->zero_grad();
    const Batch batch = global_batch(2, 3, 1, tf::DType::float64, 9);
    Tensor h = tf::tanh(model->body->forward(batch.x));
    Tensor loss = model->head_a->forward(h).sum();
    Tensor b_local;
    if (dist::rank() == 1) {
      Tensor b_out = model->head_b->forward(h).sum();
      loss = loss + b_out;
      // What rank 1's own gradient of head_b's weight is: h summed over rows.
      b_local = h.detach().sum({0}, true);
    }
    loss.backward();
    CHECK(ddp.stats().syncs == 1);
    REQUIRE(model->head_b->weight.grad().defined());
    Tensor expected = tf::zeros({1, 4}, {.dtype = tf::DType::float64});
    if (dist::rank() == 1) expected = b_local * 0.5;
    dist::broadcast(expected, 1);
    CHECK(max_abs_diff(model->head_b->weight.grad(), expected) < 1e-15);
    CHECK_FALSE(model->head_c->weight.grad().defined());
    CHECK_FALSE(model->head_c->bias.grad().defined());
  }
}

TEST_CASE("DistributedDataParallel: buckets start their all-reduce while backward still runs") {
  tf::manual_seed(21);
  auto model = std::make_shared<Mlp>(std::vector<std::int64_t>{8, 32, 32, 32, 32, 4});
  const Batch batch = global_batch(16, 8, 4, tf::DType::float32, 4);
  const Batch part = rows(batch, dist::rank() * 8, 8);
  std::int64_t launched_when_first_layer_ready = -1;
  {
    // A bucket per parameter, last layer's first.
    dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = 1e-6});
    const auto buckets = ddp.bucket_parameters();
    REQUIRE(buckets.size() == 10);
    CHECK(buckets.front() == std::vector<std::string>{"fc4.bias"});
    CHECK(buckets.back() == std::vector<std::string>{"fc0.weight"});
    CHECK(ddp.stats().buckets == 10);
    CHECK(ddp.stats().bytes_per_sync == 4 * model->num_parameters());

    // When the first layer's weight gradient becomes final, backward has not finished (that
    // gradient is among the last it computes), and the later layers' buckets must already be on
    // the wire.
    auto probe = tf::autograd::register_post_accumulate_grad_hook(
        model->layers[0]->weight, [&](const Tensor&) {
          launched_when_first_layer_ready = ddp.stats().last_launched_in_backward;
        });
    mse(model->forward(part.x), part.y).backward();
    CHECK(launched_when_first_layer_ready >= 8);
    const auto& stats = ddp.stats();
    CHECK(stats.last_launched_in_backward + stats.last_launched_at_end == 10);
    CHECK(stats.last_launched_in_backward >= 9);
    CHECK(stats.last_first_launch_seconds <= stats.last_backward_seconds);
    CHECK(stats.last_backward_seconds <= stats.last_sync_seconds);
    CHECK(stats.last_wait_seconds >= 0);
  }

  // One big bucket cannot start before the first layer's gradients are done: when the second
  // layer's weight is ready, nothing is on the wire yet.
  dist::DistributedDataParallel one_bucket(model, {.bucket_cap_mb = 25});
  model->zero_grad();
  std::int64_t launched_when_second_layer_ready = -1;
  auto probe2 = tf::autograd::register_post_accumulate_grad_hook(
      model->layers[1]->weight, [&](const Tensor&) {
        launched_when_second_layer_ready = one_bucket.stats().last_launched_in_backward;
      });
  mse(model->forward(part.x), part.y).backward();
  CHECK(launched_when_second_layer_ready == 0);
  CHECK(one_bucket.stats().last_launched_in_backward + one_bucket.stats().last_launched_at_end ==
        1);
}

TEST_CASE("DistributedDataParallel: models that differ across ranks are refused at start") {
  // Rank 1's hidden layer is wider: both ranks throw, rank 1 naming the difference.
  const std::int64_t hidden = dist::rank() == 1 ? 9 : 8;
  auto model = std::make_shared<Mlp>(std::vector<std::int64_t>{4, hidden, 2});
  if (dist::rank() == 1) {
    CHECK_THROWS_WITH_AS(dist::DistributedDataParallel{model},
                         "DistributedDataParallel: the model differs across ranks: rank 1 has "
                         "parameter 'fc0.weight' [9, 4] float32 where rank 0 has parameter "
                         "'fc0.weight' [8, 4] float32 (every process must build the same model)",
                         tf::Error);
  } else {
    CHECK_THROWS_WITH_AS(dist::DistributedDataParallel{model},
                         doctest::Contains("the model differs across ranks: another rank's "
                                           "differs from rank 0's"),
                         tf::Error);
  }
  // A missing parameter and a dtype difference are caught too.
  auto other = std::make_shared<nn::Linear>(4, 2, /*bias=*/dist::rank() == 0);
  CHECK_THROWS_AS(dist::DistributedDataParallel{other}, tf::Error);
  auto typed = std::make_shared<nn::Linear>(4, 2);
  if (dist::rank() == 1) typed->to(tf::DType::float64);
  CHECK_THROWS_AS(dist::DistributedDataParallel{typed}, tf::Error);
  // And the job is still in step.
  CHECK(dist::all_reduce_max(1) == 1);
}

TEST_CASE("DistributedDataParallel: a backward pass that throws on every rank leaves it usable") {
  tf::manual_seed(8);
  auto model = std::make_shared<Mlp>(std::vector<std::int64_t>{4, 8, 8, 2});
  model->to(tf::DType::float64);
  dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = 1e-6});
  const Batch batch = global_batch(4, 4, 2, tf::DType::float64, 12);
  const Batch part = rows(batch, dist::rank() * 2, 2);
  {
    // After the last layers' buckets have started, the first layer's hook throws.
    auto failing = tf::autograd::register_post_accumulate_grad_hook(
        model->layers[0]->weight, [](const Tensor&) { throw tf::Error("injected failure"); });
    CHECK_THROWS_WITH_AS(mse(model->forward(part.x), part.y).backward(), "injected failure",
                         tf::Error);
  }
  CHECK(ddp.stats().syncs == 0);
  model->zero_grad();
  mse(model->forward(part.x), part.y).backward();
  CHECK(ddp.stats().syncs == 1);
  for (const Tensor& p : model->parameters()) {
    Tensor root = p.grad().clone();
    dist::broadcast(root, 0);
    CHECK(max_abs_diff(root, p.grad()) == 0.0);
  }
}
