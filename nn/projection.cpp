// The built-in projection kinds and the registry.
#include "nn/projection.h"

#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "autograd/ops.h"
#include "nn/init.h"

namespace tinyformer::nn {

const char* projection_name(ProjectionKind kind) {
  switch (kind) {
    case ProjectionKind::linear:
      return "linear";
    case ProjectionKind::mean_pool:
      return "mean";
    case ProjectionKind::max_pool:
      return "max";
    case ProjectionKind::conv:
      return "conv";
    case ProjectionKind::identity:
      return "identity";
  }
  return "unknown";
}

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, ProjectionFactory>& registry() {
  static std::map<std::string, ProjectionFactory> r = {
      {"linear", [](const ProjectionSpec& s) { return std::make_shared<LinearProjection>(s); }},
      {"mean", [](const ProjectionSpec& s) { return std::make_shared<PoolProjection>(s, false); }},
      {"max", [](const ProjectionSpec& s) { return std::make_shared<PoolProjection>(s, true); }},
      {"conv", [](const ProjectionSpec& s) { return std::make_shared<ConvProjection>(s); }},
      {"identity", [](const ProjectionSpec& s) { return std::make_shared<IdentityProjection>(s); }},
  };
  return r;
}

void check_spec(const ProjectionSpec& spec, const char* op) {
  TF_CHECK(spec.k > 0 && spec.max_seq_len > 0 && spec.k <= spec.max_seq_len, op,
           ": expected 0 < k <= max_seq_len, got k=", spec.k, ", max_seq_len=", spec.max_seq_len);
  TF_CHECK(spec.heads > 0 && spec.head_dim > 0, op, ": expected positive heads and head_dim, got ",
           spec.heads, ", ", spec.head_dim);
}

// x: [B, H, n, d] -> n, after checking the layout every projection expects.
std::int64_t check_input(const Tensor& x, std::int64_t max_seq_len, const char* op) {
  TF_CHECK(x.defined() && x.dim() == 4, op, ": expected input [B, H, n, d], got ",
           x.defined() ? shape_str(x.shape()) : "an undefined Tensor");
  TF_CHECK(x.size(2) >= 1 && x.size(2) <= max_seq_len, op, ": the sequence has ", x.size(2),
           " rows, the projection was built for 1 to ", max_seq_len, " (max_seq_len)");
  return x.size(2);
}

// x: [B, H, n, d] -> [B, H, rows, d], zero rows (or `fill` rows) appended at the end.
Tensor pad_rows(const Tensor& x, std::int64_t rows, double fill = 0.0) {
  const std::int64_t n = x.size(2);
  if (rows == n) return x;
  Tensor pad = full({x.size(0), x.size(1), rows - n, x.size(3)}, fill,
                    {.dtype = x.dtype(), .device = x.device()});
  return cat({x, pad}, 2);
}

}  // namespace

void register_projection(const std::string& name, ProjectionFactory factory) {
  TF_CHECK(!name.empty() && factory != nullptr,
           "register_projection: expected a name and a factory");
  std::lock_guard lock(registry_mutex());
  registry()[name] = std::move(factory);
}

std::shared_ptr<Projection> make_projection(const std::string& name, const ProjectionSpec& spec) {
  ProjectionFactory factory;
  {
    std::lock_guard lock(registry_mutex());
    auto it = registry().find(name);
    if (it != registry().end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : projection_names()) known += (known.empty() ? "" : ", ") + n;
    fail("make_projection: unknown projection kind \"", name, "\" (registered: ", known, ")");
  }
  auto projection = factory(spec);
  TF_CHECK(projection != nullptr, "make_projection: the factory for \"", name, "\" returned null");
  return projection;
}

std::vector<std::string> projection_names() {
  std::lock_guard lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, f] : registry()) names.push_back(name);
  return names;
}

// --- linear: x' = E[:, :n] x (x: the keys or the values) ---

LinearProjection::LinearProjection(const ProjectionSpec& spec) {
  check_spec(spec, "LinearProjection");
  weight = register_parameter("weight", empty({spec.heads, spec.k, spec.max_seq_len}));
  init::normal_(weight, 0.0, 1.0 / std::sqrt(static_cast<double>(spec.k)));
}

