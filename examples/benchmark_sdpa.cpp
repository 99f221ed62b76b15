// Bare attention against PyTorch 2.x's scaled_dot_product_attention on the same CPU, in one
// process: tinyformer's fused_attention (its default, memory-efficient kernel) and at::
// scaled_dot_product_attention (PyTorch's choice of kernel: its flash-attention CPU kernel where
// the case allows) on the same query, key and value [1, H, n, d_head], forward and
// forward+backward, taking turns in one interleaved set (bench_timing.h).
//
// Cases: float32, and each framework's bfloat16 mode: tinyformer's mixed precision (float32
// tensors under a bfloat16 autocast; the memory-efficient kernel computes in float32) against
// PyTorch on bfloat16 tensors (what its autocast hands SDPA); each with no mask, a key-padding
// mask (the last eighth of the keys) and the causal rule. Before timing, each float32 case checks
// that both compute the same output and gradients.
//
// Built by examples/benchmark_sdpa.sh against the libtorch of a PyTorch 2.x wheel (it needs
// a virtual environment with torch, examples/setup_pytorch_venv.sh), not by CMake: Debian's
// libtorch 1.13 has no scaled_dot_product_attention.
//
//   examples/benchmark_sdpa.sh BUILD [--n 1024,4096] [--budget 120]
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <tinyformer/tinyformer.h>

#include "bench_timing.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tf = tinyformer;

