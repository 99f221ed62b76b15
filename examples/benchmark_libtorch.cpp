// tinyformer against libtorch (Debian's libtorch 1.13 C++ API) on the same post-norm encoder
// layer with identical weights: first a check that both compute the same layer, then forward
// and forward+backward times of both, taken in the same run with the frameworks taking turns
// (bench_timing.h: rounds in a changing order until the ratios are known to --target-spread or
// --budget ends), and the ratio torch / tinyformer (above 1: ours is faster). Full attention is
// compared with torch::nn::TransformerEncoderLayer and with the same math written by hand in
// libtorch ops; Linformer attention (one linear projection E: [k, n] shared by keys, values and
// heads, the paper's layerwise sharing) with a hand-written libtorch version.
//
// The check runs each layer once in float64 (outputs, input gradient and every parameter
// gradient must agree to 1e-10) and once in float32, the precision that is timed (outputs must
// agree to 1e-4; the float32 gradient differences are printed, see check()).
//
//   examples/benchmark_libtorch.sh build/examples/benchmark_libtorch   # about 10 minutes
//   benchmark_libtorch --quick            # n = 256 and 512, k = 64: about a minute
//   benchmark_libtorch --check-only       # the checks alone, at n = 64 (a ctest test)
//   benchmark_libtorch --export DIR       # the cases for examples/benchmark_pytorch.py
//   benchmark_libtorch --ours-only        # tinyformer's times alone (benchmark_pytorch.sh)
//
// The wrapper script sets the environment libtorch runs best in (OpenBLAS core type, passive
// OpenMP waiting, tcmalloc); it must be set before the libraries load, so this program only
// prints what it saw. The JSON (--json) goes next to the executable, in the build folder, unless
// named; results/cpu_speed/ keeps the curated summary (examples/summarize_results.py).
#include <omp.h>
#include <tinyformer/tinyformer.h>

#include "bench_timing.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tf = tinyformer;

namespace {

// The folder of this executable (the build folder), where raw output goes by default; the
// current folder where /proc/self/exe cannot be read.
std::filesystem::path executable_folder() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path(".") : exe.parent_path();
}

struct Options {
  std::vector<std::int64_t> ns = {256, 512, 1024, 2048, 4096};
  std::vector<std::int64_t> ks = {64, 128, 256};
  std::int64_t batch = 4, d_model = 256, heads = 4, d_ff = 1024;
  // The stop rule (bench_timing.h): per case, rounds until every ratio is known within
  // target_spread or budget_s seconds have passed; reps > 0 fixes the number of rounds instead.
  double budget_s = 30, target_spread = 0.02;
  int min_rounds = 5, max_rounds = 1000, reps = 0, warmup = 2, threads = 2;
  std::int64_t peak_size = 2048;  // the ceiling's reference product
  bool quick = false;
  double rtol = 1e-4, rtol64 = 1e-10;
  std::uint64_t seed = 1234;
  bool forward_only = false, check_only = false, profile = false, bf16 = false;
  double rtol_bf16 = 2e-2;
  std::string json_path = (executable_folder() / "benchmark_libtorch.json").string();
  std::string export_dir;  // --export: write the cases for another framework, then exit
  bool export_float64 = false, ours_only = false;
  bool probe = true;  // bench::core_probe around every timed job
};

// --- Moving values between the two frameworks ---

torch::Tensor to_torch(const tf::Tensor& t) {
  TF_CHECK(t.dtype() == tf::DType::float32 || t.dtype() == tf::DType::float64,
           "benchmark_libtorch: expected a float32 or float64 tensor, got ", t.dtype());
  const tf::Tensor c = t.detach().contiguous();
  return torch::from_blob(c.data_ptr(), c.shape(),
                          c.dtype() == tf::DType::float64 ? torch::kFloat64 : torch::kFloat32)
      .clone();
}

std::vector<double> values(const tf::Tensor& t) {
  return t.detach().to(tf::DType::float64).contiguous().to_vector<double>();
}

std::vector<double> values(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// The largest absolute difference, relative to the largest magnitude of either side, or to
// `floor` when that is larger (an elementwise relative error would flag every value that happens
// to be near zero).
double relative_difference(const std::vector<double>& ours, const std::vector<double>& theirs,
                           const std::string& what, double floor = 0) {
  TF_CHECK(ours.size() == theirs.size(), "benchmark_libtorch: ", what, " has ", ours.size(),
           " values in tinyformer and ", theirs.size(), " in libtorch");
  double diff = 0, scale = floor;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    diff = std::max(diff, std::abs(ours[i] - theirs[i]));
    scale = std::max({scale, std::abs(ours[i]), std::abs(theirs[i])});
  }
  return scale > 0 ? diff / scale : diff;
}

double largest_magnitude(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// --- The layer written by hand in libtorch ops ---

// The post-norm encoder layer: h = LN(x + Attn(x)), out = LN(h + FF(h)), with FF = Linear, ReLU,
// Linear and dropout 0. With E defined, keys and values are compressed from n rows to k.
struct HandLayer {
  std::int64_t heads = 0;
  torch::Tensor wq, bq, wk, bk, wv, bv, wo, bo, w1, b1, w2, b2, g1, beta1, g2, beta2;
  torch::Tensor e;  // Linformer's E: [k, n]; undefined for full attention

  // x: [B, n, d] -> [B, n, d]
  torch::Tensor forward(const torch::Tensor& x) const {
    const std::int64_t b = x.size(0), n = x.size(1), d = x.size(2), dh = d / heads;
    torch::Tensor query = torch::linear(x, wq, bq);  // [B, n, d]
    torch::Tensor key = torch::linear(x, wk, bk);
    torch::Tensor value = torch::linear(x, wv, bv);
    std::int64_t rows = n;
    if (e.defined()) {
      // E is shared by the heads, so it is applied once to all of them: E (X W_K) as written in
      // the paper, before the heads are split.
      key = torch::matmul(e, key);  // [B, k, d], k = e.size(0) the rank
      value = torch::matmul(e, value);
      rows = e.size(0);
    }
    auto split = [&](const torch::Tensor& t, std::int64_t r) {
      return t.view({b, r, heads, dh}).transpose(1, 2);  // [B, H, r, dh]
    };
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    torch::Tensor scores =
        torch::matmul(split(query, n) * scale, split(key, rows).transpose(-2, -1));  // [B, H, n, r]
    torch::Tensor context = torch::matmul(torch::softmax(scores, -1), split(value, rows));
    torch::Tensor attended =
        torch::linear(context.transpose(1, 2).reshape({b, n, d}), wo, bo);  // [B, n, d]
    torch::Tensor h = torch::layer_norm(x + attended, {d}, g1, beta1, 1e-5);
    torch::Tensor ff = torch::linear(torch::relu(torch::linear(h, w1, b1)), w2, b2);
    return torch::layer_norm(h + ff, {d}, g2, beta2, 1e-5);
  }

  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> p = {wq, bq, wk, bk, wv, bv,    wo, bo,
                                    w1, b1, w2, b2, g1, beta1, g2, beta2};
    if (e.defined()) p.push_back(e);
    return p;
  }
};

// One parameter of ours and where its values live in a libtorch layer: the whole tensor, or
// `row_count` rows from `row` (torch::nn::MultiheadAttention stacks q, k and v in one).
struct Tie {
  std::string name;
  tf::Tensor ours;
  torch::Tensor theirs;
  std::int64_t row = -1, row_count = 0;

