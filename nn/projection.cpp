// The built-in projection kinds and the registry.
#include "nn/projection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/init.h"

namespace tinyformer::nn {

const char* projection_init_name(ProjectionInit init) {
  return init == ProjectionInit::pooling ? "pooling" : "normal";
}

const char* projection_name(ProjectionKind kind) {
  switch (kind) {
    case ProjectionKind::linear:
      return "linear";
    case ProjectionKind::mean:
      return "mean";
    case ProjectionKind::max:
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

// The built-in kinds not replaced by register_projection since.
std::set<std::string>& builtin_kinds() {
  static std::set<std::string> kinds = {"linear", "mean", "max", "conv", "identity"};
  return kinds;
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

// x: [B, H, n, d] -> [B, H, rows, d], zero rows appended at the end.
Tensor pad_rows(const Tensor& x, std::int64_t rows) {
  const std::int64_t n = x.size(2);
  if (rows == n) return x;
  Tensor pad = zeros({x.size(0), x.size(1), rows - n, x.size(3)},
                     {.dtype = x.dtype(), .device = x.device()});
  return cat({x, pad}, 2);
}

// key_padding_mask: undefined or [B, n] bool (true = padding), checked against x: [B, H, n, d].
void check_padding_mask(const Tensor& key_padding_mask, const Tensor& x, const char* op) {
  if (!key_padding_mask.defined()) return;
  TF_CHECK(key_padding_mask.dtype() == DType::boolean && key_padding_mask.dim() == 2 &&
               key_padding_mask.size(0) == x.size(0) && key_padding_mask.size(1) == x.size(2),
           op, ": expected key_padding_mask of dtype bool and shape [", x.size(0), ", ", x.size(2),
           "] (true = padding), got ", key_padding_mask.dtype(), " ",
           shape_str(key_padding_mask.shape()));
}

// The real positions of each of the B sequences: where key_padding_mask is false, in order
// (all n positions without a mask). Reading the mask synchronises with its device.
std::vector<std::vector<std::int64_t>> real_positions(const Tensor& key_padding_mask,
                                                      std::int64_t batch, std::int64_t n) {
  std::vector<std::vector<std::int64_t>> real(static_cast<std::size_t>(batch));
  const std::vector<bool> padded =
      key_padding_mask.defined() ? key_padding_mask.to_vector<bool>() : std::vector<bool>();
  for (std::int64_t b = 0; b < batch; ++b) {
    auto& r = real[static_cast<std::size_t>(b)];
    for (std::int64_t j = 0; j < n; ++j) {
      if (padded.empty() || !padded[static_cast<std::size_t>(b * n + j)]) r.push_back(j);
    }
  }
  return real;
}

// empty: B * k flags -> a [B, k] bool mask on `device`, or undefined when no flag is set.
Tensor empty_rows_mask(const std::vector<bool>& empty, std::int64_t batch, std::int64_t k,
                       Device device) {
  for (bool e : empty) {
    if (e) return from<bool>(empty, {batch, k}, device);
  }
  return Tensor();
}

}  // namespace

Projected Projection::project(const Tensor& x, const Tensor& /*key_padding_mask*/) const {
  return {forward(x), Tensor()};
}

std::pair<std::int64_t, std::int64_t> pool_window(std::int64_t i, std::int64_t m, std::int64_t k) {
  TF_CHECK(k > 0 && i >= 0 && i < k && m >= 0,
           "pool_window: expected 0 <= i < k and m >= 0, got i=", i, ", m=", m, ", k=", k);
  if (m < k) return i < m ? std::pair{i, i + 1} : std::pair{m, m};
  return {i * m / k, ((i + 1) * m + k - 1) / k};
}

std::string canonical_projection_name(const std::string& name) {
  if (name == "mean_pool") return "mean";
  if (name == "max_pool") return "max";
  return name;
}

void register_projection(const std::string& name, ProjectionFactory factory) {
  TF_CHECK(!name.empty() && factory != nullptr,
           "register_projection: expected a name and a factory");
  std::lock_guard lock(registry_mutex());
  registry()[name] = std::move(factory);
  builtin_kinds().erase(name);
}

bool is_builtin_projection(const std::string& name) {
  std::lock_guard lock(registry_mutex());
  return builtin_kinds().count(canonical_projection_name(name)) != 0;
}

std::shared_ptr<Projection> make_projection(const std::string& name, const ProjectionSpec& spec) {
  ProjectionFactory factory;
  {
    std::lock_guard lock(registry_mutex());
    auto it = registry().find(canonical_projection_name(name));
    if (it != registry().end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : projection_names()) known += (known.empty() ? "" : ", ") + n;
    fail("make_projection: unknown projection kind \"", name, "\" (registered: ", known, ")");
  }
  auto projection = factory(spec);
  TF_CHECK(projection != nullptr, "make_projection: the factory for \"", name, "\" returned null");
  // The k a configuration (and a checkpoint's description of it) gives is the k that runs.
  TF_CHECK(projection->k() == spec.k, "make_projection: the factory for \"", name,
           "\" returned a projection of k=", projection->k(), ", expected k=", spec.k);
  return projection;
}

std::vector<std::string> projection_names() {
  std::lock_guard lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, f] : registry()) names.push_back(name);
  return names;
}

// --- linear: x' = E[:, :n] x (x: the keys or the values) ---

std::pair<std::int64_t, std::int64_t> pooling_start_window(std::int64_t head, std::int64_t i,
                                                           const ProjectionSpec& spec) {
  TF_CHECK(head >= 0 && head < spec.heads && i >= 0 && i < spec.k,
           "pooling_start_window: expected 0 <= head < ", spec.heads, " and 0 <= i < ", spec.k,
           ", got head=", head, ", i=", i);
  const std::int64_t len = spec.max_seq_len;
  const std::int64_t shift = head * (len / spec.k) / spec.heads;
  const auto [start, end] = pool_window(i, len, spec.k);
  return {i == 0 ? 0 : std::min(len, start + shift),
          i == spec.k - 1 ? len : std::min(len, end + shift)};
}

LinearProjection::LinearProjection(const ProjectionSpec& spec) {
  check_spec(spec, "LinearProjection");
  TF_CHECK(std::isfinite(spec.lr_scale) && spec.lr_scale > 0,
           "LinearProjection: expected a positive, finite lr_scale, got ", spec.lr_scale);
  weight = register_parameter("weight", empty({spec.heads, spec.k, spec.max_seq_len}));
  if (spec.init == ProjectionInit::normal) {
    init::normal_(weight, 0.0, 1.0 / std::sqrt(static_cast<double>(spec.k)));
  } else {
    // Row i averages window i of the full length, as mean pooling at n = max_seq_len does; with
    // a matrix per head, head h's windows are pooling_start_window's.
    const std::int64_t len = spec.max_seq_len;
    std::vector<double> e(static_cast<std::size_t>(spec.heads * spec.k * len), 0.0);
    for (std::int64_t h = 0; h < spec.heads; ++h) {
      for (std::int64_t i = 0; i < spec.k; ++i) {
        const auto [start, end] = pooling_start_window(h, i, spec);
        for (std::int64_t j = start; j < end; ++j) {
          e[static_cast<std::size_t>((h * spec.k + i) * len + j)] =
              1.0 / static_cast<double>(end - start);
        }
      }
    }
    raw::copy(from(e, {spec.heads, spec.k, len}).to(weight.dtype()), weight);
  }
  // E's entries are averaging weights of order 1/w; Adam's steps of order lr would swamp them.
  set_param_options("weight", {.lr_scale = spec.lr_scale, .decay = false});
}

Tensor LinearProjection::forward(const Tensor& x) const {
  const std::int64_t n = check_input(x, weight.size(2), "LinearProjection");
  TF_CHECK(weight.size(0) == 1 || weight.size(0) == x.size(1), "LinearProjection: built for ",
           weight.size(0), " heads, the input has ", x.size(1));
  // E: [heads, k, n] broadcasts over the batch (and over the heads when shared).
  Tensor e = weight.narrow(2, 0, n);
  if (weight.size(0) == 1) e = e.select(0, 0);
  // Laid out like x: heads that are [B, H, n, d] views of a [B, n, H, d] buffer give [B, H, k, d]
  // views of a [B, k, H, d] one, and one E for all heads is then one batch of B products
  // [k, n] x [n, H*d] (autograd/linalg.cpp), forward and for x's gradient.
  return matmul_like(e, x, x);
}

Projected LinearProjection::project(const Tensor& x, const Tensor& key_padding_mask) const {
  Tensor rows = forward(x);
  check_padding_mask(key_padding_mask, x, "LinearProjection");
  const std::int64_t b = x.size(0), n = x.size(2), k = weight.size(1);
  NoGradGuard no_grad;
  // support[e, i, j] = 1 where matrix e's E[i, j] is not 0: [heads, k, n]. A row covers a
  // sequence's real positions when its support meets them.
  const TensorOptions like_x{.dtype = x.dtype(), .device = x.device()};
  Tensor support = ne(weight.narrow(2, 0, n), scalar_tensor(0.0, like_x)).to(x.dtype());
  Tensor covered;  // [heads, k, B]: real positions in each row's support
  if (key_padding_mask.defined()) {
    Tensor real = sub(scalar_tensor(1.0, like_x), key_padding_mask.to(x.dtype()));  // [B, n]
    covered = matmul(support, real.transpose(0, 1));
  } else {
    covered = sum(support, {2}, true).expand({weight.size(0), k, b});
  }
  Tensor empty_rows = eq(covered, scalar_tensor(0.0, like_x));
  if (sum(empty_rows.to(DType::float64)).to(Device::cpu()).item<double>() == 0) {
    return {rows, Tensor()};
  }
  // One matrix: [B, k]; one per head: [B, H, k].
  if (weight.size(0) == 1) return {rows, empty_rows.select(0, 0).transpose(0, 1).contiguous()};
  return {rows, empty_rows.permute({2, 0, 1}).contiguous()};
}

std::string LinearProjection::extra_repr() const {
  return "heads=" + std::to_string(weight.size(0)) + ", k=" + std::to_string(weight.size(1)) +
         ", max_seq_len=" + std::to_string(weight.size(2));
}

// --- mean / max pooling over windows of real positions (pool_window) ---

PoolProjection::PoolProjection(const ProjectionSpec& spec, bool max)
    : k_(spec.k), max_seq_len_(spec.max_seq_len), max_(max) {
  check_spec(spec, max ? "MaxPoolProjection" : "MeanPoolProjection");
}

Tensor PoolProjection::forward(const Tensor& x) const {
  return project(x, Tensor()).rows;
}

Projected PoolProjection::project(const Tensor& x, const Tensor& key_padding_mask) const {
  const char* op = max_ ? "MaxPoolProjection" : "MeanPoolProjection";
  const std::int64_t n = check_input(x, max_seq_len_, op);
  check_padding_mask(key_padding_mask, x, op);
  const std::int64_t b = x.size(0), h = x.size(1), d = x.size(3);
  const TensorOptions like_x{.dtype = x.dtype(), .device = x.device()};
  // A mask is read only when given; without one every position is real.
  std::vector<std::vector<std::int64_t>> real;
  bool padded = false;
  if (key_padding_mask.defined()) {
    real = real_positions(key_padding_mask, b, n);
    for (const auto& r : real) padded = padded || static_cast<std::int64_t>(r.size()) != n;
  }

  if (!padded && n % k_ == 0) {
    // Every window is rows i*w .. i*w+w-1 of every sequence: a reshape, no gather.
    const std::int64_t w = n / k_;
    Tensor windows = x.reshape({b, h, k_, w, d});
    if (max_) return {std::get<0>(max(windows, 3)), Tensor()};
    return {mul(sum(windows, {3}), scalar_tensor(1.0 / static_cast<double>(w), like_x)), Tensor()};
  }

  // Each sequence's own windows over its real positions. The rows of x, seen as a table
  // [B*n, H*d] with one fill row appended (0 for mean, -inf for max, so it never wins), are
  // gathered into [B, k, w_max, H*d]: window i of sequence b reads its rows first, then fill.
  // The sum then adds each window's rows in order and the fill adds exactly 0 (the max ignores
  // -inf), so every output is computed exactly as for the sequence cut to its real positions.
  if (real.empty()) real = real_positions(Tensor(), b, n);
  std::int64_t w_max = 1;
  std::vector<std::pair<std::int64_t, std::int64_t>> windows;
  windows.reserve(static_cast<std::size_t>(b * k_));
  for (const auto& r : real) {
    for (std::int64_t i = 0; i < k_; ++i) {
      windows.push_back(pool_window(i, static_cast<std::int64_t>(r.size()), k_));
      w_max = std::max(w_max, windows.back().second - windows.back().first);
    }
  }
  const std::int64_t fill_row = b * n;
  std::vector<std::int64_t> index(static_cast<std::size_t>(b * k_ * w_max), fill_row);
  std::vector<double> scale(static_cast<std::size_t>(b * k_));  // 1 / rows (mean), 0 if empty
  std::vector<bool> empty(static_cast<std::size_t>(b * k_));
  for (std::int64_t s = 0; s < b; ++s) {
    const auto& r = real[static_cast<std::size_t>(s)];
    for (std::int64_t i = 0; i < k_; ++i) {
      const std::size_t row = static_cast<std::size_t>(s * k_ + i);
      const auto [start, end] = windows[row];
      for (std::int64_t t = start; t < end; ++t) {
        index[row * static_cast<std::size_t>(w_max) + static_cast<std::size_t>(t - start)] =
            s * n + r[static_cast<std::size_t>(t)];
      }
      empty[row] = end == start;
      scale[row] = end > start ? 1.0 / static_cast<double>(end - start) : 0.0;
    }
  }
  const double fill = max_ ? -std::numeric_limits<double>::infinity() : 0.0;
  Tensor table =
      cat({x.permute({0, 2, 1, 3}).reshape({b * n, h * d}), full({1, h * d}, fill, like_x)}, 0);
  Tensor gathered = embedding(
      table, from<std::int64_t>(index, {b, k_, w_max}, x.device()));  // [B, k, w_max, H*d]
  Tensor empty_rows = empty_rows_mask(empty, b, k_, x.device());
  Tensor pooled;
  if (max_) {
    pooled = std::get<0>(max(gathered, 2));
    // An empty window's max is -inf; it gives 0 instead, as its attention weight is 0 and
    // 0 * -inf would be NaN.
    if (empty_rows.defined()) pooled = masked_fill(pooled, empty_rows.unsqueeze(2), 0.0);
  } else {
    pooled = mul(sum(gathered, {2}), from(scale, {b, k_, 1}).to(x.dtype()).to(x.device()));
  }
  // [B, k, H*d] -> [B, H, k, d]
  return {pooled.reshape({b, k_, h, d}).permute({0, 2, 1, 3}).contiguous(), empty_rows};
}

// --- strided convolution, kernel = stride = ceil(max_seq_len / k) ---

ConvProjection::ConvProjection(const ProjectionSpec& spec)
    : k_(spec.k),
      max_seq_len_(spec.max_seq_len),
      window_((spec.max_seq_len + spec.k - 1) / spec.k) {
  check_spec(spec, "ConvProjection");
  const std::int64_t d = spec.head_dim;
  if (spec.heads == 1) {
    weight = register_parameter("weight", empty({d, d, window_}));
    init::kaiming_uniform_(weight, std::sqrt(5.0));
  } else {
    // One [d, d, w] kernel per head, each initialised as a Conv1d's (fan_in = d * w).
    weight = register_parameter("weight", empty({spec.heads, d, d, window_}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(d * window_));
    init::uniform_(weight, -bound, bound);
  }
}

Tensor ConvProjection::forward(const Tensor& x) const {
  return project(x, Tensor()).rows;
}

Projected ConvProjection::project(const Tensor& x, const Tensor& key_padding_mask) const {
  const std::int64_t n = check_input(x, max_seq_len_, "ConvProjection");
  check_padding_mask(key_padding_mask, x, "ConvProjection");
  const std::int64_t b = x.size(0), h = x.size(1), d = x.size(3);
  const bool per_head = weight.dim() == 4;
  const std::int64_t width = per_head ? weight.size(1) : weight.size(0);
  TF_CHECK(d == width, "ConvProjection: built for head width ", width, ", the input has ", d);
  TF_CHECK(!per_head || weight.size(0) == h, "ConvProjection: built with a kernel for each of ",
           weight.size(0), " heads, the input has ", h);
  // The padded rows arrive zeroed, and the tail beyond n is zero-padded, so a padded batch gives
  // each sequence what its cut version gives. [B, H, k*w, d] -> [B*H, d, k*w]: channels are the
  // features, the sequence is the length.
  Tensor padded = pad_rows(x, k_ * window_);
  Tensor rows;
  if (!per_head) {
    Tensor seq = padded.reshape({b * h, k_ * window_, d}).transpose(1, 2);
    Tensor y = conv1d(seq.contiguous(), weight, Tensor(), window_, 0);  // [B*H, d, k]
    rows = y.transpose(1, 2).reshape({b, h, k_, d});
  } else {
    std::vector<Tensor> heads;
    for (std::int64_t i = 0; i < h; ++i) {
      Tensor seq = padded.select(1, i).transpose(1, 2).contiguous();  // [B, d, k*w]
      heads.push_back(conv1d(seq, weight.select(0, i), Tensor(), window_, 0).transpose(1, 2));
    }
    rows = stack(heads, 1);  // [B, H, k, d]
  }
  // Window i covers positions i*w .. i*w+w-1; it is empty when none of them is real.
  std::vector<bool> empty(static_cast<std::size_t>(b * k_), true);
  if (!key_padding_mask.defined()) {
    for (std::int64_t s = 0; s < b; ++s) {
      for (std::int64_t i = 0; i < k_; ++i) {
        empty[static_cast<std::size_t>(s * k_ + i)] = i * window_ >= n;
      }
    }
  } else {
    const auto real = real_positions(key_padding_mask, b, n);
    for (std::int64_t s = 0; s < b; ++s) {
      for (std::int64_t j : real[static_cast<std::size_t>(s)]) {
        empty[static_cast<std::size_t>(s * k_ + j / window_)] = false;
      }
    }
  }
  return {rows, empty_rows_mask(empty, b, k_, x.device())};
}

std::string ConvProjection::extra_repr() const {
  return (weight.dim() == 4 ? "heads=" + std::to_string(weight.size(0)) + ", " : std::string()) +
         "k=" + std::to_string(k_) + ", window=" + std::to_string(window_);
}

Tensor IdentityProjection::forward(const Tensor& x) const {
  TF_CHECK(x.defined() && x.dim() == 4 && x.size(2) == k_,
           "IdentityProjection: expected input [B, H, ", k_, ", d] (k must equal n), got ",
           x.defined() ? shape_str(x.shape()) : "an undefined Tensor");
  return x;
}

Projected IdentityProjection::project(const Tensor& x, const Tensor& key_padding_mask) const {
  Tensor rows = forward(x);
  check_padding_mask(key_padding_mask, x, "IdentityProjection");
  // Row i is position i: a padded position is an empty row.
  return {rows, key_padding_mask};
}

}  // namespace tinyformer::nn
