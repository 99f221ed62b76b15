// Times tinyformer's CPU kernels against the best raw library call for the same work, measured
// in the same run: cblas_sgemm and oneDNN matmul for products, oneDNN primitives for softmax,
// layer norm and the elementwise ops. Prints the runtime (OpenBLAS core, oneDNN ISA, threads),
// then per op: the median time of ours (the backend's kernel, and the public op where there is
// one) and of each reference, GFLOP/s or GB/s, and ours as a fraction of the best raw speed
// (best raw time / our time; 1.00 means as fast), by medians and, less sensitive to other
// processes on the machine, by the fastest runs. Last, what waking the OpenMP team costs, and the
// CPU's arithmetic peak: what its fused multiply-adds do when nothing else limits them.
//
//   benchmark_ops            # the full table, about a minute on 2 cores (3 s per row at most,
//                            # beyond 5 rounds)
//   benchmark_ops --quick    # 1 s per row
//
// Unlike the other examples it calls the libraries directly (for the references) and the
// backend's kernels without autograd, so it sees the backend's headers.
#include <tinyformer/tinyformer.h>

#include <cblas.h>
#include <omp.h>

#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "bench_timing.h"
#include "core/backend.h"

using namespace tinyformer;

namespace {

// The stop rule per row (bench_timing.h): rounds until ours against each reference is known
// within 2%, or the row's budget ends; --quick shortens it.
bench::StopRule g_rule = [] {
  bench::StopRule rule;
  rule.budget_s = 3;
  return rule;
}();

// Median and fastest seconds of one function's runs.
struct Stat {
  double median = 0, min = 0;
};

// Times the functions as one interleaved set (bench::run): warm-up runs of each (which also
// create and cache primitives and touch every page), then rounds of one run each, in an order
// that changes every round, so that a change in machine load hits all of them alike, until the
// ratios of each reference (cblas, oneDNN: fs[2], fs[3]) to ours (fs[0]) are known. An empty
// function gets zeros. Also returns, per reference, the median of the per-round ratios
// reference / ours and its spread (zeros where it is absent). `setup`, when given, runs untimed
// before every timed run of each function.
struct Timings {
  std::vector<Stat> stats;
  std::vector<bench::RatioStats> raw_over_ours;  // cblas, oneDNN
  std::string summary;  // the rounds, and whether a limit ended them before the target spread
};

std::string reference_name(std::size_t i) {
  return i == 2 ? "cblas / ours" : "oneDNN / ours";
}

Timings time_all(const std::vector<std::function<void()>>& fs,
                 const std::function<void()>& setup = nullptr) {
  std::vector<bench::Job> jobs;
  std::vector<std::size_t> job_of(fs.size(), fs.size());
  for (std::size_t i = 0; i < fs.size(); ++i) {
    if (!fs[i]) continue;
    job_of[i] = jobs.size();
    jobs.push_back({"function " + std::to_string(i), setup, fs[i]});
  }
  std::vector<bench::Ratio> ratios;
  for (std::size_t i : {std::size_t{2}, std::size_t{3}}) {
    if (job_of[0] < fs.size() && job_of[i] < fs.size()) {
      ratios.push_back({reference_name(i), job_of[i], job_of[0]});
    }
  }
  const bench::Result result = bench::run(jobs, ratios, g_rule);
  Timings t;
  for (std::size_t i = 0; i < fs.size(); ++i) {
    const bool timed = job_of[i] < fs.size();
    t.stats.push_back(
        timed ? Stat{result.jobs[job_of[i]].median_ms * 1e-3, result.jobs[job_of[i]].min_ms * 1e-3}
              : Stat{});
  }
  for (std::size_t i : {std::size_t{2}, std::size_t{3}}) {
    bench::RatioStats r;
    for (const bench::RatioStats& s : result.ratios) {
      if (s.name == reference_name(i)) r = s;
    }
    t.raw_over_ours.push_back(r);
  }
  t.summary = std::to_string(result.rounds);
  if (result.stop != bench::StopReason::converged) {
    t.summary += std::string(" (") + bench::to_string(result.stop) + " before the target)";
  }
  return t;
}

Backend& cpu() {
  return backend(Device::cpu());
}

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

// A raw oneDNN reference: a primitive made once, then executed and waited for.
struct RawPrimitive {
  dnnl::primitive primitive;
  std::unordered_map<int, dnnl::memory> args;
  void operator()() {
    primitive.execute(stream(), args);
    stream().wait();
  }
};

dnnl::memory::desc desc(const Shape& dims, const Shape& strides) {
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()),
                            dnnl::memory::data_type::f32,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}