  torch::Tensor part(const torch::Tensor& t) const {
    return row < 0 ? t : t.narrow(0, row, row_count);
  }
  void copy_to_torch() const {
    torch::NoGradGuard no_grad;
    torch::Tensor target = part(theirs);
    target.copy_(to_torch(ours).view(target.sizes()));
  }
};

// --- One comparison: our layer and the libtorch layers with its weights ---

struct Case {
  std::int64_t n = 0, k = 0;  // k = 0: full attention
  tf::DType dtype = tf::DType::float32;
  std::shared_ptr<tf::nn::TransformerEncoderLayer> ours;
  torch::nn::TransformerEncoderLayer library{nullptr};  // full attention only
  HandLayer hand;
  std::vector<Tie> library_ties, hand_ties;
  tf::Tensor x, r;             // input and the output's random projection: [B, n, d]
  torch::Tensor x_bnd, r_bnd;  // the same values, for the layer by hand
  torch::Tensor x_nbd, r_nbd;  // [n, B, d]: torch::nn's layers take the sequence first
  // --bf16: tinyformer in mixed precision (float32 masters, their bfloat16 copies, bfloat16
  // products with float32 results: docs/mixed_precision.md).
  std::shared_ptr<tf::nn::MixedPrecision> mixed;

  std::string label() const { return k == 0 ? "full" : "Linformer k=" + std::to_string(k); }
};

std::int64_t total_numel(const std::vector<torch::Tensor>& ts) {
  std::int64_t total = 0;
  for (const auto& t : ts) total += t.numel();
  return total;
}

// Builds our layer with its own initialisation, then the libtorch layers from its weights. The
// weights and inputs depend on n and k only: a float64 case holds the float32 case's values.
Case make_case(const Options& o, std::int64_t n, std::int64_t k, std::int64_t batch,
               tf::DType dtype) {
  tf::manual_seed(o.seed + static_cast<std::uint64_t>(n * 1000 + k));
  Case c;
  c.n = n, c.k = k, c.dtype = dtype;
  const tf::nn::EncoderConfig config{.layers = 1,
                                     .d_model = o.d_model,
                                     .heads = o.heads,
                                     .d_ff = o.d_ff,
                                     .max_seq_len = n,
                                     .dropout = 0.0,
                                     .activation = tf::nn::Activation::relu,
                                     .pre_norm = false};
  std::shared_ptr<tf::nn::Attention> attention;
  std::shared_ptr<tf::nn::LinearProjection> projection;
  if (k == 0) {
    attention = std::make_shared<tf::nn::MultiHeadAttention>(o.d_model, o.heads, 0.0);
  } else {
    // Layerwise sharing in a one-layer model: one E for keys, values and every head.
    projection = std::make_shared<tf::nn::LinearProjection>(tf::nn::ProjectionSpec{
        .k = k, .max_seq_len = n, .head_dim = o.d_model / o.heads, .heads = 1});
    attention = std::make_shared<tf::nn::LinformerAttention>(o.d_model, o.heads, projection,
                                                             projection, 0.0);
  }
  c.ours = std::make_shared<tf::nn::TransformerEncoderLayer>(config, attention);
  c.ours->to(dtype);

  const auto& a = *c.ours->attention;
  // The standard parts: FeedForward and LayerNorm.
  const auto& ff = dynamic_cast<const tf::nn::FeedForward&>(*c.ours->feed_forward);
  const auto& ln1 = dynamic_cast<const tf::nn::LayerNorm&>(*c.ours->norm1);
  const auto& ln2 = dynamic_cast<const tf::nn::LayerNorm&>(*c.ours->norm2);
  auto leaf = [](const tf::Tensor& t) { return to_torch(t).requires_grad_(); };
  HandLayer& h = c.hand;
  h.heads = o.heads;
  h.wq = leaf(a.q_proj->weight), h.bq = leaf(a.q_proj->bias);
  h.wk = leaf(a.k_proj->weight), h.bk = leaf(a.k_proj->bias);
  h.wv = leaf(a.v_proj->weight), h.bv = leaf(a.v_proj->bias);
  h.wo = leaf(a.out_proj->weight), h.bo = leaf(a.out_proj->bias);
  h.w1 = leaf(ff.fc1->weight), h.b1 = leaf(ff.fc1->bias);
  h.w2 = leaf(ff.fc2->weight), h.b2 = leaf(ff.fc2->bias);
  h.g1 = leaf(ln1.weight), h.beta1 = leaf(ln1.bias);
  h.g2 = leaf(ln2.weight), h.beta2 = leaf(ln2.bias);
  c.hand_ties = {{"q_proj.weight", a.q_proj->weight, h.wq},
                 {"q_proj.bias", a.q_proj->bias, h.bq},
                 {"k_proj.weight", a.k_proj->weight, h.wk},
                 {"k_proj.bias", a.k_proj->bias, h.bk},
                 {"v_proj.weight", a.v_proj->weight, h.wv},
                 {"v_proj.bias", a.v_proj->bias, h.bv},
                 {"out_proj.weight", a.out_proj->weight, h.wo},
                 {"out_proj.bias", a.out_proj->bias, h.bo},
                 {"fc1.weight", ff.fc1->weight, h.w1},
                 {"fc1.bias", ff.fc1->bias, h.b1},
                 {"fc2.weight", ff.fc2->weight, h.w2},
                 {"fc2.bias", ff.fc2->bias, h.b2},
                 {"norm1.weight", ln1.weight, h.g1},
                 {"norm1.bias", ln1.bias, h.beta1},
                 {"norm2.weight", ln2.weight, h.g2},
                 {"norm2.bias", ln2.bias, h.beta2}};
  if (projection) {
    // Ours is [1, k, n]: one matrix for every head.
    h.e = to_torch(projection->weight).reshape({k, n}).detach().requires_grad_();
    c.hand_ties.push_back({"projection.E", projection->weight, h.e});
  }
  TF_CHECK(total_numel(h.parameters()) == c.ours->num_parameters(),
           "benchmark_libtorch: the layer by hand has ", total_numel(h.parameters()),
           " parameters, ours ", c.ours->num_parameters());

  if (k == 0) {
    c.library = torch::nn::TransformerEncoderLayer(
        torch::nn::TransformerEncoderLayerOptions(o.d_model, o.heads)
            .dim_feedforward(o.d_ff)
            .dropout(0.0)
            .activation(torch::kReLU));
    c.library->to(dtype == tf::DType::float64 ? torch::kFloat64 : torch::kFloat32);
    const auto& lib = *c.library;
    const auto& mha = *lib.self_attn;
    const std::int64_t d = o.d_model;
    c.library_ties = {{"q_proj.weight", a.q_proj->weight, mha.in_proj_weight, 0, d},
                      {"k_proj.weight", a.k_proj->weight, mha.in_proj_weight, d, d},
                      {"v_proj.weight", a.v_proj->weight, mha.in_proj_weight, 2 * d, d},
                      {"q_proj.bias", a.q_proj->bias, mha.in_proj_bias, 0, d},
                      {"k_proj.bias", a.k_proj->bias, mha.in_proj_bias, d, d},
                      {"v_proj.bias", a.v_proj->bias, mha.in_proj_bias, 2 * d, d},
                      {"out_proj.weight", a.out_proj->weight, mha.out_proj->weight},
                      {"out_proj.bias", a.out_proj->bias, mha.out_proj->bias},
                      {"fc1.weight", ff.fc1->weight, lib.linear1->weight},
                      {"fc1.bias", ff.fc1->bias, lib.linear1->bias},
                      {"fc2.weight", ff.fc2->weight, lib.linear2->weight},
                      {"fc2.bias", ff.fc2->bias, lib.linear2->bias},
                      {"norm1.weight", ln1.weight, lib.norm1->weight},
                      {"norm1.bias", ln1.bias, lib.norm1->bias},
                      {"norm2.weight", ln2.weight, lib.norm2->weight},
                      {"norm2.bias", ln2.bias, lib.norm2->bias}};
    for (const Tie& t : c.library_ties) t.copy_to_torch();
    // Every libtorch parameter is covered: nothing left at its own random initialisation.
    TF_CHECK(total_numel(c.library->parameters()) == c.ours->num_parameters(),
             "benchmark_libtorch: torch::nn::TransformerEncoderLayer has ",
             total_numel(c.library->parameters()), " parameters, ours ", c.ours->num_parameters());
  }

  c.x = tf::randn({batch, n, o.d_model}).to(dtype);
  c.x.requires_grad_();
  c.r = tf::randn({batch, n, o.d_model}).to(dtype);
  c.x_bnd = to_torch(c.x).requires_grad_();
  c.r_bnd = to_torch(c.r);
  c.x_nbd = c.x_bnd.detach().transpose(0, 1).contiguous().requires_grad_();
  c.r_nbd = c.r_bnd.transpose(0, 1).contiguous();
  return c;
}

