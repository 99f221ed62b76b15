// Linformer projections at every sequence length and with padding: the window rule, empty
// summary rows excluded from the softmax, a padded batch equal to each sequence cut to its real
// length (forward and backward, fused and textbook), and a conv kernel per head.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::max_abs_diff;
using test::randn64;

namespace {

const char* const kLearnedAndPooled[] = {"linear", "mean", "max", "conv"};
const nn::Sharing kSharings[] = {nn::Sharing::none, nn::Sharing::headwise, nn::Sharing::key_value,
                                 nn::Sharing::layerwise};

// One Linformer layer with the projections a sharing mode gives a single layer: a matrix per
// head (none), one per layer for keys and one for values (headwise), one for both (key_value and
// layerwise, which differ only across layers). float64, eval mode.
std::shared_ptr<nn::LinformerAttention> make_layer(const std::string& kind, nn::Sharing sharing,
                                                   std::int64_t max_seq_len, std::int64_t k,
                                                   std::int64_t d_model = 8,
                                                   std::int64_t heads = 2) {
  const nn::ProjectionSpec spec{.k = k,
                                .max_seq_len = max_seq_len,
                                .head_dim = d_model / heads,
                                .heads = sharing == nn::Sharing::none ? heads : 1};
  auto key = nn::make_projection(kind, spec);
  auto value = sharing == nn::Sharing::none || sharing == nn::Sharing::headwise
                   ? nn::make_projection(kind, spec)
                   : key;
  auto layer = std::make_shared<nn::LinformerAttention>(d_model, heads, key, value);
  layer->to(kFloat64);
  layer->eval();
  return layer;
}

// The summary rows a sequence of m real positions (at the front) leaves empty in head h of
// `heads` separate matrices (1 when the heads share one), by the rules of docs/attention.md,
// computed here independently of the projections.
std::set<std::int64_t> expected_empty(const std::string& kind, std::int64_t m, std::int64_t k,
                                      std::int64_t max_seq_len, std::int64_t h = 0,
                                      std::int64_t heads = 1) {
  std::set<std::int64_t> empty;
  if (kind == "mean" || kind == "max") {
    for (std::int64_t i = m; i < k; ++i) empty.insert(i);  // m < k: rows m .. k-1
  } else if (kind == "linear") {
    // The default start: row i of head h averages the adaptive-pooling window i of max_seq_len,
    // shifted by h * floor(max_seq_len / k) / heads positions (row 0 reaching down to 0), so it
    // covers a real position iff it starts before m.
    const std::int64_t shift = h * (max_seq_len / k) / heads;
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t start = i == 0 ? 0 : i * max_seq_len / k + shift;
      if (start >= m) empty.insert(i);
    }
  } else if (kind == "conv") {
    const std::int64_t w = (max_seq_len + k - 1) / k;
    for (std::int64_t i = 0; i < k; ++i) {
      if (i * w >= m) empty.insert(i);  // the window starts beyond the last real position
    }
  }
  return empty;
}

// key_padding_mask [B, n]: sequence b has lengths[b] real positions, then padding.
Tensor padding_mask(const std::vector<std::int64_t>& lengths, std::int64_t n) {
  std::vector<bool> padded;
  for (std::int64_t len : lengths) {
    for (std::int64_t j = 0; j < n; ++j) padded.push_back(j >= len);
  }
  return from<bool>(padded, {static_cast<std::int64_t>(lengths.size()), n});
}

// Every weight of the attention probabilities p ([B, H, n, k]): exactly 0 for a summary row r
// that excluded(b, h, r) says is empty, above 0 for every other row.
template <typename Excluded>
void check_excluded_rows(const Tensor& p, Excluded excluded) {
  REQUIRE(p.dim() == 4);
  const std::int64_t batch = p.size(0), heads = p.size(1), n = p.size(2), k = p.size(3);
  const auto w = p.to_vector<float>();
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t r = 0; r < k; ++r) {
          CAPTURE(b);
          CAPTURE(h);
          CAPTURE(r);
          const float weight = w[static_cast<std::size_t>(((b * heads + h) * n + i) * k + r)];
          CHECK((excluded(b, h, r) ? weight == 0.0f : weight > 0.0f));
        }
      }
    }
  }
}