Tensor LinearProjection::forward(const Tensor& x) const {
  const std::int64_t n = check_input(x, weight.size(2), "LinearProjection");
  TF_CHECK(weight.size(0) == 1 || weight.size(0) == x.size(1), "LinearProjection: built for ",
           weight.size(0), " heads, the input has ", x.size(1));
  // E: [heads, k, n] broadcasts over the batch (and over the heads when shared).
  Tensor e = weight.narrow(2, 0, n);
  if (weight.size(0) == 1) e = e.select(0, 0);
  return matmul(e, x);
}

std::string LinearProjection::extra_repr() const {
  return "heads=" + std::to_string(weight.size(0)) + ", k=" + std::to_string(weight.size(1)) +
         ", max_seq_len=" + std::to_string(weight.size(2));
}

// --- mean / max pooling over windows of w = ceil(n / k) rows ---

PoolProjection::PoolProjection(const ProjectionSpec& spec, bool max)
    : k_(spec.k), max_seq_len_(spec.max_seq_len), max_(max) {
  check_spec(spec, max ? "MaxPoolProjection" : "MeanPoolProjection");
}

Tensor PoolProjection::forward(const Tensor& x) const {
  const char* op = max_ ? "MaxPoolProjection" : "MeanPoolProjection";
  const std::int64_t n = check_input(x, max_seq_len_, op);
  const std::int64_t w = (n + k_ - 1) / k_;
  // real[i]: how many of window i's rows lie inside the sequence.
  std::vector<double> real(static_cast<std::size_t>(k_));
  for (std::int64_t i = 0; i < k_; ++i) {
    real[static_cast<std::size_t>(i)] =
        static_cast<double>(std::clamp<std::int64_t>(n - i * w, 0, w));
  }
  const Shape windows = {x.size(0), x.size(1), k_, w, x.size(3)};
  if (max_) {
    // Rows beyond n hold -inf so they never win; a window with no real row gives 0.
    Tensor padded = pad_rows(x, k_ * w, -std::numeric_limits<double>::infinity());
    Tensor pooled = std::get<0>(max(padded.reshape(windows), 3));
    Tensor has_rows = gt(from(real, {k_, 1}).to(x.dtype()).to(x.device()),
                         scalar_tensor(0.0, {.dtype = x.dtype(), .device = x.device()}));
    return where(has_rows, pooled, scalar_tensor(0.0, {.dtype = x.dtype(), .device = x.device()}));
  }
  Tensor summed = sum(pad_rows(x, k_ * w).reshape(windows), {3});
  for (double& r : real) r = r > 0 ? 1.0 / r : 0.0;
  return mul(summed, from(real, {k_, 1}).to(x.dtype()).to(x.device()));
}

// --- strided convolution, kernel = stride = ceil(max_seq_len / k) ---

ConvProjection::ConvProjection(const ProjectionSpec& spec)
    : k_(spec.k),
      max_seq_len_(spec.max_seq_len),
      window_((spec.max_seq_len + spec.k - 1) / spec.k) {
  check_spec(spec, "ConvProjection");
  weight = register_parameter("weight", empty({spec.head_dim, spec.head_dim, window_}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
}

Tensor ConvProjection::forward(const Tensor& x) const {
  check_input(x, max_seq_len_, "ConvProjection");
  const std::int64_t b = x.size(0), h = x.size(1), d = x.size(3);
  TF_CHECK(d == weight.size(0), "ConvProjection: built for head width ", weight.size(0),
           ", the input has ", d);
  // [B, H, k*w, d] -> [B*H, d, k*w]: channels are the features, the sequence is the length.
  Tensor seq = pad_rows(x, k_ * window_).reshape({b * h, k_ * window_, d}).transpose(1, 2);
  Tensor y = conv1d(seq.contiguous(), weight, Tensor(), window_, 0);  // [B*H, d, k]
  return y.transpose(1, 2).reshape({b, h, k_, d});
}

std::string ConvProjection::extra_repr() const {
  return "k=" + std::to_string(k_) + ", window=" + std::to_string(window_);
}

Tensor IdentityProjection::forward(const Tensor& x) const {
  TF_CHECK(x.defined() && x.dim() == 4 && x.size(2) == k_,
           "IdentityProjection: expected input [B, H, ", k_, ", d] (k must equal n), got ",
           x.defined() ? shape_str(x.shape()) : "an undefined Tensor");
  return x;
}

}  // namespace tinyformer::nn