namespace {

// One shape's inputs in both frameworks: the same values.
struct Inputs {
  tf::Tensor q, k, v, up, excluded;     // tinyformer, float32
  torch::Tensor tq, tk, tv, tup, kept;  // PyTorch, float32 (kept: true = attends)
  torch::Tensor bq, bk, bv, bup;        // PyTorch, bfloat16
};

torch::Tensor to_torch(const tf::Tensor& t) {
  const std::vector<float> values = t.to_vector<float>();
  std::vector<std::int64_t> shape(t.shape().begin(), t.shape().end());
  return torch::from_blob(const_cast<float*>(values.data()), shape, torch::kFloat32).clone();
}

double max_relative(const tf::Tensor& ours, const torch::Tensor& theirs) {
  const torch::Tensor o = to_torch(ours);
  const torch::Tensor t = theirs.to(torch::kFloat32);
  return (o - t).abs().max().item<double>() / std::max(t.abs().max().item<double>(), 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"tinyformer's fused_attention against PyTorch's scaled_dot_product_attention"};
  std::vector<std::int64_t> ns = {1024, 4096};
  std::int64_t heads = 12, d_head = 64;
  int threads = 2;
  bench::StopRule rule;
  rule.budget_s = 120, rule.min_warmup = 1, rule.max_warmup = 2;
  std::string json_path = "benchmark_sdpa.json";
  app.add_option("--n", ns, "sequence lengths")->delimiter(',');
  app.add_option("--heads", heads)->capture_default_str();
  app.add_option("--d-head", d_head)->capture_default_str();
  app.add_option("--threads", threads, "threads of both frameworks")->capture_default_str();
  app.add_option("--budget", rule.budget_s)->capture_default_str();
  app.add_option("--min-rounds", rule.min_rounds)->capture_default_str();
  app.add_option("--json", json_path)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    torch::set_num_threads(threads);
    rule.probe = bench::core_probe();
    std::printf("PyTorch %s (CPU capability %s), tinyformer: %s\n\n", TORCH_VERSION,
                at::get_cpu_capability().c_str(), tf::runtime_info(tf::Device::cpu()).c_str());
    std::map<std::int64_t, Inputs> inputs;
    for (std::int64_t n : ns) {
      tf::manual_seed(7);
      Inputs in;
      const tf::Shape shape{1, heads, n, d_head};
      in.q = tf::randn(shape, {.requires_grad = true});
      in.k = tf::randn(shape, {.requires_grad = true});
      in.v = tf::randn(shape, {.requires_grad = true});
      in.up = tf::randn(shape);
      in.excluded = tf::zeros({1, 1, 1, n}, {.dtype = tf::DType::boolean});
      in.excluded.narrow(3, n - n / 8, n / 8).fill_(1.0);
      in.tq = to_torch(in.q).requires_grad_();
      in.tk = to_torch(in.k).requires_grad_();
      in.tv = to_torch(in.v).requires_grad_();
      in.tup = to_torch(in.up);
      in.kept = torch::ones({1, 1, 1, n}, torch::kBool);
      in.kept.narrow(3, n - n / 8, n / 8).fill_(false);
      in.bq = in.tq.detach().to(torch::kBFloat16).requires_grad_();
      in.bk = in.tk.detach().to(torch::kBFloat16).requires_grad_();
      in.bv = in.tv.detach().to(torch::kBFloat16).requires_grad_();
      in.bup = in.tup.to(torch::kBFloat16);
      inputs[n] = in;
    }
    enum class Mask { none, padding, causal };
    const auto mask_name = [](Mask m) {
      return m == Mask::none ? "no mask" : m == Mask::padding ? "padding" : "causal";
    };
    const auto ours = [&](Inputs& in, Mask mask, bool bf16, bool backward) {
      const tf::AttentionOptions options{.causal = mask == Mask::causal};
      const tf::Tensor excluded = mask == Mask::padding ? in.excluded : tf::Tensor();
      const tf::AutocastGuard guard(bf16 ? tf::DType::bfloat16 : tf::DType::float32);
      if (!backward) {
        tf::NoGradGuard no_grad;
        return tf::fused_attention(in.q, in.k, in.v, excluded, options);
      }
      tf::Tensor out = tf::fused_attention(in.q, in.k, in.v, excluded, options);
      tf::sum(tf::mul(out, in.up)).backward();
      return out;
    };
    const auto theirs = [&](Inputs& in, Mask mask, bool bf16, bool backward) {
      torch::Tensor q = bf16 ? in.bq : in.tq, k = bf16 ? in.bk : in.tk, v = bf16 ? in.bv : in.tv;
      const c10::optional<torch::Tensor> attn_mask =
          mask == Mask::padding ? c10::optional<torch::Tensor>(in.kept) : c10::nullopt;
      if (!backward) {
        torch::NoGradGuard no_grad;
        return at::scaled_dot_product_attention(q, k, v, attn_mask, 0.0, mask == Mask::causal);
      }
      torch::Tensor out =
          at::scaled_dot_product_attention(q, k, v, attn_mask, 0.0, mask == Mask::causal);
      (out * (bf16 ? in.bup : in.tup)).sum().backward();
      return out;
    };
    const auto clear = [&](Inputs& in) {
      for (tf::Tensor* t : {&in.q, &in.k, &in.v}) t->zero_grad();
      for (torch::Tensor* t : {&in.tq, &in.tk, &in.tv, &in.bq, &in.bk, &in.bv}) {
        t->mutable_grad() = torch::Tensor();
      }
    };

    // Agreement first (float32): output and the three gradients.
    for (auto& [n, in] : inputs) {
      for (Mask mask : {Mask::none, Mask::padding, Mask::causal}) {
        clear(in);
        const tf::Tensor o = ours(in, mask, false, true);
        const torch::Tensor t = theirs(in, mask, false, true);
        const double worst = std::max({max_relative(o, t), max_relative(in.q.grad(), in.tq.grad()),
                                       max_relative(in.k.grad(), in.tk.grad()),
                                       max_relative(in.v.grad(), in.tv.grad())});
        std::printf("n=%lld %-8s: output and gradients agree to %.1e (relative to the largest)\n",
                    static_cast<long long>(n), mask_name(mask), worst);
        TF_CHECK(worst < 1e-3, "benchmark_sdpa: the two frameworks disagree at n = ", n);
        clear(in);
      }
    }

    std::vector<bench::Job> jobs;
    std::vector<bench::Ratio> ratios;
    struct Row {
      std::int64_t n;
      const char* dtype;
      Mask mask;
      bool backward;
      std::string ratio;
    };
    std::vector<Row> rows;
    for (auto& [n, in] : inputs) {
      Inputs* p = &in;
      for (bool bf16 : {false, true}) {
        for (Mask mask : {Mask::none, Mask::padding, Mask::causal}) {
          for (bool backward : {false, true}) {
            const std::string name = "n=" + std::to_string(n) + " " + (bf16 ? "bf16" : "float32") +
                                     " " + mask_name(mask) + (backward ? " fwd+bwd" : " fwd");
            const std::size_t a = jobs.size();
            jobs.push_back({"tinyformer " + name, [p, clear] { clear(*p); },
                            [=] { ours(*p, mask, bf16, backward); }});
            jobs.push_back({"PyTorch " + name, [p, clear] { clear(*p); },
                            [=] { theirs(*p, mask, bf16, backward); }});
            ratios.push_back({"PyTorch / tinyformer " + name, a + 1, a});
            rows.push_back({n, bf16 ? "bf16" : "float32", mask, backward, ratios.back().name});
          }
        }
      }
    }
    const bench::Result timing = bench::run(jobs, ratios, rule);
    std::printf("%s\n", timing.report().c_str());
    std::printf("\n%-6s %-8s %-8s %-8s %14s %12s %22s\n", "n", "dtype", "mask", "pass",
                "tinyformer ms", "PyTorch ms", "PyTorch / tinyformer");
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const bench::RatioStats& s = timing.ratio(r.ratio);
      const double ours_ms = timing.jobs[2 * i].median_ms,
                   theirs_ms = timing.jobs[2 * i + 1].median_ms;
      std::printf("%-6lld %-8s %-8s %-8s %14.2f %12.2f %15.2fx +-%.0f%%\n",
                  static_cast<long long>(r.n), r.dtype, mask_name(r.mask),
                  r.backward ? "fwd+bwd" : "fwd", ours_ms, theirs_ms, s.median, 100 * s.spread);
      out.push_back({{"n", r.n},
                     {"dtype", r.dtype},
                     {"mask", mask_name(r.mask)},
                     {"pass", r.backward ? "fwd+bwd" : "fwd"},
                     {"tinyformer_ms", ours_ms},
                     {"pytorch_ms", theirs_ms},
                     {"pytorch_over_tinyformer", s.median},
                     {"spread", s.spread}});
    }
    std::printf("%s\n", timing.summary().c_str());
    if (!timing.quiet_summary().empty()) std::printf("%s\n", timing.quiet_summary().c_str());
    std::ofstream(json_path) << nlohmann::json{{"program", "benchmark_sdpa"},
                                               {"pytorch", TORCH_VERSION},
                                               {"heads", heads},
                                               {"d_head", d_head},
                                               {"threads", threads},
                                               {"rows", out},
                                               {"timing", timing.to_json()}}
                                    .dump(2)
                             << "\n";
    std::printf("results written to %s\n", json_path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark_sdpa: %s\n", e.what());
    return 1;
  }
  return 0;
}