// The steps the timing and the check share: drop the gradients, then forward, or forward and
// backward of sum(out * r).
void zero_ours(Case& c) {
  c.ours->zero_grad();
  c.x.zero_grad();
}
// Our layer's forward, under the case's mixed precision when it has one.
tf::Tensor forward_ours(Case& c) {
  if (!c.mixed) return c.ours->forward(c.x);
  const tf::AutocastGuard autocast = c.mixed->autocast();
  return c.ours->forward(c.x);
}
// Mixed precision for the case (--bf16), or none.
void set_mixed(Case& c, bool on) {
  c.mixed = on ? std::make_shared<tf::nn::MixedPrecision>(*c.ours) : nullptr;
}
tf::Tensor train_ours(Case& c) {
  tf::Tensor y = forward_ours(c);
  tf::sum(tf::mul(y, c.r)).backward();
  return y;
}
void zero_hand(Case& c) {
  for (torch::Tensor& p : c.hand.parameters()) p.mutable_grad() = torch::Tensor();
  c.x_bnd.mutable_grad() = torch::Tensor();
}
torch::Tensor train_hand(Case& c) {
  torch::Tensor y = c.hand.forward(c.x_bnd);
  (y * c.r_bnd).sum().backward();
  return y;
}
void zero_library(Case& c) {
  c.library->zero_grad(/*set_to_none=*/true);
  c.x_nbd.mutable_grad() = torch::Tensor();
}
torch::Tensor train_library(Case& c) {
  torch::Tensor y = c.library->forward(c.x_nbd);
  (y * c.r_nbd).sum().backward();
  return y;
}

// --- The agreement check ---

struct Agreement {
  std::string torch_impl;
  double output = 0, input_grad = 0, param_grad = 0;
  std::string worst_param;
  double worst() const { return std::max({output, input_grad, param_grad}); }
};

Agreement agree(const std::string& torch_impl, const tf::Tensor& y, const torch::Tensor& y_torch,
                const tf::Tensor& x, const torch::Tensor& x_grad_torch,
                const std::vector<Tie>& ties) {
  Agreement a;
  a.torch_impl = torch_impl;
  a.output = relative_difference(values(y), values(y_torch), "the output");
  TF_CHECK(x.grad().defined() && x_grad_torch.defined(),
           "benchmark_libtorch: no input gradient after backward");
  a.input_grad = relative_difference(values(x.grad()), values(x_grad_torch), "the input gradient");
  // The key bias's gradient is zero in exact arithmetic (softmax ignores a constant added to a
  // row of scores), so both sides hold rounding noise: each gradient is compared relative to
  // at least 1% of the largest parameter gradient of the layer.
  double largest = 0;
  for (const Tie& t : ties) {
    TF_CHECK(t.ours.grad().defined() && t.theirs.grad().defined(),
             "benchmark_libtorch: no gradient for ", t.name, " after backward");
    largest = std::max(largest, largest_magnitude(values(t.ours.grad())));
  }
  for (const Tie& t : ties) {
    const double d = relative_difference(values(t.ours.grad()), values(t.part(t.theirs.grad())),
                                         t.name + "'s gradient", 0.01 * largest);
    if (d >= a.param_grad) a.param_grad = d, a.worst_param = t.name;
  }
  return a;
}

// Runs each framework once in training mode on the same input and compares; throws Error
// naming what disagrees. In float32 only the output is held to `rtol`: ReLU's derivative jumps at
// 0, so a pre-activation within rounding of zero lands on different sides of it in the two
// frameworks and changes that unit's gradient by O(1). At n = 1024, k = 64 this happens in two
// of fc1's 1024 rows, whose gradients then differ by 1% of the largest value, in both
// frameworks alike against a float64 reference; in float64 the two agree to 1e-15. The float64
// check holds the gradients to `rtol` as well.
std::vector<Agreement> check(Case& c, double rtol) {
  zero_ours(c);
  const tf::Tensor y = train_ours(c);
  std::vector<Agreement> out;
  if (c.library) {
    zero_library(c);
    const torch::Tensor y_lib = train_library(c).transpose(0, 1);
    out.push_back(
        agree("torch::nn", y, y_lib, c.x, c.x_nbd.grad().transpose(0, 1), c.library_ties));
  }
  zero_hand(c);
  const torch::Tensor y_hand = train_hand(c);
  out.push_back(agree("by hand", y, y_hand, c.x, c.x_bnd.grad(), c.hand_ties));
  const bool f64 = c.dtype == tf::DType::float64;
  const char* precision = f64 ? "float64" : c.mixed ? "mixed" : "float32";
  for (const Agreement& a : out) {
    const double held = f64 ? a.worst() : a.output;
    std::printf(
        "check n=%-5lld %-15s %-8s batch %lld, tinyformer vs torch %-10s output %.1e, "
        "input grad %.1e, parameter grads %.1e (%s)%s: %s\n",
        static_cast<long long>(c.n), c.label().c_str(), precision,
        static_cast<long long>(c.x.size(0)), a.torch_impl.c_str(), a.output, a.input_grad,
        a.param_grad, a.worst_param.c_str(), f64 ? "" : " [gradients not held in float32]",
        held <= rtol ? "agree" : "DISAGREE");
    TF_CHECK(held <= rtol, "benchmark_libtorch: at n=", c.n, ", ", c.label(), ", ", precision,
             ", tinyformer and libtorch (", a.torch_impl,
             ") disagree: largest difference relative to the largest value: output ", a.output,
             f64 ? ", input gradient " : "", f64 ? std::to_string(a.input_grad) : "",
             f64 ? ", parameter gradients " : "", f64 ? std::to_string(a.param_grad) : "",
             f64 ? " (" + a.worst_param + ")" : "", "; the tolerance is ", rtol);
  }
  std::fflush(stdout);
  return out;
}

// --- Timing ---