// The lengths the sweep covers: 1, 2, k-1, k, k+1, 33, 100, max_seq_len, those in 1..max_seq_len.
std::vector<std::int64_t> sweep_lengths(std::int64_t k, std::int64_t max_seq_len) {
  std::set<std::int64_t> lengths;
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{2}, k - 1, k, k + 1, std::int64_t{33},
                         std::int64_t{100}, max_seq_len}) {
    if (n >= 1 && n <= max_seq_len) lengths.insert(n);
  }
  return {lengths.begin(), lengths.end()};
}

}  // namespace

TEST_CASE("pool_window: adaptive windows for n >= k, one row each and then empty for n < k") {
  for (std::int64_t k : {1, 2, 3, 7, 32}) {
    for (std::int64_t m = 0; m <= 100; ++m) {
      CAPTURE(k);
      CAPTURE(m);
      std::vector<int> covered(static_cast<std::size_t>(m), 0);
      for (std::int64_t i = 0; i < k; ++i) {
        const auto [start, end] = nn::pool_window(i, m, k);
        CHECK(0 <= start);
        CHECK(start <= end);
        CHECK(end <= m);
        if (m >= k) {
          // Never empty, at most ceil(m / k) + 1 rows, in order.
          CHECK(end - start >= 1);
          CHECK(end - start <= (m + k - 1) / k + 1);
          CHECK(start == i * m / k);
          CHECK(end == ((i + 1) * m + k - 1) / k);
        } else {
          CHECK(end - start == (i < m ? 1 : 0));
          if (i < m) CHECK(start == i);
        }
        for (std::int64_t t = start; t < end; ++t) ++covered[static_cast<std::size_t>(t)];
      }
      // Every real position lies in some window.
      for (int c : covered) CHECK(c >= 1);
    }
  }
  // The worked example of docs/attention.md: m = 7, k = 3 -> rows 0..2, 2..4, 4..6.
  CHECK(nn::pool_window(0, 7, 3) == std::pair<std::int64_t, std::int64_t>{0, 3});
  CHECK(nn::pool_window(1, 7, 3) == std::pair<std::int64_t, std::int64_t>{2, 5});
  CHECK(nn::pool_window(2, 7, 3) == std::pair<std::int64_t, std::int64_t>{4, 7});
  // When k divides m the windows are the plain blocks of m / k rows.
  CHECK(nn::pool_window(2, 12, 4) == std::pair<std::int64_t, std::int64_t>{6, 9});
  CHECK_THROWS_AS(nn::pool_window(3, 5, 3), Error);
}