dnnl::memory mem(const Tensor& t) {
  return dnnl::memory(desc(t.shape(), t.strides()), engine(), t.data_ptr());
}

// One line of the table: the work per call, and ours, the public op, cblas and oneDNN as
// functions (an empty one is not measured).
struct Row {
  Row(std::string op_name, std::string shape_text, std::string unit_name, double work_per_call)
      : op(std::move(op_name)),
        shape(std::move(shape_text)),
        unit(std::move(unit_name)),
        work(work_per_call) {}
  std::string op, shape, unit;
  double work;  // flops or bytes per call
  std::function<void()> ours, ours_public, blas, dnnl;
  std::function<void()> setup;  // untimed, before every timed call (evict_caches: cold rows)
};

void print_header() {
  std::printf("\n%-20s %-25s %9s %9s %9s %9s %9s %9s %7s %6s %7s  %s\n", "op", "shape", "ours ms",
              "public ms", "cblas ms", "oneDNN ms", "ours", "best raw", "vs raw", "+-", "(min)",
              "rounds");
}

void print_row(const Row& r) {
  const Timings timings = time_all({r.ours, r.ours_public, r.blas, r.dnnl}, r.setup);
  const auto& t = timings.stats;
  auto ms = [](double s) {
    char buf[32];
    if (s > 0) {
      std::snprintf(buf, sizeof buf, "%9.3f", s * 1e3);
    } else {
      std::snprintf(buf, sizeof buf, "%9s", "-");
    }
    return std::string(buf);
  };
  // The best raw call, by median and by fastest run; vs raw: the median of the per-round
  // ratios of the faster reference (by median) to ours.
  Stat best;
  bench::RatioStats best_ratio;
  for (std::size_t i : {std::size_t{2}, std::size_t{3}}) {
    const Stat& raw = t[i];
    if (raw.median > 0 && (best.median == 0 || raw.median < best.median)) {
      best.median = raw.median;
      best_ratio = timings.raw_over_ours[i - 2];
    }
    if (raw.min > 0 && (best.min == 0 || raw.min < best.min)) best.min = raw.min;
  }
  const char* unit = r.unit == "GFLOP/s" ? "GF" : "GB";  // per second, 1e9 either way
  std::printf("%-20s %-25s %s %s %s %s %6.1f %-2s %6.1f %-2s %7.2f %5.1f%% %7.2f  %s\n",
              r.op.c_str(), r.shape.c_str(), ms(t[0].median).c_str(), ms(t[1].median).c_str(),
              ms(t[2].median).c_str(), ms(t[3].median).c_str(), r.work / t[0].median / 1e9, unit,
              r.work / best.median / 1e9, unit, best_ratio.median, 100 * best_ratio.spread,
              best.min / t[0].min, timings.summary.c_str());
}

Tensor random_f32(const Shape& shape) {
  return randn(shape);
}

// Writes 64 MiB, more than the last-level caches of the CPUs measured (32-36 MiB), so that the
// next call finds its operands in memory, as a layer's backward does: its weight gradients
// read activations that were written long before. A hot loop keeps them in L2 and L3, which
// favours other kernels than the layer's case does (docs/matmul.md).
void evict_caches() {
  static std::vector<unsigned char> buffer(std::size_t{64} << 20);
  static unsigned char value = 0;
  std::memset(buffer.data(), ++value, buffer.size());
}

// --- matmul: out[b] = a[b] @ op(k[b]) ---