// Every framework of one case, forward and forward+backward, and the reference product below
// are one set of jobs for bench::run: they take turns in an order that changes every round, so
// that a change in the machine's load hits them alike, and each ratio is taken within a round.
struct Row {
  std::int64_t n = 0, k = 0;
  std::string layer, torch_impl;
  // Times in ms; the forward+backward ones are empty with --forward-only.
  bench::JobStats torch_train, torch_forward, ours_train, ours_forward;
  // torch / tinyformer, medians of the per-round ratios with their spreads.
  bench::RatioStats ratio_train, ratio_forward;
  // libtorch's time over the time tinyformer's matrix products alone (product_flops) would take
  // at the rate of the reference product in the same round: what no implementation whose
  // products run at that rate can exceed. Its median and spread, per round like the ratios.
  bench::RatioStats ceiling;
  Agreement agreement, agreement64;
  double product_flops = 0;    // tinyformer's matrix products in one timed call (the profiler's)
  double peak_flops = 0;       // the reference product's rate from its median time, FLOP/s
  double best_peak_flops = 0;  // and from its fastest run
};

// The reference for the ceiling: a float32 [2048 x 2048] x [2048 x 2048] product (--peak-size)
// through tinyformer (under the current matmul precision), timed as one more job of every case's
// set: warmed up with the others, and best judged against libtorch's time in the same round.
struct PeakProduct {
  std::int64_t size;
  tf::Tensor a, b;
  // With bfloat16 (--bf16): the operands' bfloat16 copies, made once, into a float32 result, as
  // mixed precision multiplies.
  std::shared_ptr<tf::AutocastCache> bf16;
  PeakProduct(std::int64_t n, bool bfloat16) : size(n), a(tf::randn({n, n})), b(tf::randn({n, n})) {
    if (!bfloat16) return;
    bf16 = std::make_shared<tf::AutocastCache>();
    bf16->add(a);
    bf16->add(b);
    bf16->refresh();
  }
  double flops() const {
    return 2.0 * static_cast<double>(size * size) * static_cast<double>(size);
  }
  bench::Job job() const {
    const std::string s = std::to_string(size);
    return {"[" + s + "x" + s + "] product", nullptr, [this] {
              tf::NoGradGuard no_grad;
              if (!bf16) {
                tf::Tensor c = tf::matmul(a, b);
                return;
              }
              const tf::AutocastGuard autocast(tf::DType::bfloat16, bf16.get());
              tf::Tensor c = tf::matmul(a, b);
            }};
  }
};

// Whether a profiled op is a matrix product: matmul, linear and the fused attention ops count
// their products' work; the others none.
bool is_product(const tf::OpProfile& op) {
  return op.name.rfind("matmul", 0) == 0 || op.name.rfind("linear", 0) == 0 ||
         op.name.rfind("attention", 0) == 0;
}

// The floating-point work of tinyformer's matrix products in `run`, counted by the profiler.
double product_flops(const std::function<void()>& run) {
  const tf::Profiler profiler;
  run();
  double flops = 0;
  for (const tf::OpProfile& op : profiler.ops()) {
    if (is_product(op)) flops += op.flops;
  }
  return flops;
}

// The two factors of ratio / ceiling, from kRuns profiled forward+backward calls of tinyformer,
// each after a call of the reference product (timed too): the products' rate inside the layer
// over the reference's, and the products' share of the wall time (the fused attention ops count
// whole, softmax inside them included). Medians over the runs; their product is ratio / ceiling
// as these runs had it, and the first factor alone what ratio / ceiling could reach with
// everything outside the products free, at the rate the products run at inside the layer.
std::string ceiling_split(Case& c, const PeakProduct& peak) {
  constexpr int kRuns = 7;
  const bench::Job reference = peak.job();
  std::vector<double> fractions, shares;
  for (int run = 0; run < kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    reference.run();
    const double reference_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    zero_ours(c);
    const tf::Profiler profiler;
    train_ours(c);
    const double wall_s = profiler.elapsed_seconds();
    double product_s = 0, flops = 0;
    for (const tf::OpProfile& op : profiler.ops()) {
      if (!is_product(op)) continue;
      product_s += op.seconds;
      flops += op.flops;
    }
    if (product_s <= 0 || wall_s <= 0 || reference_s <= 0) return "";
    fractions.push_back(flops / product_s / (peak.flops() / reference_s));
    shares.push_back(product_s / wall_s);
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double fraction = median(fractions), share = median(shares);
  char line[512];
  std::snprintf(line, sizeof line,
                "ratio / ceiling, split (medians of %d profiled calls, each after a reference "
                "product): the products' rate (matmul, linear, attention ops) %.3f of the "
                "reference product's x their share of the wall time %.3f = %.3f\n",
                kRuns, fraction, share, fraction * share);
  return line;
}

bench::StopRule stop_rule(const Options& o) {
  bench::StopRule rule;
  rule.target_spread = o.target_spread;
  rule.budget_s = o.budget_s;
  rule.min_rounds = o.reps > 0 ? o.reps : o.min_rounds;
  rule.max_rounds = o.reps > 0 ? o.reps : std::max(o.max_rounds, o.min_rounds);
  rule.min_warmup = o.warmup;
  rule.max_warmup = std::max(o.warmup, 6);
  // One probe for every set, so that a set timed entirely while the threads ran on distant
  // cores is judged against the fastest probe of the whole run.
  static const std::shared_ptr<bench::Probe> probe = bench::core_probe();
  if (o.probe) rule.probe = probe;
  return rule;
}

// Times forward (inference: no graph, in both) and forward+backward (the input requires grad in
// both, as a layer inside a stack does) of every framework of the case, and the reference
// product, in one interleaved set. Returns a row per libtorch implementation and the set.
std::pair<std::vector<Row>, bench::Result> measure(Case& c,
                                                   const std::vector<Agreement>& agreements,
                                                   const std::vector<Agreement>& agreements64,
                                                   const Options& o, const PeakProduct& peak) {
  struct Impl {
    std::string name;
    std::function<void()> zero, train, forward;
  };
  std::vector<Impl> impls = {{"tinyformer", [&] { zero_ours(c); }, [&] { train_ours(c); },
                              [&] {
                                tf::NoGradGuard no_grad;
                                tf::Tensor y = forward_ours(c);
                              }}};
  if (c.library) {
    impls.push_back({"torch::nn", [&] { zero_library(c); }, [&] { train_library(c); },
                     [&] {
                       torch::NoGradGuard no_grad;
                       torch::Tensor y = c.library->forward(c.x_nbd);
                     }});
  }
  impls.push_back({"by hand", [&] { zero_hand(c); }, [&] { train_hand(c); },
                   [&] {
                     torch::NoGradGuard no_grad;
                     torch::Tensor y = c.hand.forward(c.x_bnd);
                   }});

  // Jobs: per implementation forward+backward (unless --forward-only) and forward, then the
  // product. train_job[i] and forward_job[i] index them.
  const std::string prefix = "n=" + std::to_string(c.n) + " " + c.label() + ": ";
  std::vector<bench::Job> jobs;
  std::vector<std::size_t> train_job, forward_job;
  for (const Impl& impl : impls) {
    if (!o.forward_only) {
      train_job.push_back(jobs.size());
      jobs.push_back({prefix + impl.name + " forward+backward", impl.zero, impl.train});
    }
    forward_job.push_back(jobs.size());
    jobs.push_back({prefix + impl.name + " forward", nullptr, impl.forward});
  }
  const std::size_t product_job = jobs.size();
  jobs.push_back(peak.job());

  // Ratios torch / tinyformer (watched by the stop rule), and torch / product for the ceiling
  // (reported, not watched: it is a bound, not a result).
  std::vector<bench::Ratio> ratios;
  for (std::size_t i = 1; i < impls.size(); ++i) {
    if (!o.forward_only) {
      ratios.push_back(
          {prefix + impls[i].name + " / tinyformer, forward+backward", train_job[i], train_job[0]});
    }
    ratios.push_back(
        {prefix + impls[i].name + " / tinyformer, forward", forward_job[i], forward_job[0]});
    ratios.push_back({prefix + impls[i].name + " / product",
                      o.forward_only ? forward_job[i] : train_job[i], product_job,
                      /*watched=*/false});
  }
  bench::Result result = bench::run(jobs, ratios, stop_rule(o));

  const Impl& timed = impls[0];
  if (timed.zero && !o.forward_only) timed.zero();
  const double flops = product_flops(o.forward_only ? timed.forward : timed.train);
  const double product_ms = result.jobs[product_job].median_ms;
  std::vector<Row> rows;
  for (std::size_t i = 1; i < impls.size(); ++i) {
    Row r;
    r.n = c.n, r.k = c.k, r.layer = c.label(), r.torch_impl = impls[i].name;
    if (!o.forward_only) {
      r.torch_train = result.jobs[train_job[i]], r.ours_train = result.jobs[train_job[0]];
      r.ratio_train = result.ratio(prefix + impls[i].name + " / tinyformer, forward+backward");
    }
    r.torch_forward = result.jobs[forward_job[i]], r.ours_forward = result.jobs[forward_job[0]];
    r.ratio_forward = result.ratio(prefix + impls[i].name + " / tinyformer, forward");
    // torch_ms / (flops / rate) with rate = product flops / product_ms: the per-round ratio
    // torch / product, scaled.
    r.ceiling = result.ratio(prefix + impls[i].name + " / product");
    const double scale = flops > 0 ? peak.flops() / flops : 0;
    r.ceiling.median *= scale;
    for (double& v : r.ceiling.values) v *= scale;
    r.agreement = agreements[i - 1], r.agreement64 = agreements64[i - 1];
    r.product_flops = flops;
    r.peak_flops = product_ms > 0 ? peak.flops() / (product_ms * 1e-3) : 0;
    r.best_peak_flops = peak.flops() / (result.jobs[product_job].min_ms * 1e-3);
    rows.push_back(std::move(r));
  }
  return {std::move(rows), std::move(result)};
}

// --- What ran: the environment, the libraries, the threads ---

// The shared libraries of the BLAS, OpenMP, oneDNN and allocator actually mapped into this
// process (an LD_PRELOAD of a missing file is silently skipped by the loader, and two OpenBLAS
// builds can end up side by side).
std::vector<std::string> loaded_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    for (const char* key : {"openblas", "libblas", "libgomp", "libdnnl", "tcmalloc", "libtorch"}) {
      if (path.find(key) != std::string::npos) found.insert(path);
    }
  }
  return {found.begin(), found.end()};
}