TEST_CASE("the worked example of docs/attention.md: windows, padding and n < k") {
  auto mean = nn::make_projection("mean", {.k = 3, .max_seq_len = 8, .head_dim = 1});
  auto max = nn::make_projection("max", {.k = 3, .max_seq_len = 8, .head_dim = 1});
  // n = 7 real rows, k = 3: windows 0..2, 2..4, 4..6.
  Tensor x = from<double>({1, 2, 3, 4, 5, 6, 7}, {1, 1, 7, 1});
  CHECK(mean->forward(x).to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK(max->forward(x).to_vector<double>() == std::vector<double>{3, 5, 7});
  // The same 7 rows padded to 8 (the padded row zeroed, as LinformerAttention passes it):
  // the windows come from the 7 real rows, so the summary is the same.
  Tensor padded = from<double>({1, 2, 3, 4, 5, 6, 7, 0}, {1, 1, 8, 1});
  Tensor mask = padding_mask({7}, 8);
  CHECK(mean->project(padded, mask).rows.to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK(max->project(padded, mask).rows.to_vector<double>() == std::vector<double>{3, 5, 7});
  // Max over real rows only: negative rows padded with zeros keep their negative max.
  Tensor negative = from<double>({-3, -2, -1, -4, -5, -6, 0, 0}, {1, 1, 8, 1});
  CHECK(max->project(negative, padding_mask({6}, 8)).rows.to_vector<double>() ==
        std::vector<double>{-2, -1, -5});
  // n = 2 < k = 3: rows 0 and 1 are the two positions, row 2 is empty (0, reported empty).
  nn::Projected short_seq = mean->project(from<double>({5, 9}, {1, 1, 2, 1}), {});
  CHECK(short_seq.rows.to_vector<double>() == std::vector<double>{5, 9, 0});
  CHECK(short_seq.empty_rows.to_vector<bool>() == std::vector<bool>{false, false, true});
}

TEST_CASE("the lengths of the issue: no empty rows left for pooling, conv's masked") {
  // mean / max, k = 32: n = 33 and n = 100 used to leave 15 and 7 rows empty; now none.
  for (const char* kind : {"mean", "max"}) {
    auto p = nn::make_projection(kind, {.k = 32, .max_seq_len = 128, .head_dim = 2});
    for (std::int64_t n : {33, 100}) {
      CHECK_FALSE(p->project(randn64({1, 1, n, 2}, false), {}).empty_rows.defined());
    }
  }
  // conv, max_seq_len = 512, k = 64 (window 8) at n = 100: rows 13..63 (51) cover nothing.
  auto conv = nn::make_projection("conv", {.k = 64, .max_seq_len = 512, .head_dim = 2});
  const auto empty = conv->project(randn({1, 1, 100, 2}), {}).empty_rows.to_vector<bool>();
  CHECK(std::count(empty.begin(), empty.end(), true) == 51);
  CHECK_FALSE(empty[12]);
  CHECK(empty[13]);
}

TEST_CASE("summary rows that cover no real position take no attention weight") {
  const std::int64_t max_seq_len = 100;
  for (const std::string kind : kLearnedAndPooled) {
    for (nn::Sharing sharing : kSharings) {
      for (std::int64_t k : {3, 32, 64}) {
        for (std::int64_t n : sweep_lengths(k, max_seq_len)) {
          CAPTURE(kind);
          CAPTURE(nn::sharing_name(sharing));
          CAPTURE(k);
          CAPTURE(n);
          manual_seed(static_cast<std::uint64_t>(n * 131 + k));
          auto layer = make_layer(kind, sharing, max_seq_len, k);
          layer->keep_attention(true);
          // Three sequences: n real positions, then about half of n, then 1.
          const std::vector<std::int64_t> lengths = {n, std::max<std::int64_t>(1, n / 2), 1};
          Tensor x = randn64({3, n, 8}, false);
          Tensor mask = padding_mask(lengths, n);
          for (bool fused : {true, false}) {
            CAPTURE(fused);
            layer->set_fused(fused);
            layer->forward(x, mask);
            const Tensor probs = layer->last_attention();  // [B, H, n, k]
            REQUIRE(probs.shape() == Shape{3, 2, n, k});
            const auto p = probs.to_vector<double>();
            for (std::int64_t b = 0; b < 3; ++b) {
              bool all_ok = true;
              for (std::int64_t h = 0; h < 2; ++h) {
                const std::int64_t matrices = sharing == nn::Sharing::none ? 2 : 1;
                const auto empty = expected_empty(kind, lengths[static_cast<std::size_t>(b)], k,
                                                  max_seq_len, h % matrices, matrices);
                for (std::int64_t i = 0; i < n; ++i) {
                  for (std::int64_t r = 0; r < k; ++r) {
                    const double w = p[static_cast<std::size_t>(((b * 2 + h) * n + i) * k + r)];
                    all_ok = all_ok && (empty.count(r) ? w == 0.0 : w > 0.0);
                  }
                }
              }
              CAPTURE(b);
              CHECK(all_ok);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("a padded batch equals each sequence cut to its length, forward and backward") {
  // Forward, pooling and conv: to rounding (1e-14; 0 with OpenBLAS's SkylakeX kernels). Every
  // reduction runs over the same elements in the same order padded or cut: a pooling window adds
  // its real rows in order (the padded batch's fill adds exactly 0), conv sees the same
  // zero-padded tail, and the other reductions run over d_model, d_head or k, which padding does
  // not change. The products of the layer's linear maps and of attention have n rows padded and
  // n' cut, though, and a BLAS kernel may round a row differently with the matrix's row count
  // (OpenBLAS's Haswell kernels do: differences of 1e-16 here). Forward, linear:
  // E x sums over the sequence axis, n terms padded (the padded ones exact zeros) and n' cut; the
  // matrix product groups sums of different lengths differently, so linear is held to 1e-12
  // (rounding level in float64). Backward, every kind: the gradient of the compressed keys and
  // values sums over the queries (n padded, n' cut) for the same reason, so input gradients are
  // held to 1e-12 too.
  const std::int64_t max_seq_len = 100;
  double worst_grad = 0;
  for (const std::string kind : kLearnedAndPooled) {
    for (nn::Sharing sharing : kSharings) {
      for (std::int64_t k : {3, 32, 64}) {
        for (std::int64_t n : sweep_lengths(k, max_seq_len)) {
          CAPTURE(kind);
          CAPTURE(nn::sharing_name(sharing));
          CAPTURE(k);
          CAPTURE(n);
          manual_seed(static_cast<std::uint64_t>(n * 7 + k));
          auto layer = make_layer(kind, sharing, max_seq_len, k);
          // Real lengths of the batch: n itself, k +- 1 and 1, those that fit.
          std::vector<std::int64_t> lengths = {n};
          for (std::int64_t len : {k - 1, k + 1, std::int64_t{1}}) {
            if (len >= 1 && len <= n) lengths.push_back(len);
          }
          const auto batch = static_cast<std::int64_t>(lengths.size());
          Tensor mask = padding_mask(lengths, n);
          Tensor x = randn64({batch, n, 8});
          // The loss weights real positions only: a padded position's output is not defined.
          Tensor r = masked_fill(randn64({batch, n, 8}, false), mask.unsqueeze(2), 0.0);
          for (bool fused : {true, false}) {
            CAPTURE(fused);
            layer->set_fused(fused);
            x.zero_grad();
            Tensor y = layer->forward(x, mask);
            sum(mul(y, r)).backward();
            const Tensor padded_grad = x.grad();
            for (std::int64_t b = 0; b < batch; ++b) {
              CAPTURE(b);
              const std::int64_t len = lengths[static_cast<std::size_t>(b)];
              Tensor cut = x.detach().select(0, b).narrow(0, 0, len).unsqueeze(0).contiguous();
              cut.requires_grad_(true);
              Tensor y_cut = layer->forward(cut);
              const double forward_diff =
                  max_abs_diff(y.detach().select(0, b).narrow(0, 0, len), y_cut.select(0, 0));
              CHECK(forward_diff < (kind == "linear" ? 1e-12 : 1e-14));
              sum(mul(y_cut, r.select(0, b).narrow(0, 0, len).unsqueeze(0))).backward();
              const double g =
                  max_abs_diff(padded_grad.select(0, b).narrow(0, 0, len), cut.grad().select(0, 0));
              worst_grad = std::max(worst_grad, g);
              CHECK(g < 1e-12);
            }
          }
        }
      }
    }
  }
  MESSAGE("largest input-gradient difference, padded against cut: ", worst_grad);
}

TEST_CASE("the padded-batch test is not vacuous: counting padding as real changes the output") {
  // Pooling over the padded length (no mask) differs from the cut sequence: the zeroed padded
  // rows would dilute the mean and floor the max at 0. With the mask the two agree to rounding
  // (the products have 6 rows against 5: see the test above).
  for (const char* kind : {"mean", "max"}) {
    CAPTURE(kind);
    manual_seed(21);
    auto layer = make_layer(kind, nn::Sharing::headwise, 16, 3);
    Tensor x = randn64({1, 6, 8}, false);
    Tensor mask = padding_mask({5}, 6);
    Tensor zeroed = masked_fill(x, mask.unsqueeze(2), 0.0);
    Tensor cut = layer->forward(x.narrow(1, 0, 5));
    CHECK(max_abs_diff(layer->forward(x, mask).narrow(1, 0, 5), cut) < 1e-14);
    CHECK(max_abs_diff(layer->forward(zeroed).narrow(1, 0, 5), cut) > 1e-6);
  }
}

TEST_CASE("identity projections with padding equal full attention with padding") {
  manual_seed(9);
  const std::int64_t n = 6, d = 8, heads = 2;
  nn::MultiHeadAttention mha(d, heads);
  auto layer = make_layer("identity", nn::Sharing::key_value, n, n);
  mha.to(kFloat64);
  mha.eval();
  layer->load_state_dict(mha.state_dict(), /*strict=*/false);
  Tensor x = randn64({2, n, d}, false);
  Tensor mask = padding_mask({6, 4}, n);
  for (bool fused : {true, false}) {
    mha.set_fused(fused);
    layer->set_fused(fused);
    CHECK(max_abs_diff(mha.forward(x, mask), layer->forward(x, mask)) == 0.0);
  }
}

TEST_CASE("conv gets a kernel per head for sharing none; 288, 24, 12 and 1 kernels") {
  // 12 layers x 12 heads, head width 2, max_seq_len 16, k 4: each kernel is [2, 2, 4].
  const std::pair<nn::Sharing, std::int64_t> expected[] = {{nn::Sharing::none, 288},
                                                           {nn::Sharing::headwise, 24},
                                                           {nn::Sharing::key_value, 12},
                                                           {nn::Sharing::layerwise, 1}};
  for (const auto& entry : expected) {
    const auto& sharing = std::get<0>(entry);
    const auto& count = std::get<1>(entry);
    CAPTURE(nn::sharing_name(sharing));
    nn::TransformerEncoder enc(
        {.layers = 12,
         .d_model = 24,
         .heads = 12,
         .d_ff = 8,
         .max_seq_len = 16,
         .attention = nn::AttentionKind::linformer,
         .linformer = {.k = 4, .projection = nn::ProjectionKind::conv, .sharing = sharing}});
    std::int64_t kernels = 0;
    for (const auto& [name, p] : enc.named_parameters()) {
      if (name.find("projection") != std::string::npos) kernels += p.numel() / (2 * 2 * 4);
    }
    CHECK(kernels == count);
  }
}

TEST_CASE("conv per head: equal kernels give the shared result, different kernels differ") {
  manual_seed(4);
  const std::int64_t heads = 3, d = 2;
  auto shared = nn::make_projection("conv", {.k = 3, .max_seq_len = 10, .head_dim = d});
  auto per_head =
      nn::make_projection("conv", {.k = 3, .max_seq_len = 10, .head_dim = d, .heads = heads});
  auto& w_shared = std::dynamic_pointer_cast<nn::ConvProjection>(shared)->weight;
  auto& w_heads = std::dynamic_pointer_cast<nn::ConvProjection>(per_head)->weight;
  REQUIRE(w_heads.shape() == Shape{heads, d, d, 4});
  Tensor x = randn({2, heads, 7, d});
  // Different kernels: each head's rows are its own kernel's conv, not the shared one's.
  Tensor differ = per_head->forward(x);
  for (std::int64_t h = 0; h < heads; ++h) {
    CHECK(max_abs_diff(differ.select(1, h), shared->forward(x).select(1, h)) > 1e-4);
  }
  {
    NoGradGuard no_grad;
    for (std::int64_t h = 0; h < heads; ++h) raw::copy(w_shared, w_heads.select(0, h));
  }
  CHECK(max_abs_diff(per_head->forward(x), shared->forward(x)) == 0.0);
  CHECK_THROWS_WITH_AS(per_head->forward(randn({2, 2, 7, d})),
                       doctest::Contains("a kernel for each of 3 heads, the input has 2"), Error);
}

namespace {
// A user's kind that knows nothing about padding: it only implements forward.
struct DoubledLinear : nn::Projection {
  Tensor e;
  explicit DoubledLinear(const nn::ProjectionSpec& s) {
    e = register_buffer("e", randn({s.k, s.max_seq_len}, {.dtype = kFloat64}));
  }
  Tensor forward(const Tensor& x) const override {
    return matmul(e.narrow(1, 0, x.size(2)), x) * 2.0;
  }
  std::int64_t k() const override { return e.size(0); }
};
}  // namespace

TEST_CASE("a kind with only forward keeps working with padding (the default project)") {
  manual_seed(17);
  nn::register_projection("doubled_linear_for_test", [](const nn::ProjectionSpec& s) {
    return std::make_shared<DoubledLinear>(s);
  });
  auto layer = make_layer("doubled_linear_for_test", nn::Sharing::key_value, 8, 3);
  Tensor x = randn64({2, 7, 8}, false);
  Tensor mask = padding_mask({7, 4}, 7);
  nn::Projected p = layer->key_projection->project(randn64({2, 2, 7, 4}, false), mask);
  CHECK_FALSE(p.empty_rows.defined());
  Tensor y = layer->forward(x, mask);
  CHECK(max_abs_diff(y.select(0, 1).narrow(0, 0, 4),
                     layer->forward(x.narrow(0, 1, 1).narrow(1, 0, 4)).select(0, 0)) < 1e-12);
}

TEST_CASE("projections check the key-padding mask they are given") {
  for (const char* kind : {"mean", "max", "conv", "identity"}) {
    CAPTURE(kind);
    auto p = nn::make_projection(kind, {.k = 4, .max_seq_len = 4, .head_dim = 2});
    CHECK_THROWS_WITH_AS(p->project(randn({2, 1, 4, 2}), zeros({2, 5}, {.dtype = kBool})),
                         doctest::Contains("expected key_padding_mask of dtype bool and shape "
                                           "[2, 4] (true = padding), got bool [2, 5]"),
                         Error);
  }
}

TEST_CASE("pooling with padding anywhere: the real rows, compacted, in order") {
  // Real rows 1, 2 and 4 of 5: the windows are taken over those three, as for the sequence of
  // the real rows alone.
  Tensor x = randn64({1, 2, 5, 3}, false);
  Tensor mask = from<bool>({true, false, false, true, false}, {1, 5});
  Tensor real = cat({x.narrow(2, 1, 2), x.narrow(2, 4, 1)}, 2);
  for (const char* kind : {"mean", "max"}) {
    CAPTURE(kind);
    for (std::int64_t k : {2, 3, 4}) {
      CAPTURE(k);
      auto p = nn::make_projection(kind, {.k = k, .max_seq_len = 5, .head_dim = 3});
      nn::Projected padded = p->project(masked_fill(x, mask.view({1, 1, 5, 1}), 0.0), mask);
      nn::Projected cut = p->project(real, {});
      CHECK(max_abs_diff(padded.rows, cut.rows) == 0.0);
      CHECK(padded.empty_rows.defined() == cut.empty_rows.defined());
      if (k == 4) CHECK(padded.empty_rows.to_vector<bool>() == cut.empty_rows.to_vector<bool>());
    }
  }
}

TEST_CASE("gradient checks of the projections with padding and uneven windows") {
  manual_seed(23);
  // Lengths 7 and 4 padded to 7: uneven windows for k = 3, fewer real rows than k for k = 5.
  Tensor mask = padding_mask({7, 4}, 7);
  for (const char* kind : {"mean", "max", "conv"}) {
    for (std::int64_t heads : {1, 2}) {
      for (std::int64_t k : {3, 5}) {
        CAPTURE(kind);
        CAPTURE(heads);
        CAPTURE(k);
        auto p =
            nn::make_projection(kind, {.k = k, .max_seq_len = 8, .head_dim = 2, .heads = heads});
        p->to(kFloat64);
        Tensor x = randn64({2, 2, 7, 2});
        std::vector<Tensor> inputs = {x};
        for (const Tensor& w : p->parameters()) inputs.push_back(w);
        CHECK(gradcheck([&](const std::vector<Tensor>& in) { return p->project(in[0], mask).rows; },
                        inputs));
      }
    }
  }
}

TEST_CASE("keys and values of different kinds: a row empty for either is excluded") {
  manual_seed(29);
  // max_seq_len 16, k 4: conv windows of 4 positions. Lengths 6 and 2, padded to 6.
  const nn::ProjectionSpec spec{.k = 4, .max_seq_len = 16, .head_dim = 4};
  nn::LinformerAttention layer(8, 2, nn::make_projection("mean", spec),
                               nn::make_projection("conv", spec));
  layer.keep_attention(true);
  layer.forward(randn({2, 6, 8}), padding_mask({6, 2}, 6));
  // Sequence 0: mean has no empty row, conv leaves rows 2 and 3 empty (they start at 8, 12).
  // Sequence 1: mean leaves rows 2 and 3 empty (2 < k), conv rows 1, 2 and 3.
  const std::vector<std::set<std::int64_t>> empty = {{2, 3}, {1, 2, 3}};
  check_excluded_rows(layer.last_attention(), [&](std::int64_t b, std::int64_t, std::int64_t r) {
    return empty[static_cast<std::size_t>(b)].count(r) > 0;
  });
}

namespace {
// Mean pooling that reports the empty rows it is given, whatever their shape: to feed
// LinformerAttention per-head and malformed masks.
class ReportsEmpty : public nn::Projection {
 public:
  ReportsEmpty(const nn::ProjectionSpec& spec, Tensor empty)
      : mean_(nn::make_projection("mean", spec)), empty_(std::move(empty)) {}
  Tensor forward(const Tensor& x) const override { return mean_->forward(x); }
  nn::Projected project(const Tensor& x, const Tensor&) const override {
    return {mean_->forward(x), empty_};
  }
  std::int64_t k() const override { return mean_->k(); }

 private:
  std::shared_ptr<nn::Projection> mean_;
  Tensor empty_;
};
}  // namespace

TEST_CASE("empty rows per head ([B, H, k]) combine with shared ones ([B, k]) head by head") {
  manual_seed(31);
  const nn::ProjectionSpec spec{.k = 3, .max_seq_len = 6, .head_dim = 4};
  // Keys: row 2 empty in every head of sequence 0. Values: row 0 empty in head 1 of sequence 1.
  std::vector<bool> shared(6, false), per_head(12, false);
  shared[2] = true;
  per_head[(1 * 2 + 1) * 3 + 0] = true;
  nn::LinformerAttention layer(
      8, 2, std::make_shared<ReportsEmpty>(spec, from<bool>(shared, {2, 3})),
      std::make_shared<ReportsEmpty>(spec, from<bool>(per_head, {2, 2, 3})));
  layer.keep_attention(true);
  layer.forward(randn({2, 6, 8}));
  check_excluded_rows(layer.last_attention(), [](std::int64_t b, std::int64_t h, std::int64_t r) {
    return (b == 0 && r == 2) || (b == 1 && h == 1 && r == 0);
  });
}

TEST_CASE("LinformerAttention rejects empty rows of the wrong shape or dtype") {
  const nn::ProjectionSpec spec{.k = 3, .max_seq_len = 6, .head_dim = 4};
  auto mean = nn::make_projection("mean", spec);
  for (const Tensor& bad :
       {zeros({2, 4}, {.dtype = kBool}), zeros({2, 3, 3}, {.dtype = kBool}), zeros({2, 3})}) {
    nn::LinformerAttention layer(8, 2, std::make_shared<ReportsEmpty>(spec, bad), mean);
    CHECK_THROWS_WITH_AS(layer.forward(randn({2, 6, 8})),
                         doctest::Contains("LinformerAttention: a projection reported empty rows "
                                           "of dtype bool and shape [2, 3] or [2, 2, 3] expected"),
                         Error);
  }
}

TEST_CASE("pooling_start_window: head and row are checked") {
  const nn::ProjectionSpec spec{.k = 3, .max_seq_len = 7, .heads = 2};
  CHECK(nn::pooling_start_window(1, 1, spec) == std::pair<std::int64_t, std::int64_t>{3, 6});
  CHECK_THROWS_WITH_AS(nn::pooling_start_window(2, 0, spec),
                       doctest::Contains("pooling_start_window: expected 0 <= head < 2 and 0 <= "
                                         "i < 3, got head=2, i=0"),
                       Error);
  CHECK_THROWS_AS(nn::pooling_start_window(0, 3, spec), Error);
}
