// Tutorial step 7: padding and lengths. How each projection kind keeps padded positions out of
// its k rows, the window rule, rows that cover no real position, and the test of it all: a
// padded batch gives at its real positions what each sequence gives cut to its length.
// docs/tutorial/07-padding.md walks through it (docs/attention.md has the rules).
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

void print_rows(const char* name, const nn::Projected& p) {
  std::printf("  %-34s", name);
  for (double v : p.rows.to_vector<double>()) std::printf(" %5.1f", v);
  if (p.empty_rows.defined()) {
    std::printf("   empty:");
    for (bool e : p.empty_rows.to_vector<bool>()) std::printf(" %d", e ? 1 : 0);
  }
  std::printf("\n");
}

}  // namespace

int main() {
  manual_seed(7);
  std::printf("Step 7: padding and lengths\n");

  // --- The window rule, by hand (one head of width 1, k = 3, max_seq_len 8). ---
  const nn::ProjectionSpec spec{.k = 3, .max_seq_len = 8, .head_dim = 1};
  auto mean = nn::make_projection("mean", spec), max = nn::make_projection("max", spec);
  auto column = [](std::vector<double> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return from<double>(v, {1, 1, n, 1});
  };
  auto padding = [](std::int64_t real, std::int64_t n) {
    std::vector<bool> v(static_cast<std::size_t>(n), false);
    for (std::int64_t i = real; i < n; ++i) v[static_cast<std::size_t>(i)] = true;
    return from<bool>(v, {1, n});
  };
  const Tensor seven = column({1, 2, 3, 4, 5, 6, 7});
  const Tensor seven_padded = column({1, 2, 3, 4, 5, 6, 7, 0});  // padded rows arrive zeroed
  print_rows("mean of 1..7 (windows 0-2, 2-4, 4-6)", mean->project(seven, {}));
  print_rows("max of 1..7", max->project(seven, {}));
  print_rows("mean of 1..7 + one pad", mean->project(seven_padded, padding(7, 8)));
  check(tutorial::max_abs_diff(mean->project(seven_padded, padding(7, 8)).rows,
                               mean->project(seven, {}).rows) == 0.0,
        "mean: the padded sequence has the windows of the cut one");
  // A naive pooling that ignores the mask averages the zero in.
  print_rows("mean ignoring the mask (wrong)", {mean->forward(seven_padded), {}});
  check(tutorial::max_abs_diff(mean->forward(seven_padded), mean->project(seven, {}).rows) > 0.1,
        "ignoring the mask would change the rows: the padding leaks");
  const Tensor negative = column({-3, -2, -1, -4, -5, -6, 0, 0});
  const nn::Projected m = max->project(negative, padding(6, 8));
  print_rows("max of -3 -2 -1 -4 -5 -6 + 2 pads", m);
  check(tutorial::max_abs_diff(m.rows, column({-2, -1, -5})) == 0.0,
        "max over real rows only: the zeroed padding never wins");
  const nn::Projected two = mean->project(column({5, 9}), {});
  print_rows("mean of 5 9 (n = 2 < k = 3)", two);
  check(two.empty_rows.defined() &&
            two.empty_rows.to_vector<bool>() == std::vector<bool>{false, false, true},
        "n < k: rows 0 and 1 are the positions, row 2 covers nothing and is reported empty");

  // --- The exactness test, for every kind: padded batch against cut sequences. ---
  const std::int64_t n = 12, d_model = 8, heads = 2, k = 4;
  const std::vector<std::int64_t> lengths = {12, 7, 3};  // the batch, padded to 12 at the end
  const Tensor x = randn({3, n, d_model}, {.dtype = kFloat64});
  const Tensor key_padding_mask =
      cat({padding(12, n), padding(7, n), padding(3, n)}, 0);  // [3, n], true = padding
  for (const std::string kind : {"linear", "mean", "max", "conv"}) {
    const nn::ProjectionSpec s{.k = k, .max_seq_len = n, .head_dim = d_model / heads};
    nn::LinformerAttention attention(d_model, heads, nn::make_projection(kind, s),
                                     nn::make_projection(kind, s));
    attention.to(kFloat64);
    attention.eval();
    const Tensor padded = attention.forward(x, key_padding_mask);
    double worst = 0;
    for (std::int64_t b = 0; b < 3; ++b) {
      const std::int64_t len = lengths[static_cast<std::size_t>(b)];
      const Tensor cut = attention.forward(x.narrow(0, b, 1).narrow(1, 0, len));
      worst =
          std::max(worst, tutorial::max_abs_diff(padded.narrow(0, b, 1).narrow(1, 0, len), cut));
    }
    std::printf("  %-6s padded batch vs cut sequences: max difference %.3g\n", kind.c_str(), worst);
    // Linear sums E x over n = 12 terms (zeros included) against m terms: equal up to rounding.
    // The others sum the same terms, but the layer's products have 12 rows padded and m cut, and
    // a BLAS kernel may round a row differently with the row count: a few units in the last place.
    const double bound = kind == "linear" ? 1e-12 : 1e-14;
    check(worst <= bound, kind + ": a padded sequence gives the output of the cut sequence" +
                              (kind == "linear" ? " (to 1e-12)" : " (to rounding, 1e-14)"));
  }
  return tutorial::finish();
}