nlohmann::json describe_environment() {
  nlohmann::json env;
  std::printf("environment:\n");
  for (const char* name :
       {"OPENBLAS_CORETYPE", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT",
        "LD_PRELOAD", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_PROC_BIND"}) {
    const char* value = std::getenv(name);
    std::printf("  %-24s %s\n", name, value ? value : "[not set]");
    env[name] = value ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  const auto libraries = loaded_libraries();
  std::printf("libraries loaded:\n");
  for (const auto& l : libraries) std::printf("  %s\n", l.c_str());
  env["libraries"] = libraries;

  const std::string ours = tf::runtime_info();
  std::printf("tinyformer runtime:\n%s\n", ours.c_str());
  env["tinyformer_runtime"] = ours;
  const std::string torch_info = at::get_parallel_info();
  std::printf("libtorch %s, %s", TORCH_VERSION, torch_info.c_str());
  env["libtorch_version"] = TORCH_VERSION;
  env["libtorch_parallel_info"] = torch_info;
  // The build's BLAS and the vector ISA its kernels were dispatched to.
  const std::string config = at::show_config();
  for (const char* key : {"CPU capability usage", "BLAS_INFO="}) {
    const auto at = config.find(key);
    if (at == std::string::npos) continue;
    const auto end = config.find_first_of(",\n", at);
    const std::string item = config.substr(at, end - at);
    std::printf("libtorch %s\n", item.c_str());
    env["libtorch_build"].push_back(item);
  }
  std::printf("\n");
  return env;
}

// "fwd+bwd (fwd)", or "- (fwd)" when only the forward pass was timed; `format` prints one value.
std::string pair(double train, double forward, bool forward_only, const char* format = "%.2f") {
  char a[32], b[32], buf[80];
  std::snprintf(a, sizeof a, format, train);
  std::snprintf(b, sizeof b, format, forward);
  std::snprintf(buf, sizeof buf, "%s (%s)", forward_only ? "-" : a, b);
  return buf;
}

void print_header() {
  std::printf("%-6s %-15s %-10s | %-17s | %-17s | %-17s | %-17s | %-13s | %-13s | %-13s | %s\n",
              "n", "layer", "torch", "torch ms", "min", "tinyformer ms", "min", "ratio", "+-",
              "fastest runs", "ceiling");
}

void print_row(const Row& r, bool forward_only) {
  auto spread = [](double s) { return std::isfinite(s) ? 100 * s : NAN; };
  std::printf(
      "%-6lld %-15s %-10s | %-17s | %-17s | %-17s | %-17s | %-13s | %-13s | %-13s | %.2f\n",
      static_cast<long long>(r.n), r.layer.c_str(), r.torch_impl.c_str(),
      pair(r.torch_train.median_ms, r.torch_forward.median_ms, forward_only).c_str(),
      pair(r.torch_train.min_ms, r.torch_forward.min_ms, forward_only).c_str(),
      pair(r.ours_train.median_ms, r.ours_forward.median_ms, forward_only).c_str(),
      pair(r.ours_train.min_ms, r.ours_forward.min_ms, forward_only).c_str(),
      pair(r.ratio_train.median, r.ratio_forward.median, forward_only).c_str(),
      pair(spread(r.ratio_train.spread), spread(r.ratio_forward.spread), forward_only, "%.1f%%")
          .c_str(),
      pair(r.torch_train.min_ms / r.ours_train.min_ms,
           r.torch_forward.min_ms / r.ours_forward.min_ms, forward_only)
          .c_str(),
      r.ceiling.median);
}

nlohmann::json agreement_json(const Agreement& a) {
  return {{"output", a.output},
          {"input_grad", a.input_grad},
          {"param_grad", a.param_grad},
          {"worst_param", a.worst_param}};
}

// A finite value, or null (nothing timed, or too few rounds for a spread).
nlohmann::json number(double v) {
  return std::isfinite(v) && v != 0 ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const Row& r) {
  // Train values are null when only the forward pass was timed.
  auto timing = [](const bench::JobStats& train, const bench::JobStats& fwd) {
    return nlohmann::json{{"train_ms", number(train.median_ms)},
                          {"train_min_ms", number(train.min_ms)},
                          {"train_spread", number(train.spread)},
                          {"forward_ms", number(fwd.median_ms)},
                          {"forward_min_ms", number(fwd.min_ms)},
                          {"forward_spread", number(fwd.spread)},
                          {"rounds", fwd.ms.size()}};
  };
  return {{"n", r.n},
          {"layer", r.layer},
          {"k", r.k == 0 ? nlohmann::json(nullptr) : nlohmann::json(r.k)},
          {"torch_impl", r.torch_impl},
          {"torch", timing(r.torch_train, r.torch_forward)},
          {"tinyformer", timing(r.ours_train, r.ours_forward)},
          // Medians of the per-round ratios torch / tinyformer; spread: the relative half-width
          // of their median's 95% confidence interval; iqr: how single rounds scatter.
          {"ratio_train", number(r.ratio_train.median)},
          {"ratio_train_spread", number(r.ratio_train.spread)},
          {"ratio_train_iqr", number(r.ratio_train.iqr)},
          {"ratio_forward", number(r.ratio_forward.median)},
          {"ratio_forward_spread", number(r.ratio_forward.spread)},
          {"ratio_forward_iqr", number(r.ratio_forward.iqr)},
          {"ratio_train_fastest", number(r.torch_train.min_ms / r.ours_train.min_ms)},
          {"ratio_forward_fastest", number(r.torch_forward.min_ms / r.ours_forward.min_ms)},
          {"product_gflop", r.product_flops * 1e-9},
          {"peak_gflops", r.peak_flops * 1e-9},
          {"best_peak_gflops", r.best_peak_flops * 1e-9},
          {"ceiling", number(r.ceiling.median)},
          {"ceiling_spread", number(r.ceiling.spread)},
          {"agreement_float32", agreement_json(r.agreement)},
          {"agreement_float64", agreement_json(r.agreement64)}};
}

// The cells a second run is compared by (examples/compare_benchmark_runs.py): every ratio the
// table reports, under a name that says which.
void add_ratios(nlohmann::json& out, const Row& r, bool forward_only) {
  const std::string cell = "n=" + std::to_string(r.n) + " " + r.layer + " " + r.torch_impl;
  auto add = [&](const std::string& what, const bench::RatioStats& s) {
    out.push_back(
        {{"name", cell + " " + what}, {"median", number(s.median)}, {"spread", number(s.spread)}});
  };
  if (!forward_only) add("forward+backward", r.ratio_train);
  add("forward", r.ratio_forward);
}

// --- Handing the cases to another framework: --export and --ours-only ---

// A case's name and file stem: "n256_full", "n256_k64".
std::string case_name(std::int64_t n, std::int64_t k) {
  return "n" + std::to_string(n) + (k == 0 ? "_full" : "_k" + std::to_string(k));
}

// The (n, k) pairs the timings cover, in their order: full attention, then each k < n.
std::vector<std::pair<std::int64_t, std::int64_t>> timed_cases(const Options& o) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::int64_t n : o.ns) {
    out.emplace_back(n, 0);
    for (std::int64_t k : o.ks) {
      if (k < n) out.emplace_back(n, k);
    }
  }
  return out;
}

