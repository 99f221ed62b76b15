// Profiler: a Backend that forwards every op of core/ops.def to the real backend and times it.
#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "core/backend.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace tinyformer {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_active{false};
std::atomic<bool> g_paused{false};  // the live Profiler is paused
std::atomic<bool> g_by_shape{false};
std::mutex g_mutex;
std::map<std::string, OpProfile>& rows() {
  static std::map<std::string, OpProfile> table;
  return table;
}

// What a call adds to its row besides its time: the kind within the op's family, the
// floating-point work of the products, and the bytes of its tensor operands.
struct Detail {
  const char* kind = nullptr;
  std::string shape;
  double flops = 0;
  double bytes = 0;
};

template <typename T>
double operand_bytes(const T& arg) {
  if constexpr (std::is_same_v<T, Tensor>) {
    if (!arg.defined()) return 0;
    return static_cast<double>(arg.numel()) * static_cast<double>(element_size(arg.dtype()));
  } else {
    return 0;
  }
}

const char* pool_name(PoolKind kind) {
  return kind == PoolKind::average ? "average" : "max";
}
const char* random_name(RandomKind kind) {
  switch (kind) {
    case RandomKind::normal:
      return "normal";
    case RandomKind::uniform:
      return "uniform";
    case RandomKind::bernoulli:
      return "bernoulli";
    case RandomKind::scaled_bernoulli:
      return "scaled_bernoulli";
  }
  return "?";
}

// "B x [M x K] @ [K x N]" with ^T on an operand stored column-major; "(bcast)" on one whose
// batch stride is 0.
// The matrices a product operand t ([batch..., R, C]) holds: its batch dims' sizes multiplied,
// a broadcast dim (stride 0) counting once.
std::int64_t operand_matrices(const Tensor& t) {
  std::int64_t matrices = 1;
  for (std::int64_t d = 0; d + 2 < t.dim(); ++d) matrices *= t.stride(d) == 0 ? 1 : t.size(d);
  return matrices;
}

// The number of products: the batch dims' sizes multiplied (two batch dims are one batch of
// B1 * B2 products).
std::int64_t product_batch(const Tensor& a, const Tensor& b) {
  std::int64_t batch = 1;
  for (std::int64_t d = 0; d + 2 < a.dim(); ++d) batch *= std::max(a.size(d), b.size(d));
  return batch;
}

// "16x[256x64][64x256]^T": the batch, then each operand's matrix, ^T when it is read
// column-major, (bcast) when it holds fewer matrices than the batch (one shared by several
// products).
std::string product_shape(const Tensor& a, const Tensor& b) {
  const std::int64_t batch = product_batch(a, b);
  const auto operand = [batch](const Tensor& t) {
    std::string s = "[" + std::to_string(t.size(-2)) + "x" + std::to_string(t.size(-1)) + "]";
    if (t.size(-2) > 1 && t.size(-1) > 1 && t.stride(-2) == 1) s += "^T";
    if (operand_matrices(t) < batch) s += "(bcast)";
    return s;
  };
  return std::to_string(batch) + "x" + operand(a) + operand(b);
}

// "[4x256x4x64] strides [65536,64,256,1]"
std::string copy_shape(const Tensor& src) {
  std::ostringstream s;
  s << '[';
  for (std::int64_t i = 0; i < src.dim(); ++i) s << (i > 0 ? "x" : "") << src.size(i);
  s << "] strides [";
  for (std::int64_t i = 0; i < src.dim(); ++i) s << (i > 0 ? "," : "") << src.stride(i);
  s << ']';
  return s.str();
}