// a_store: [B, M, K], or [B, K, M] when a_transposed (then a is the transposed view, as the g
// of a weight gradient g^T x is); b_store: [B, K, N], or [B, N, K] when b_transposed (then b is
// the transposed view, as attention's K^T is). cold: the caches are evicted before every call.
void bench_matmul(const std::string& name, std::int64_t batch, std::int64_t m, std::int64_t k,
                  std::int64_t n, bool b_transposed, bool a_transposed = false, bool cold = false) {
  const Tensor a_store = random_f32(a_transposed ? Shape{batch, k, m} : Shape{batch, m, k});
  const Tensor a =
      a_transposed ? raw::as_strided(a_store, {batch, m, k}, {m * k, 1, m}, 0) : a_store;
  const Tensor b_store = random_f32(b_transposed ? Shape{batch, n, k} : Shape{batch, k, n});
  const Tensor b =
      b_transposed ? raw::as_strided(b_store, {batch, k, n}, {n * k, 1, k}, 0) : b_store;
  Tensor out = empty({batch, m, n});
  char shape[64];
  std::snprintf(shape, sizeof shape, "%ldx[%ldx%ldx%ld]%s%s", static_cast<long>(batch),
                static_cast<long>(m), static_cast<long>(k), static_cast<long>(n),
                a_transposed ? " A^T" : "", b_transposed ? " B^T" : "");
  Row row{name, shape, "GFLOP/s", 2.0 * static_cast<double>(batch * m * n * k)};
  if (cold) row.setup = evict_caches;

  row.ours = [&] { cpu().matmul(a, b, out); };
  // The public, differentiable op (no graph), which allocates its output.
  row.ours_public = [&] {
    NoGradGuard no_grad;
    Tensor at = a_transposed ? a_store.transpose(1, 2) : a_store;
    Tensor bt = b_transposed ? b_store.transpose(1, 2) : b_store;
    Tensor r = matmul(at, bt);
  };

  // cblas_sgemm: one call per batch element.
  const auto* pa = a_store.data<float>();
  const auto* pb = b_store.data<float>();
  auto* pc = out.data<float>();
  row.blas = [&] {
    for (std::int64_t i = 0; i < batch; ++i) {
      cblas_sgemm(CblasRowMajor, a_transposed ? CblasTrans : CblasNoTrans,
                  b_transposed ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                  static_cast<int>(n), static_cast<int>(k), 1.0f, pa + i * m * k,
                  static_cast<int>(a_transposed ? m : k), pb + i * k * n,
                  static_cast<int>(b_transposed ? k : n), 0.0f, pc + i * m * n,
                  static_cast<int>(n));
    }
  };

  // oneDNN matmul: one primitive for the whole batch, transposes in the strides.
  dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(desc(a.shape(), a.strides()), desc(b.shape(), b.strides()),
                         desc(out.shape(), out.strides())),
      engine());
  RawPrimitive raw_mm{
      dnnl::matmul(pd),
      {{DNNL_ARG_SRC, mem(a)}, {DNNL_ARG_WEIGHTS, mem(b)}, {DNNL_ARG_DST, mem(out)}}};
  row.dnnl = raw_mm;
  print_row(row);
}

// --- softmax and layer norm: oneDNN primitives as the reference ---

void bench_softmax(std::int64_t rows, std::int64_t cols) {
  const Tensor x = random_f32({rows, cols}), g = random_f32({rows, cols});
  Tensor y = empty({rows, cols}), dx = empty({rows, cols});
  const std::string shape = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  const double bytes = 2.0 * 4 * static_cast<double>(rows * cols);  // read x, write y

  Row fwd{"softmax", shape, "GB/s", bytes};
  fwd.ours = [&] { cpu().softmax(x, false, y); };
  fwd.ours_public = [&] {
    NoGradGuard no_grad;
    Tensor r = softmax(x, -1);
  };
  const auto d = desc({rows, cols}, {cols, 1});
  dnnl::softmax_forward::primitive_desc fpd(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, d, 1), engine());
  RawPrimitive raw_fwd{dnnl::softmax_forward(fpd),
                       {{DNNL_ARG_SRC, mem(x)}, {DNNL_ARG_DST, mem(y)}}};
  fwd.dnnl = raw_fwd;
  print_row(fwd);

  Row bwd{"softmax_backward", shape, "GB/s", 1.5 * bytes};  // read y, g, write dx
  cpu().softmax(x, false, y);
  bwd.ours = [&] { cpu().softmax_backward(y, g, false, dx); };
  dnnl::softmax_backward::primitive_desc bpd(dnnl::softmax_backward::desc(d, d, 1), engine(), fpd);
  RawPrimitive raw_bwd{
      dnnl::softmax_backward(bpd),
      {{DNNL_ARG_DST, mem(y)}, {DNNL_ARG_DIFF_DST, mem(g)}, {DNNL_ARG_DIFF_SRC, mem(dx)}}};
  bwd.dnnl = raw_bwd;
  print_row(bwd);
}