// Writes, for every case, <dir>/<case>.safetensors holding the layer's parameters under their
// state_dict names, the input "x", the backward seed "r" (the loss is sum(y * r)), and
// tinyformer's results: the output "y", the input gradient "grad.x" and every parameter's
// gradient "grad.<name>". Each file is read back with load_safetensors and compared value for
// value. Then <dir>/cases.json: the layer's configuration and, per case, its file and the part
// of the layer each parameter is (the names of HandLayer's ties), which is all another
// framework needs to rebuild the layer.
void export_cases(const Options& o) {
  const tf::DType dtype = o.export_float64 ? tf::DType::float64 : tf::DType::float32;
  std::filesystem::create_directories(o.export_dir);
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& [n, k] : timed_cases(o)) {
    Case c = make_case(o, n, k, o.batch, dtype);
    zero_ours(c);
    const tf::Tensor y = train_ours(c);
    tf::nn::StateDict tensors;
    nlohmann::json roles = nlohmann::json::object();
    for (const auto& [name, t] : c.ours->state_dict()) {
      const auto tie =
          std::find_if(c.hand_ties.begin(), c.hand_ties.end(),
                       [&](const Tie& candidate) { return candidate.ours.impl() == t.impl(); });
      TF_CHECK(tie != c.hand_ties.end(), "benchmark_libtorch: the layer's ", name,
               " is no part of the layer by hand");
      TF_CHECK(t.grad().defined(), "benchmark_libtorch: no gradient for ", name);
      roles[name] = tie->name;
      tensors.emplace_back(name, t.detach());
      tensors.emplace_back("grad." + name, t.grad());
    }
    tensors.emplace_back("x", c.x.detach());
    tensors.emplace_back("r", c.r);
    tensors.emplace_back("y", y.detach());
    tensors.emplace_back("grad.x", c.x.grad());
    const std::string name = case_name(n, k), file = name + ".safetensors";
    const std::string path = (std::filesystem::path(o.export_dir) / file).string();
    tf::nn::save_safetensors(path, tensors, {{"tinyformer.case", name}});

    const tf::nn::SafetensorsFile back = tf::nn::load_safetensors(path);
    TF_CHECK(back.tensors.size() == tensors.size(), "benchmark_libtorch: ", path, " holds ",
             back.tensors.size(), " tensors, ", tensors.size(), " were written");
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto& [want_name, want] = tensors[i];
      const auto& [got_name, got] = back.tensors[i];
      TF_CHECK(got_name == want_name && got.dtype() == want.dtype() &&
                   got.shape() == want.shape() && values(got) == values(want),
               "benchmark_libtorch: ", path, ": ", want_name, " does not read back as written");
    }
    std::printf("exported %-12s %s (%zu tensors, read back equal)\n", name.c_str(), path.c_str(),
                tensors.size());
    cases.push_back(
        {{"name", name},
         {"file", file},
         {"n", n},
         {"k", k == 0 ? nlohmann::json(nullptr) : nlohmann::json(k)},
         {"attention", k == 0 ? "full" : "linformer"},
         {"projection",
          k == 0 ? nlohmann::json(nullptr)
                 : nlohmann::json{{"shape", {k, n}},
                                  {"shared_by", "keys, values and heads"},
                                  {"applied", "E (x W_K + b_K) before the heads split"}}},
         {"parameters", roles}});
    tf::empty_cache();
  }
  const nlohmann::json index = {
      {"config",
       {{"d_model", o.d_model},
        {"heads", o.heads},
        {"d_ff", o.d_ff},
        {"batch", o.batch},
        {"seed", o.seed},
        {"dtype", o.export_float64 ? "float64" : "float32"},
        {"activation", "relu"},
        {"dropout", 0.0},
        {"layer_norm_eps", 1e-5},
        {"norm", "post"},
        {"layout",
         "h = norm1(x + attention(x)), y = norm2(h + fc2(relu(fc1(h)))); attention: "
         "q, k, v = q_proj(x), k_proj(x), v_proj(x); Linformer: k, v = E k, E v with one "
         "E [k, n]; heads split d_model; softmax(q k^T / sqrt(d_model / heads)) v; out_proj"},
        {"loss", "sum(y * r)"}}},
      {"cases", cases}};
  const std::string index_path = (std::filesystem::path(o.export_dir) / "cases.json").string();
  std::ofstream(index_path) << index.dump(2) << "\n";
  std::printf("index written to %s\n", index_path.c_str());
}

