// Data-parallel scaling on this machine: train_mlm's model (a masked-LM Linformer encoder) on
// random bytes, one process on the whole global batch against N processes on a share each
// (mpirun -np N), one thread per process; and the gradient all-reduce's cost: its time alone,
// and how much of it each step still waits for after backward (the rest is hidden behind the
// backward computation of the earlier layers).
//
//   mpirun -np 2 build/examples/benchmark_distributed --steps 20
//
// The single-process reference runs in the same job, on rank 0 while the others wait, step by
// step in turn with the data-parallel step, so the ratio compares two measurements taken under
// the same load. Rank 0 prints the results.
#include <omp.h>
#include <tinyformer/tinyformer.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

using namespace tinyformer;
namespace dist = tinyformer::distributed;

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Setup {
  nn::EncoderConfig config;
  std::int64_t seq_len = 128;
  std::int64_t vocab = nn::data::ByteTokenizer::vocab_size;
};

// A batch of random bytes; every position is a target (a throughput measurement, not training).
struct Batch {
  Tensor tokens, labels;
};
Batch random_batch(const Setup& s, std::int64_t rows, std::uint64_t seed) {
  manual_seed(seed);
  Tensor tokens = (rand({rows, s.seq_len}) * 256.0).to(DType::int64) + 4.0;
  return {tokens, tokens.clone()};
}