template <Op op, typename... A>
Detail detail_of(const A&... args) {
  Detail d;
  d.bytes = (0.0 + ... + operand_bytes(args));
  const auto t = std::forward_as_tuple(args...);
  if constexpr (op == Op::unary || op == Op::unary_backward) {
    d.kind = unary_name(std::get<0>(t));
  } else if constexpr (op == Op::binary) {
    d.kind = binary_name(std::get<0>(t));
  } else if constexpr (op == Op::reduce) {
    d.kind = reduce_name(std::get<0>(t));
    // By shape: the source's layout and the result's shape ("[32x128x64] strides [...] ->
    // [1x128x64]"), which tell a full reduction from one over a leading or the innermost dim.
    if (g_by_shape.load(std::memory_order_relaxed)) {
      const Tensor& out = std::get<3>(t);
      std::ostringstream s;
      s << copy_shape(std::get<1>(t)) << " -> [";
      for (std::int64_t i = 0; i < out.dim(); ++i) s << (i > 0 ? "x" : "") << out.size(i);
      s << ']';
      d.shape = s.str();
    }
  } else if constexpr (op == Op::pool1d || op == Op::pool1d_backward) {
    d.kind = pool_name(std::get<0>(t));
  } else if constexpr (op == Op::random) {
    d.kind = random_name(std::get<1>(t));
  } else if constexpr (op == Op::softmax) {
    d.kind = std::get<1>(t) ? "log" : nullptr;
  } else if constexpr (op == Op::matmul) {
    // a: [B, M, K], out: [B, M, N] (or [B1, B2, ...] each)
    const Tensor& a = std::get<0>(t);
    const Tensor& out = std::get<2>(t);
    const Tensor& b = std::get<1>(t);
    d.flops = 2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.size(-1));
    // The bytes read and written: a broadcast operand's matrices once.
    const auto matrix_bytes = [](const Tensor& x) {
      return static_cast<double>(x.size(-2) * x.size(-1)) *
             static_cast<double>(element_size(x.dtype()));
    };
    d.bytes = static_cast<double>(operand_matrices(a)) * matrix_bytes(a) +
              static_cast<double>(operand_matrices(b)) * matrix_bytes(b) + operand_bytes(out);
    if (g_by_shape.load(std::memory_order_relaxed)) d.shape = product_shape(a, b);
  } else if constexpr (op == Op::linear) {
    // x: [M, K], out: [M, N]; the kind is the activation epilogue, if any
    const Tensor& x = std::get<0>(t);
    const Tensor& out = std::get<4>(t);
    const Epilogue epilogue = std::get<3>(t);
    d.kind = epilogue == Epilogue::none ? nullptr : epilogue_name(epilogue);
    d.flops = 2.0 * static_cast<double>(out.numel()) * static_cast<double>(x.size(1));
    // In the product's notation: "1x[M x K][K x N]^T", the weight read transposed.
    if (g_by_shape.load(std::memory_order_relaxed)) {
      const Tensor& weight = std::get<1>(t);
      d.shape = "1x[" + std::to_string(x.size(0)) + "x" + std::to_string(x.size(1)) + "][" +
                std::to_string(weight.size(1)) + "x" + std::to_string(weight.size(0)) + "]^T";
    }
  } else if constexpr (op == Op::attention) {
    // Its two products: scores q k^T ([..., n, m] by d) and probs v ([..., n, dv] by m).
    const Tensor& query = std::get<0>(t);
    const Tensor& value = std::get<2>(t);
    const Tensor& probs = std::get<6>(t);
    d.flops = 2.0 * static_cast<double>(probs.numel()) *
              static_cast<double>(query.size(-1) + value.size(-1));
  } else if constexpr (op == Op::attention_backward) {
    // Its four products: dP = grad v^T and grad_value = P^T grad (dv each), grad_query = dS k
    // and grad_key = dS^T q (d each), each over the [..., n, m] probabilities.
    const Tensor& query = std::get<1>(t);
    const Tensor& value = std::get<3>(t);
    const Tensor& probs = std::get<4>(t);
    d.flops = 4.0 * static_cast<double>(probs.numel()) *
              static_cast<double>(query.size(-1) + value.size(-1));
  } else if constexpr (op == Op::flash_attention) {
    // attention's two products over the [..., n, m] scores, which are never stored.
    const Tensor& query = std::get<0>(t);
    const Tensor& key = std::get<1>(t);
    const Tensor& value = std::get<2>(t);
    d.flops = 2.0 * static_cast<double>(query.numel() / std::max<std::int64_t>(query.size(-1), 1)) *
              static_cast<double>(key.size(-2)) *
              static_cast<double>(query.size(-1) + value.size(-1));
  } else if constexpr (op == Op::flash_attention_backward) {
    // The scores recomputed (d), dP (dv), grad_value (dv), grad_query and grad_key (d each).
    const Tensor& query = std::get<1>(t);
    const Tensor& key = std::get<2>(t);
    const Tensor& value = std::get<3>(t);
    d.flops = 2.0 * static_cast<double>(query.numel() / std::max<std::int64_t>(query.size(-1), 1)) *
              static_cast<double>(key.size(-2)) *
              static_cast<double>(3 * query.size(-1) + 2 * value.size(-1));
  } else if constexpr (op == Op::copy) {
    // By shape: the source's shape and strides, which tell a layout change (a transpose made
    // contiguous) from a plain copy.
    if (g_by_shape.load(std::memory_order_relaxed)) d.shape = copy_shape(std::get<0>(t));
  } else if constexpr (op == Op::conv1d) {
    // weight: [Cout, Cin, K], out: [B, Cout, Lout]
    const Tensor& weight = std::get<1>(t);
    const Tensor& out = std::get<5>(t);
    d.flops = 2.0 * static_cast<double>(out.numel()) *
              static_cast<double>(weight.size(1) * weight.size(2));
  }
  return d;
}