void bench_layer_norm(std::int64_t rows, std::int64_t cols) {
  const Tensor x = random_f32({rows, cols}), g = random_f32({rows, cols});
  const Tensor w = random_f32({cols}), b = random_f32({cols});
  Tensor y = empty({rows, cols}), dx = empty({rows, cols}), mean = empty({rows}),
         rstd = empty({rows}), var = empty({rows}), dw = empty({cols}), db = empty({cols});
  const std::string shape = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  const double bytes = 2.0 * 4 * static_cast<double>(rows * cols);

  Row fwd{"layer_norm", shape, "GB/s", bytes};
  fwd.ours = [&] { cpu().layer_norm(x, w, b, 1e-5, y, mean, rstd); };
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  const auto d = desc({rows, cols}, {cols, 1});
  dnnl::layer_normalization_forward::primitive_desc fpd(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, d, 1e-5f, flags),
      engine());
  RawPrimitive raw_fwd{dnnl::layer_normalization_forward(fpd),
                       {{DNNL_ARG_SRC, mem(x)},
                        {DNNL_ARG_DST, mem(y)},
                        {DNNL_ARG_MEAN, mem(mean)},
                        {DNNL_ARG_VARIANCE, mem(var)},
                        {DNNL_ARG_SCALE, mem(w)},
                        {DNNL_ARG_SHIFT, mem(b)}}};
  fwd.dnnl = raw_fwd;
  print_row(fwd);

  Row bwd{"layer_norm_backward", shape, "GB/s", 1.5 * bytes};  // read x, g, write dx
  cpu().layer_norm(x, w, b, 1e-5, y, mean, rstd);
  bwd.ours = [&] { cpu().layer_norm_backward(g, x, w, mean, rstd, dx, dw, db); };
  dnnl::layer_normalization_backward::primitive_desc bpd(
      dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, d, d, 1e-5f, flags),
      engine(), fpd);
  RawPrimitive raw_bwd{dnnl::layer_normalization_backward(bpd),
                       {{DNNL_ARG_SRC, mem(x)},
                        {DNNL_ARG_DIFF_DST, mem(g)},
                        {DNNL_ARG_MEAN, mem(mean)},
                        {DNNL_ARG_VARIANCE, mem(var)},
                        {DNNL_ARG_SCALE, mem(w)},
                        {DNNL_ARG_SHIFT, mem(b)},
                        {DNNL_ARG_DIFF_SRC, mem(dx)},
                        {DNNL_ARG_DIFF_SCALE, mem(dw)},
                        {DNNL_ARG_DIFF_SHIFT, mem(db)}}};
  bwd.dnnl = raw_bwd;
  print_row(bwd);
}

// --- elementwise: oneDNN binary add and eltwise gelu as the reference ---