// Times tinyformer alone on every case, forward and forward+backward as measure() does, for a
// driver that alternates this program with another framework's under the same load. No check
// against libtorch runs here (the other framework checks against --export's files).
void run_ours_only(const Options& o, const nlohmann::json& environment) {
  const auto nothing = [] {};
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-6s %-15s | %-20s\n", "n", "layer", "tinyformer ms");
  for (const auto& [n, k] : timed_cases(o)) {
    Case c = make_case(o, n, k, o.batch, tf::DType::float32);
    set_mixed(c, o.bf16);
    // Forward and forward+backward in one interleaved set, each job watched on its own.
    std::vector<bench::Job> jobs = {{"forward", nothing, [&] {
                                       tf::NoGradGuard no_grad;
                                       tf::Tensor y = forward_ours(c);
                                     }}};
    if (!o.forward_only) {
      jobs.push_back({"forward+backward", [&] { zero_ours(c); }, [&] { train_ours(c); }});
    }
    // No probe: the driver compares these times with another process's, which has none.
    bench::StopRule rule = stop_rule(o);
    rule.probe = nullptr;
    const bench::Result timed = bench::run(jobs, {}, rule);
    const bench::JobStats& forward_stats = timed.job("forward");
    struct {
      double median = 0, min = 0;
    } train, forward{forward_stats.median_ms, forward_stats.min_ms};
    if (!o.forward_only) {
      const bench::JobStats& t = timed.job("forward+backward");
      train = {t.median_ms, t.min_ms};
    }
    std::printf("%-6lld %-15s | %-20s\n", static_cast<long long>(n), c.label().c_str(),
                pair(train.median, forward.median, o.forward_only).c_str());
    std::fflush(stdout);
    auto ms = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    results.push_back({{"name", case_name(n, k)},
                       {"n", n},
                       {"k", k == 0 ? nlohmann::json(nullptr) : nlohmann::json(k)},
                       {"layer", c.label()},
                       {"tinyformer",
                        {{"train_ms", ms(train.median)},
                         {"train_min_ms", ms(train.min)},
                         {"forward_ms", forward.median},
                         {"forward_min_ms", forward.min}}}});
    tf::empty_cache();
  }
  std::ofstream(o.json_path) << nlohmann::json{{"config",
                                                {{"d_model", o.d_model},
                                                 {"heads", o.heads},
                                                 {"d_ff", o.d_ff},
                                                 {"batch", o.batch},
                                                 {"threads", o.threads},
                                                 {"reps", o.reps},
                                                 {"warmup", o.warmup},
                                                 {"forward_only", o.forward_only},
                                                 {"ours_only", true},
                                                 {"activation", "relu"},
                                                 {"norm", "post"},
                                                 {"dtype", "float32"},
                                                 {"tinyformer_bf16_products", o.bf16}}},
                                               {"environment", environment},
                                               {"results", results}}
                                    .dump(2)
                             << "\n";
  std::printf("results written to %s\n", o.json_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "An encoder layer in tinyformer and in libtorch: agreement, then speed. The defaults take "
      "about 10 minutes on 2 cores (at most --budget seconds per case beyond the first "
      "--min-rounds rounds), --quick about one"};
  Options o;
  app.add_option("--n", o.ns, "sequence lengths")->delimiter(',');
  app.add_option("--k", o.ks, "Linformer projected lengths (k < n are timed)")->delimiter(',');
  auto* batch_option = app.add_option("--batch", o.batch);
  app.add_option("--d-model", o.d_model);
  app.add_option("--heads", o.heads);
  app.add_option("--d-ff", o.d_ff);
  auto* budget_option =
      app.add_option("--budget", o.budget_s,
                     "seconds per case (both frameworks, forward and forward+backward, timed "
                     "together), warm-up included; the first --min-rounds rounds always run")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  app.add_option("--target-spread", o.target_spread,
                 "stop a case once every ratio's median is known to this relative precision "
                 "(half-width of its 95% confidence interval)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  auto* min_rounds_option = app.add_option("--min-rounds", o.min_rounds, "timed rounds at least")
                                ->check(CLI::Range(1, 1000000))
                                ->capture_default_str();
  app.add_option("--max-rounds", o.max_rounds, "timed rounds at most")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--reps", o.reps,
                 "exactly this many timed rounds per case, instead of the stop rule")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", o.warmup,
                 "untimed rounds first, at least (more, up to 6, until two consecutive times of "
                 "every job agree within 5%)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_flag("--quick", o.quick,
               "n = 256 and 512, k = 64, 3 rounds at least and 5 s per case unless given: about "
               "a minute on 2 cores");
  app.add_option("--peak-size", o.peak_size,
                 "the ceiling's reference: a square float32 product of this size")
      ->check(CLI::Range(16, 16384))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "threads of both frameworks")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--rtol", o.rtol,
                 "largest float32 output difference allowed, relative to the largest value");
  app.add_option("--rtol64", o.rtol64,
                 "the same for float64 outputs and gradients (input and parameters)");
  app.add_option("--seed", o.seed);
  app.add_option("--json", o.json_path, "where to write the results")->capture_default_str();
  app.add_flag("--forward-only", o.forward_only, "time the forward pass only");
  app.add_flag("--bf16", o.bf16,
               "time tinyformer in mixed precision (nn::MixedPrecision: bfloat16 products with "
               "float32 results and float32 masters; fast where the CPU has bfloat16 "
               "instructions); libtorch stays float32. The outputs are checked against "
               "--rtol-bf16");
  app.add_option("--rtol-bf16", o.rtol_bf16, "output agreement required with --bf16");
  app.add_flag("--profile", o.profile,
               "after the timings, tinyformer's forward+backward of each case once more under "
               "tf::Profiler: time per op and between ops; then ratio / ceiling split into the "
               "products' rate in the layer against the reference product's and their share of "
               "the wall time (7 profiled calls, each after a reference product)");
  app.add_flag("--check-only", o.check_only,
               "only the agreement checks, at n = 64, batch 2, k = 16 and 64 unless given; "
               "exits non-zero on disagreement");
  app.add_option("--export", o.export_dir,
                 "write each case (weights, input, backward seed, tinyformer's output and "
                 "gradients) to DIR/<case>.safetensors and an index DIR/cases.json, then exit; "
                 "examples/benchmark_pytorch.py reads them");
  app.add_flag("--export-float64", o.export_float64, "export the cases in float64");
  app.add_flag("!--no-probe", o.probe,
               "count every round: without the probe that leaves out the times taken while the "
               "host ran the threads on distant cores (bench_timing.h)");
  app.add_flag("--ours-only", o.ours_only,
               "time tinyformer alone (no libtorch, no check), for a driver alternating this "
               "program with another framework's");
  CLI11_PARSE(app, argc, argv);

  try {
    TF_CHECK(o.d_model > 0 && o.heads > 0 && o.d_model % o.heads == 0 && o.d_ff > 0 && o.batch > 0,
             "benchmark_libtorch: expected positive sizes and d_model divisible by heads, got "
             "d_model=",
             o.d_model, ", heads=", o.heads, ", d_ff=", o.d_ff, ", batch=", o.batch);
    if (o.check_only) {
      if (app.count("--n") == 0) o.ns = {64};
      if (app.count("--k") == 0) o.ks = {16, 64};
      if (batch_option->count() == 0) o.batch = 2;
    }
    if (o.quick) {
      if (app.count("--n") == 0) o.ns = {256, 512};
      if (app.count("--k") == 0) o.ks = {64};
      if (budget_option->count() == 0) o.budget_s = 5;
      if (min_rounds_option->count() == 0) o.min_rounds = 3;
    }
    for (std::int64_t n : o.ns) TF_CHECK(n > 0, "benchmark_libtorch: expected n > 0, got ", n);
    for (std::int64_t k : o.ks) TF_CHECK(k > 0, "benchmark_libtorch: expected k > 0, got ", k);

    // Both frameworks run their loops on the same OpenMP runtime (libgomp); libtorch's
    // inter-op pool is not used by a single layer, so it gets one thread.
    at::set_num_interop_threads(1);
    at::set_num_threads(o.threads);
    omp_set_num_threads(o.threads);
    torch::manual_seed(static_cast<std::uint64_t>(o.seed));
    const nlohmann::json environment = describe_environment();
    if (!o.export_dir.empty()) {
      export_cases(o);
      return 0;
    }
    if (o.ours_only) {
      run_ours_only(o, environment);
      return 0;
    }
    std::printf(
        "post-norm encoder layer: d_model %lld, %lld heads, ff %lld, ReLU, dropout 0, "
        "batch %lld, float32, %d threads\n",
        static_cast<long long>(o.d_model), static_cast<long long>(o.heads),
        static_cast<long long>(o.d_ff), static_cast<long long>(o.batch), o.threads);
    if (o.bf16) {
      std::printf(
          "--bf16: tinyformer runs in mixed precision (nn::MixedPrecision: float32 masters, "
          "bfloat16 copies refreshed per step, bfloat16 products with float32 results):\n%s\n",
          tf::runtime_info().c_str());
    }
    const bench::StopRule rule = stop_rule(o);
    if (!o.check_only) {
      std::printf(
          "timing: per case, both frameworks (forward and forward+backward) and the reference "
          "product are one set of jobs taking turns in an order that changes every round: %s. "
          "A ratio is the median of the per-round ratios torch / tinyformer, +- the half-width "
          "of its 95%% confidence interval. forward: inference, no graph (NoGradGuard in both); "
          "forward+backward: the input requires grad, loss sum(out * r) for a fixed random r\n",
          bench::describe(rule).c_str());
      std::printf(
          "ceiling: libtorch's time over the time tinyformer's matrix products alone would take "
          "at the rate of a [%lld x %lld] x [%lld x %lld] product through tinyformer%s, timed "
          "in the same rounds, everything else free: no implementation whose products run at "
          "that rate can beat libtorch by more\n",
          static_cast<long long>(o.peak_size), static_cast<long long>(o.peak_size),
          static_cast<long long>(o.peak_size), static_cast<long long>(o.peak_size),
          o.bf16 ? " (bfloat16 operands)" : "");
    }
    std::printf("\n");

    std::vector<Row> rows;
    nlohmann::json sets = nlohmann::json::array(), ratios = nlohmann::json::array();
    std::vector<std::string> profiles;
    std::optional<PeakProduct> peak;
    if (!o.check_only) peak.emplace(o.peak_size, o.bf16);
    for (std::int64_t n : o.ns) {
      std::vector<std::int64_t> kinds = {0};
      for (std::int64_t k : o.ks) {
        // Timing k >= n would compare nothing Linformer is for; the check still covers k = n.
        if (k < n || (o.check_only && k == n)) kinds.push_back(k);
      }
      for (std::int64_t k : kinds) {
        // The float64 check runs at batch 2 at most: batching is still covered, and at n = 4096
        // each float64 attention matrix ([2, 4, 4096, 4096]) is 1 GiB instead of 2.
        std::vector<Agreement> agreements64;
        {
          Case c64 = make_case(o, n, k, std::min<std::int64_t>(o.batch, 2), tf::DType::float64);
          agreements64 = check(c64, o.rtol64);
        }
        tf::empty_cache();
        Case c = make_case(o, n, k, o.batch, tf::DType::float32);
        std::vector<Agreement> agreements = check(c, o.rtol);
        if (o.bf16) {
          set_mixed(c, true);
          agreements = check(c, o.rtol_bf16);
        }
        if (o.check_only) continue;
        auto [case_rows, result] = measure(c, agreements, agreements64, o, *peak);
        std::printf("n=%lld, %s:\n%s\n", static_cast<long long>(n), c.label().c_str(),
                    result.report().c_str());
        nlohmann::json set = result.to_json();
        set["n"] = n;
        set["layer"] = c.label();
        sets.push_back(std::move(set));
        for (Row& r : case_rows) {
          add_ratios(ratios, r, o.forward_only);
          rows.push_back(std::move(r));
        }
        if (o.profile) {
          std::string profile =
              "tinyformer forward+backward, n=" + std::to_string(n) + ", " + c.label() + ":\n";
          {
            zero_ours(c);
            const tf::Profiler profiler(/*by_shape=*/true);
            train_ours(c);
            profile += profiler.table(60);
          }
          profile += ceiling_split(c, *peak);
          profiles.push_back(std::move(profile));
        }
        std::fflush(stdout);
        tf::empty_cache();  // the next case should not start with this one's cached blocks
      }
    }
    if (o.check_only) {
      std::printf(
          "all checks agree: float32 outputs within %.0e, float64 outputs and gradients "
          "within %.0e\n",
          o.rtol, o.rtol64);
      return 0;
    }
    std::printf(
        "\nms per layer call, forward+backward (forward): medians and the fastest runs; ratio = "
        "torch / tinyformer (median of the per-round ratios; above 1: tinyformer is faster), +- "
        "the half-width of its 95%% confidence interval; fastest runs: the ratio of the "
        "fastest runs\n");
    print_header();
    for (const Row& r : rows) print_row(r, o.forward_only);
    int unconverged = 0;
    if (rule.min_rounds != rule.max_rounds) {  // a fixed number of rounds has no target
      for (const nlohmann::json& s : sets) unconverged += s["stop"] != "converged";
    }
    if (unconverged > 0) {
      std::printf(
          "%d of %zu cases stopped at the budget or the round limit before every ratio was "
          "within +-%.1f%% (see each case's lines above)\n",
          unconverged, sets.size(), 100 * o.target_spread);
    }
    for (const std::string& p : profiles) std::printf("\n%s", p.c_str());

    nlohmann::json results = nlohmann::json::array();
    for (const Row& r : rows) results.push_back(to_json(r));
    std::ofstream(o.json_path) << nlohmann::json{{"program", "benchmark_libtorch"},
                                                 {"config",
                                                  {{"d_model", o.d_model},
                                                   {"heads", o.heads},
                                                   {"d_ff", o.d_ff},
                                                   {"batch", o.batch},
                                                   {"threads", o.threads},
                                                   {"budget_s", rule.budget_s},
                                                   {"target_spread", rule.target_spread},
                                                   {"min_rounds", rule.min_rounds},
                                                   {"max_rounds", rule.max_rounds},
                                                   {"min_warmup", rule.min_warmup},
                                                   {"max_warmup", rule.max_warmup},
                                                   {"forward_only", o.forward_only},
                                                   {"activation", "relu"},
                                                   {"norm", "post"},
                                                   {"dtype", "float32"},
                                                   {"tinyformer_bf16_products", o.bf16},
                                                   {"peak_size", o.peak_size}}},
                                                 {"environment", environment},
                                                 {"results", results},
                                                 {"ratios", ratios},
                                                 {"sets", sets}}
                                      .dump(2)
                               << "\n";
    std::printf(
        "results written to %s; to check that a second run reproduces the ratios: "
        "examples/compare_benchmark_runs.py FIRST.json SECOND.json\n",
        o.json_path.c_str());
  } catch (const tf::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());  // our messages name the program already
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark_libtorch: %s\n", e.what());
    return 1;
  }
  return 0;
}