void record(Op op, const Backend& inner, const Detail& d, double seconds) {
  std::string name = op_name(op);
  if (d.kind != nullptr) name += std::string(" ") + d.kind;
  if (!d.shape.empty()) name += " " + d.shape;
  const std::string key = std::string(inner.name()) + "/" + name;
  const std::lock_guard lock(g_mutex);
  OpProfile& row = rows()[key];
  if (row.calls == 0) {
    row.name = name;
    row.device = inner.name();
  }
  row.calls += 1;
  row.seconds += seconds;
  row.flops += d.flops;
  row.bytes += d.bytes;
}

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}

  const char* name() const override { return inner_.name(); }
  std::string runtime_info() override { return inner_.runtime_info(); }
  Allocator& allocator() override { return inner_.allocator(); }
  void synchronize() override { inner_.synchronize(); }
  void memcpy(void* dst, Device dst_device, const void* src, Device src_device,
              std::size_t bytes) override {
    inner_.memcpy(dst, dst_device, src, src_device, bytes);
  }
  DeviceType device_type() const override { return inner_.device_type(); }
  bool supports(Op op, DType dtype) const override { return inner_.supports(op, dtype); }
  std::vector<std::uint8_t> communicator_id() override { return inner_.communicator_id(); }
  std::unique_ptr<DeviceCommunicator> communicator(const std::vector<std::uint8_t>& id, int rank,
                                                   int size, Device device) override {
    return inner_.communicator(id, rank, size, device);
  }

  // Each op: wait for queued work (a GPU runs asynchronously), run, wait for it, record.
#define TF_OP(name, params, args)                                     \
  void name params override {                                         \
    inner_.synchronize();                                             \
    const auto t0 = Clock::now();                                     \
    inner_.name args;                                                 \
    inner_.synchronize();                                             \
    const std::chrono::duration<double> took = Clock::now() - t0;     \
    record(Op::name, inner_, detail_of<Op::name> args, took.count()); \
  }
#include "core/ops.def"
#undef TF_OP

 private:
  Backend& inner_;
};

// printf into a string of whatever length the row needs (a copy of a many-dim view has a long
// name).
std::string format_row(const char* fmt, auto... values) {
  const int length = std::snprintf(nullptr, 0, fmt, values...);
  if (length <= 0) return {};
  std::string row(static_cast<std::size_t>(length) + 1, '\0');
  std::snprintf(row.data(), row.size(), fmt, values...);
  row.pop_back();
  return row;
}

}  // namespace