void bench_elementwise(std::int64_t n) {
  const Tensor a = random_f32({n}), b = random_f32({n});
  Tensor out = empty({n});
  const std::string shape = "[" + std::to_string(n) + "]";
  const auto d = desc({n}, {1});

  Row add_row{"add", shape, "GB/s", 3.0 * 4 * static_cast<double>(n)};
  add_row.ours = [&] { cpu().binary(BinaryOp::add, a, b, out); };
  add_row.ours_public = [&] {
    NoGradGuard no_grad;
    Tensor r = add(a, b);
  };
  dnnl::binary::primitive_desc apd(dnnl::binary::desc(dnnl::algorithm::binary_add, d, d, d),
                                   engine());
  RawPrimitive raw_add{
      dnnl::binary(apd),
      {{DNNL_ARG_SRC_0, mem(a)}, {DNNL_ARG_SRC_1, mem(b)}, {DNNL_ARG_DST, mem(out)}}};
  add_row.dnnl = raw_add;
  print_row(add_row);

  Row gelu_row{"gelu (erf)", shape, "GB/s", 2.0 * 4 * static_cast<double>(n)};
  gelu_row.ours = [&] { cpu().unary(UnaryOp::gelu, a, out, 0.0); };
  gelu_row.ours_public = [&] {
    NoGradGuard no_grad;
    Tensor r = gelu(a);
  };
  dnnl::eltwise_forward::primitive_desc gpd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                  dnnl::algorithm::eltwise_gelu_erf, d, 0.f, 0.f),
      engine());
  RawPrimitive raw_gelu{dnnl::eltwise_forward(gpd),
                        {{DNNL_ARG_SRC, mem(a)}, {DNNL_ARG_DST, mem(out)}}};
  gelu_row.dnnl = raw_gelu;
  print_row(gelu_row);

  // out = g * gelu'(a): reads a and g, writes out.
  Row gelu_bwd{"gelu_backward (erf)", shape, "GB/s", 3.0 * 4 * static_cast<double>(n)};
  gelu_bwd.ours = [&] { cpu().unary_backward(UnaryOp::gelu, b, a, Tensor(), out, 0.0); };
  dnnl::eltwise_backward::primitive_desc gbpd(
      dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_gelu_erf, d, d, 0.f, 0.f), engine(),
      gpd);
  RawPrimitive raw_gelu_bwd{
      dnnl::eltwise_backward(gbpd),
      {{DNNL_ARG_SRC, mem(a)}, {DNNL_ARG_DIFF_DST, mem(b)}, {DNNL_ARG_DIFF_SRC, mem(out)}}};
  gelu_bwd.dnnl = raw_gelu_bwd;
  print_row(gelu_bwd);
}

// --- reductions: a oneDNN reorder of the same input as the reference ---

// Linformer's mean pooling (nn/projection.cpp) at train_mlm's defaults: keys [B, H, n, d] =
// [32, 4, 128, 16], a view of [B, n, H, d], summed over windows of n / k = 4 rows into k = 32.
// oneDNN's reduction primitive runs such a strided input on its reference loop (tens of times
// slower), so the reference is a reorder that reads the same view into a contiguous buffer: the
// same reads, four times the writes.
void bench_reduce() {
  const std::int64_t b = 32, h = 4, n = 128, d = 16, k = 32, w = n / k;
  const Tensor bnhd = random_f32({b, n, h, d});
  const Tensor windows = bnhd.permute({0, 2, 1, 3}).reshape({b, h, k, w, d});
  Tensor out = empty({b, h, k, 1, d}), gathered = empty({b, h, k, w, d});
  Row row{"sum, pooling windows", "[32x4x32x4x16] dim 3", "GB/s",
          4.0 * static_cast<double>(windows.numel() + out.numel())};
  row.ours = [&] { cpu().reduce(ReduceOp::sum, windows, {3}, out); };
  row.ours_public = [&] {
    NoGradGuard no_grad;
    Tensor r = sum(windows, {3}, true);
  };
  dnnl::memory src = mem(windows), dst = mem(gathered);
  RawPrimitive raw{dnnl::reorder(src, dst), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}};
  row.dnnl = raw;
  print_row(row);
}

// --- copies of a strided view: a oneDNN reorder of the same view as the reference ---