// One optimizer step on `batch`: forward, loss, backward (with the all-reduces when `ddp`
// wraps the model), optimizer step. Returns its seconds.
double train_step(nn::MaskedLM& model, nn::optim::AdamW& optimizer, const Setup& s,
                  const Batch& batch) {
  const double t0 = seconds_now();
  const Tensor logits = model.forward(batch.tokens);
  const Tensor loss = cross_entropy(logits.reshape({-1, s.vocab}), batch.labels.reshape({-1}));
  optimizer.zero_grad();
  loss.backward();
  optimizer.step();
  (void)loss.item<double>();
  return seconds_now() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel scaling: 1 process vs mpirun -np N, and the all-reduce's overlap"};
  Setup s;
  s.config.attention = nn::AttentionKind::linformer;
  s.config.linformer.k = 32;
  s.config.dropout = 0.0;
  s.config.d_model = 64;  // train_mlm's defaults
  s.config.d_ff = 256;
  std::int64_t batch = 16;
  int steps = 10, warmup = 2, threads = 1;
  double bucket_mb = 25.0;
  app.add_option("--batch", batch, "global batch (split over the processes)")
      ->capture_default_str();
  app.add_option("--seq-len", s.seq_len)->capture_default_str();
  app.add_option("--layers", s.config.layers)->capture_default_str();
  app.add_option("--d-model", s.config.d_model)->capture_default_str();
  app.add_option("--heads", s.config.heads)->capture_default_str();
  app.add_option("--d-ff", s.config.d_ff)->capture_default_str();
  app.add_option("--k", s.config.linformer.k)->capture_default_str();
  app.add_option("--steps", steps, "timed steps (median reported)")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads per process")->capture_default_str();
  app.add_option("--bucket-mb", bucket_mb, "DistributedDataParallel's bucket size in MiB")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (!dist::available()) {
      std::fprintf(stderr, "benchmark_distributed: this build has no MPI (TINYFORMER_MPI)\n");
      return 1;
    }
    dist::init();
    const int world = dist::world_size();
    const int rank = dist::rank();
    TF_CHECK(batch % world == 0, "--batch ", batch, " does not split over ", world, " processes");
    omp_set_num_threads(threads);
    s.config.max_seq_len = s.seq_len;

    // Every process builds the same model; the wrapper below copies rank 0's anyway. The
    // one-process reference trains a copy of its own on rank 0.
    manual_seed(1);
    auto model = std::make_shared<nn::MaskedLM>(s.config, s.vocab);
    nn::optim::AdamW optimizer(model->parameters(), {.lr = 1e-4});
    manual_seed(1);
    auto single_model = std::make_shared<nn::MaskedLM>(s.config, s.vocab);
    nn::optim::AdamW single_optimizer(single_model->parameters(), {.lr = 1e-4});
    dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = bucket_mb});
    const Batch whole = random_batch(s, batch, 7);
    const Batch share = random_batch(s, batch / world, 100 + static_cast<std::uint64_t>(rank));

    // The two cases take turns, step by step, so that a change in the machine's load reaches
    // both: 1. one process (rank 0) on the whole global batch while the others wait; 2. every
    // process on its share, gradients averaged during backward.
    std::vector<double> single, parallel, exposed, backward_s, first_launch;
    for (int i = 0; i < warmup + steps; ++i) {
      dist::barrier();
      if (rank == 0) {
        const double t = train_step(*single_model, single_optimizer, s, whole);
        if (i >= warmup) single.push_back(t);
      }
      dist::barrier();  // steps start together, so that the waits measure communication
      const double t = train_step(*model, optimizer, s, share);
      if (i < warmup) continue;
      parallel.push_back(t);
      exposed.push_back(ddp.stats().last_wait_seconds);
      backward_s.push_back(ddp.stats().last_backward_seconds);
      first_launch.push_back(ddp.stats().last_first_launch_seconds);
    }

    // 3. The all-reduce alone: the gradients' bytes in the same buckets, with nothing to hide
    // behind.
    std::vector<Tensor> buckets;
    for (const auto& names : ddp.bucket_parameters()) {
      std::int64_t numel = 0;
      for (const auto& [name, p] : model->named_parameters()) {
        if (std::find(names.begin(), names.end(), name) != names.end()) numel += p.numel();
      }
      buckets.push_back(zeros({numel}));
    }
    std::vector<double> alone;
    for (int i = 0; i < warmup + steps; ++i) {
      dist::barrier();
      const double t0 = seconds_now();
      std::vector<dist::Work> works;
      for (const Tensor& b : buckets) works.push_back(dist::all_reduce_async(b));
      for (dist::Work& w : works) w.wait();
      if (i >= warmup) alone.push_back(seconds_now() - t0);
    }

    // The slowest process sets the pace: take each measurement's maximum over the processes.
    auto slowest = [](double seconds) {
      return static_cast<double>(dist::all_reduce_max(static_cast<std::int64_t>(seconds * 1e9))) /
             1e9;
    };
    const double t_parallel = slowest(median(parallel));
    const double t_exposed = slowest(median(exposed));
    const double t_alone = slowest(median(alone));
    const double t_backward = slowest(median(backward_s));
    const double t_first = slowest(median(first_launch));
    if (rank == 0) {
      const double t_single = median(single);
      const double tokens = static_cast<double>(batch * s.seq_len);
      const double hidden = t_alone > 0 ? std::clamp(1.0 - t_exposed / t_alone, 0.0, 1.0) : 0.0;
      std::printf(
          "model: MaskedLM, %lld layers, d_model %lld, %lld heads, d_ff %lld, Linformer "
          "k=%lld, seq %lld: %lld parameters (%.1f MB of float32 gradients)\n",
          static_cast<long long>(s.config.layers), static_cast<long long>(s.config.d_model),
          static_cast<long long>(s.config.heads), static_cast<long long>(s.config.d_ff),
          static_cast<long long>(s.config.linformer.k), static_cast<long long>(s.seq_len),
          static_cast<long long>(model->num_parameters()),
          static_cast<double>(ddp.stats().bytes_per_sync) / 1e6);
      std::printf(
          "%d thread(s) per process, global batch %lld, %lld bucket(s) of at most %.1f "
          "MiB, median of %d steps\n",
          threads, static_cast<long long>(batch), static_cast<long long>(ddp.stats().buckets),
          bucket_mb, steps);
      std::printf("1 process : %8.2f ms/step  %9.0f tokens/s\n", t_single * 1e3, tokens / t_single);
      std::printf(
          "%d processes: %8.2f ms/step  %9.0f tokens/s  speed-up %.2fx (efficiency %.0f%%)\n",
          world, t_parallel * 1e3, tokens / t_parallel, t_single / t_parallel,
          100.0 * t_single / t_parallel / world);
      std::printf(
          "all-reduce of the gradients alone: %.2f ms; waited for after backward: %.2f "
          "ms; hidden behind backward: %.0f%%\n",
          t_alone * 1e3, t_exposed * 1e3, 100.0 * hidden);
      std::printf(
          "backward: %.2f ms from the first ready gradient to its end; the first "
          "all-reduce started %.2f ms into it\n",
          t_backward * 1e3, t_first * 1e3);
    }
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    if (dist::is_initialized() && dist::world_size() > 1) {
      dist::abort(std::string("benchmark_distributed: ") + e.what());
    }
    std::fprintf(stderr, "benchmark_distributed: %s\n", e.what());
    return 1;
  }
}