namespace detail {

bool profiler_active() {
  return g_active.load(std::memory_order_relaxed) && !g_paused.load(std::memory_order_relaxed);
}

Backend& profiled_backend(Backend& inner) {
  static std::mutex mutex;
  static std::map<const Backend*, std::unique_ptr<ProfilingBackend>> wrappers;
  const std::lock_guard lock(mutex);
  std::unique_ptr<ProfilingBackend>& wrapper = wrappers[&inner];
  if (!wrapper) wrapper = std::make_unique<ProfilingBackend>(inner);
  return *wrapper;
}

}  // namespace detail

Profiler::Profiler(bool by_shape) {
  bool expected = false;
  TF_CHECK(g_active.compare_exchange_strong(expected, true),
           "Profiler: expected no other Profiler to be alive, but one is");
  g_by_shape = by_shape;
  g_paused = false;
  reset();
}

Profiler::~Profiler() {
  g_paused = false;
  g_active = false;
}

void Profiler::reset() {
  {
    const std::lock_guard lock(g_mutex);
    rows().clear();
  }
  start_ = Clock::now();
  paused_at_ = start_;
  paused_for_ = {};
}

void Profiler::pause() {
  if (paused_) return;
  paused_ = true;
  paused_at_ = Clock::now();
  g_paused = true;
}

void Profiler::resume() {
  if (!paused_) return;
  paused_ = false;
  paused_for_ += Clock::now() - paused_at_;
  g_paused = false;
}

double Profiler::elapsed_seconds() const {
  const Clock::time_point now = paused_ ? paused_at_ : Clock::now();
  const std::chrono::duration<double> took = now - start_ - paused_for_;
  return took.count();
}

std::vector<OpProfile> Profiler::ops() const {
  std::vector<OpProfile> out;
  {
    const std::lock_guard lock(g_mutex);
    for (const auto& [key, row] : rows()) out.push_back(row);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
  return out;
}

std::string Profiler::table(std::size_t max_rows) const {
  const double wall = elapsed_seconds();
  const std::vector<OpProfile> all = ops();
  // The name column fits the longest name shown (at least the two summary lines').
  int width = 36;
  for (std::size_t i = 0; i < all.size() && i < max_rows; ++i) {
    width = std::max(width, static_cast<int>(all[i].name.size()));
  }
  std::ostringstream os;
  os << format_row("%-*s %-5s %6s %10s %7s %10s %s\n", width, "op", "dev", "calls", "total ms",
                   "share", "ms/call", "rate");
  double in_ops = 0;
  OpProfile rest;
  rest.name = "(other ops)";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const OpProfile& r = all[i];
    in_ops += r.seconds;
    if (i >= max_rows) {
      rest.calls += r.calls;
      rest.seconds += r.seconds;
      continue;
    }
    std::string rate;
    if (r.seconds > 0 && r.flops > 0) {
      rate = format_row("%.1f GFLOP/s", r.flops / r.seconds * 1e-9);
    } else if (r.seconds > 0 && r.bytes > 0) {
      rate = format_row("%.1f GB/s of operands", r.bytes / r.seconds * 1e-9);
    }
    os << format_row("%-*s %-5s %6lld %10.2f %6.1f%% %10.4f %s\n", width, r.name.c_str(),
                     r.device.c_str(), static_cast<long long>(r.calls), r.seconds * 1e3,
                     wall > 0 ? 100.0 * r.seconds / wall : 0.0,
                     r.seconds * 1e3 / static_cast<double>(r.calls), rate.c_str());
  }
  if (rest.calls > 0) {
    os << format_row("%-*s %-5s %6lld %10.2f %6.1f%%\n", width, rest.name.c_str(), "",
                     static_cast<long long>(rest.calls), rest.seconds * 1e3,
                     wall > 0 ? 100.0 * rest.seconds / wall : 0.0);
  }
  const double outside = std::max(0.0, wall - in_ops);
  os << format_row("%-*s %-5s %6s %10.2f %6.1f%%\n", width, "(between ops: autograd, allocation)",
                   "", "", outside * 1e3, wall > 0 ? 100.0 * outside / wall : 0.0);
  os << format_row("%-*s %-5s %6s %10.2f\n", width, "(wall time)", "", "", wall * 1e3);
  return os.str();
}

}  // namespace tinyformer