// Attention's heads at train_mlm's defaults: [B, n, H, d] = [32, 128, 4, 16] split into
// [B, H, n, d] (a copy of the permuted view into a contiguous tensor) and merged back (a copy
// into the permuted view of a contiguous [B, n, H, d]); both move rows of d = 16 floats, 64 bytes.
void bench_copy() {
  const std::int64_t b = 32, n = 128, h = 4, d = 16;
  const Tensor bnhd = random_f32({b, n, h, d});
  const Tensor split_view = bnhd.permute({0, 2, 1, 3});
  Tensor bhnd = empty({b, h, n, d});
  Tensor merged = empty({b, n, h, d});
  const Tensor merge_view = merged.permute({0, 2, 1, 3});
  const double bytes = 2.0 * 4 * static_cast<double>(bnhd.numel());

  Row split{"copy, heads split", "[32x128x4x16] -> [32x4x128x16]", "GB/s", bytes};
  split.ours = [&] { cpu().copy(split_view, bhnd); };
  split.ours_public = [&] {
    NoGradGuard no_grad;
    Tensor r = split_view.contiguous();
  };
  dnnl::memory split_src = mem(split_view), split_dst = mem(bhnd);
  split.dnnl = RawPrimitive{dnnl::reorder(split_src, split_dst),
                            {{DNNL_ARG_FROM, split_src}, {DNNL_ARG_TO, split_dst}}};
  print_row(split);

  Row merge{"copy, heads merge", "[32x4x128x16] -> [32x128x4x16]", "GB/s", bytes};
  merge.ours = [&] { cpu().copy(bhnd, merge_view); };
  dnnl::memory merge_src = mem(bhnd), merge_dst = mem(merge_view);
  merge.dnnl = RawPrimitive{dnnl::reorder(merge_src, merge_dst),
                            {{DNNL_ARG_FROM, merge_src}, {DNNL_ARG_TO, merge_dst}}};
  print_row(merge);
}

// --- a masked fill: Linformer's padded key rows set to 0 (train_listops: keys [32, 400, 64] and
// a mask per row), against a oneDNN reorder that reads and writes as many floats ---
void bench_where() {
  const std::int64_t b = 32, n = 400, d = 64;
  const Tensor x = random_f32({b, n, d});
  Tensor rows = empty({b, n, 1}, {.dtype = DType::boolean});
  for (std::int64_t i = 0; i < b * n; ++i) rows.data<bool>()[i] = i % 5 == 0;
  const Tensor zero = scalar_tensor(0.0);
  const Tensor cond = rows.expand({b, n, d}), fill = zero.reshape({1, 1, 1}).expand({b, n, d});
  Tensor out = empty({b, n, d});
  Row row{"where, a mask per row", "[32x400x64] by [32x400x1]", "GB/s",
          2.0 * 4 * static_cast<double>(x.numel())};
  row.ours = [&] { cpu().where(cond, fill, x, out); };
  row.ours_public = [&] {
    NoGradGuard no_grad;
    Tensor r = masked_fill(x, rows, 0.0);
  };
  dnnl::memory src = mem(x), dst = mem(out);
  row.dnnl = RawPrimitive{dnnl::reorder(src, dst), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}};
  print_row(row);
}

// --- random draws: dropout's Bernoulli mask, against a oneDNN reorder that writes as many bytes
// (and reads them too): what the mask would cost if drawing the numbers were free ---
void bench_random() {
  const std::int64_t n = std::int64_t{1} << 22;
  Tensor mask = empty({n}), source = random_f32({n});
  Row row{"random bernoulli", "[4194304] float32", "GB/s", 4.0 * static_cast<double>(n)};
  row.ours = [&] { cpu().random(mask, RandomKind::bernoulli, 7, 0, 0.9, 0.0); };
  dnnl::memory src = mem(source), dst = mem(mask);
  row.dnnl = RawPrimitive{dnnl::reorder(src, dst), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}};
  print_row(row);

  // Dropout's forward through the public function (the mask drawn with its scale, then one
  // product), against a reorder of x into y: the bytes a dropout must move at least (x read, y
  // written), as if the draw and the mask were free.
  Tensor x = random_f32({n}), y = empty({n});
  Generator generator(7);
  Row drop{"dropout p = 0.1", "[4194304] float32", "GB/s", 8.0 * static_cast<double>(n)};
  drop.ours = [&] {
    NoGradGuard no_grad;
    Tensor r = dropout(x, 0.1, true, &generator);
  };
  dnnl::memory from = mem(x), to = mem(y);
  drop.dnnl = RawPrimitive{dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}};
  print_row(drop);
}

// What a parallel region costs when it follows 5 us of work on the calling thread alone, as an
// op's pass follows the bookkeeping of the op before it: a region with nothing to do and copies
// split over the team, against the same copies on the calling thread (docs/threading.md; run
// with OMP_WAIT_POLICY=active to compare spinning threads). Medians of 61 regions.
void bench_team_wakeup() {
  using Clock = std::chrono::steady_clock;
  const auto us_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
  };
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<float> src(std::size_t{1} << 18, 1.0f), dst(src.size(), 0.0f);
  std::printf("\nparallel region after 5 us on the calling thread (%d threads):\n",
              omp_get_max_threads());
  std::printf("%-16s %12s %12s\n", "work", "team us", "one thread us");
  for (const std::int64_t kib : {0, 64, 256, 1024}) {
    const std::int64_t n = kib * 256;  // floats
    std::vector<double> team, one;
    for (int i = 0; i < 61; ++i) {
      const auto gap = Clock::now();
      while (us_since(gap) < 5) {
      }
      const auto start = Clock::now();
#pragma omp parallel
      {
        const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
        const std::int64_t chunk = (n + threads - 1) / threads;
        const std::int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
        if (begin < end) std::memcpy(dst.data() + begin, src.data() + begin, (end - begin) * 4);
      }
      team.push_back(us_since(start));
      const auto serial = Clock::now();
      if (n > 0) std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(n) * 4);
      one.push_back(us_since(serial));
    }
    const std::string work = kib == 0 ? "nothing" : "copy " + std::to_string(kib) + " KiB";
    std::printf("%-16s %12.1f %12.1f\n", work.c_str(), median(team), median(one));
  }
}

// Independent fused multiply-add chains in 12 vector registers (V, of LANES floats; P the
// intrinsics' prefix), `iters` steps each (x = x * a + b, never overflowing): what the CPU's
// widest float32 FMA does when nothing else limits it. Returns the sum of the lanes, so that the
// loop is not optimised away.
#define TF_FMA_CHAINS(V, P, LANES)                                                         \
  V x[12];                                                                                 \
  for (int i = 0; i < 12; ++i) x[i] = P##_set1_ps(0.001f * static_cast<float>(i));         \
  const V a = P##_set1_ps(0.999999f), b = P##_set1_ps(1e-7f);                              \
  for (std::int64_t it = 0; it < iters; ++it) {                                            \
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) x[i] = P##_fmadd_ps(x[i], a, b); \
  }                                                                                        \
  V sum = x[0];                                                                            \
  for (int i = 1; i < 12; ++i) sum = P##_add_ps(sum, x[i]);                                \
  float lanes[LANES];                                                                      \
  P##_storeu_ps(lanes, sum);                                                               \
  float total = 0;                                                                         \
  for (const float v : lanes) total += v;                                                  \
  return total

__attribute__((target("avx512f"))) float fma_chains_avx512(std::int64_t iters) {
  TF_FMA_CHAINS(__m512, _mm512, 16);
}
__attribute__((target("avx2,fma"))) float fma_chains_avx2(std::int64_t iters) {
  TF_FMA_CHAINS(__m256, _mm256, 8);
}
#undef TF_FMA_CHAINS

// The float32 arithmetic peak (the widest FMA the CPU has: AVX-512, else AVX2), GFLOP/s on one
// thread and on the OpenMP team, fastest of 5 runs: the bound behind every GFLOP/s above (the
// ceiling of benchmark_libtorch is a [2048]^2 product's rate, which runs below it).
void bench_fma_peak(bool tiny) {
  const bool wide = __builtin_cpu_supports("avx512f");
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::printf("\narithmetic peak: this CPU has neither AVX-512 nor AVX2 with FMA; not timed\n");
    return;
  }
  const std::int64_t iters = tiny ? 10000 : 20000000, lanes = wide ? 16 : 8;
  const auto chains = [&] { return wide ? fma_chains_avx512(iters) : fma_chains_avx2(iters); };
  const auto best = [&](int threads) {
    double fastest = 0;
    volatile float sink = 0;
    for (int run = 0; run < 5; ++run) {
      const auto start = std::chrono::steady_clock::now();
      float sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
      sum += chains();
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      sink = sink + sum;
      const double flops = 2.0 * 12 * static_cast<double>(lanes * iters) * threads;
      fastest = std::max(fastest, flops / s * 1e-9);
    }
    return fastest;
  };
  const int team = omp_get_max_threads();
  const double one = best(1), all = best(team);
  std::printf(
      "\narithmetic peak (independent %s fused multiply-adds, fastest of 5): %.1f GFLOP/s on "
      "one thread, %.1f on %d\n",
      wide ? "AVX-512" : "AVX2", one, all, team);
}

}  // namespace

int main(int argc, char** argv) {
  bool tiny = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      g_rule.min_rounds = 3;
      g_rule.budget_s = 1;
    } else if (std::strcmp(argv[i], "--tiny") == 0) {
      // Toy sizes and a tenth of a second per row: checks that the program runs (a ctest).
      tiny = true;
      g_rule.min_rounds = 3;
      g_rule.budget_s = 0.1;
    } else {
      std::fprintf(stderr, "usage: %s [--quick | --tiny]\n", argv[0]);
      return 2;
    }
  }
  std::printf("%s\n", cpu::runtime_info().c_str());
  std::printf(
      "per row: %s.\n'vs raw' = best raw time / our time: the median of the per-round ratios "
      "+- the half-width of its 95%% confidence interval, and (min) of the fastest runs\n",
      bench::describe(g_rule).c_str());
  try {
    // The sizes, divided by `d` with --tiny.
    const std::int64_t d = tiny ? 16 : 1;
    print_header();
    for (std::int64_t n : {512, 1024, 2048}) bench_matmul("matmul", 1, n / d, n / d, n / d, false);
    // Attention with 32 heads of 64 at n = 1024: scores = Q K^T, then out = P V.
    bench_matmul("matmul QK^T", 32 / d, 1024 / d, 64, 1024 / d, true);
    bench_matmul("matmul PV", 32 / d, 1024 / d, 1024 / d, 64, false);
    // Linformer's E gradient at k = 64, n = 512 (4 sequences, H*d = 256) in its two orientations:
    // g x^T, [64, 256] x [256, 512], and x g^T, [512, 256] x [256, 64] (docs/matmul.md).
    bench_matmul("matmul E grad g x^T", 4, 64 / d, 256 / d, 512 / d, true);
    bench_matmul("matmul E grad x g^T", 4, 512 / d, 256 / d, 64 / d, true);
    // Weight gradients g^T x of [256, 256] and [256, 1024] weights over 1024 and 16384 tokens:
    // the library's own kernel on AVX-512 (docs/matmul.md).
    bench_matmul("matmul dW = g^T x", 1, 256 / d, 1024 / d, 256 / d, false, true);
    bench_matmul("matmul dW = g^T x", 1, 256 / d, 1024 / d, 1024 / d, false, true);
    bench_matmul("matmul dW = g^T x", 1, 256 / d, 16384 / d, 256 / d, false, true);
    // The same with operands from memory, as in the encoder layer's backward (n = 256 and
    // 1024, batch 4), which the kernel choice is measured by.
    bench_matmul("dW = g^T x, cold", 1, 256 / d, 1024 / d, 256 / d, false, true, true);
    bench_matmul("dW = g^T x, cold", 1, 256 / d, 1024 / d, 1024 / d, false, true, true);
    bench_matmul("dW = g^T x, cold", 1, 256 / d, 4096 / d, 256 / d, false, true, true);
    bench_matmul("dW = g^T x, cold", 1, 256 / d, 4096 / d, 1024 / d, false, true, true);
    bench_softmax(16 * 1024 / d, 1024 / d);
    bench_layer_norm(8192 / d, 768 / d);
    bench_elementwise(16 * 1024 * 1024 / (d * d));
    bench_reduce();
    bench_copy();
    bench_where();
    bench_random();
    bench_team_wakeup();
    bench_fma_peak(tiny);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
