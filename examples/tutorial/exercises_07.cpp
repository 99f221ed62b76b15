// Solutions to the exercises of tutorial step 7 (docs/tutorial/07-padding.md): padding leaks into
// the real positions without the mask, the masked window rule by hand, and why an empty summary
// row must be excluded rather than left as a zero key. One function per exercise; each checks its
// result.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// Copies the q/k/v/out weights of one attention module into another.
void copy_weights(const nn::Attention& from_module, nn::Attention& to_module) {
  NoGradGuard no_grad;
  for (auto [src, dst] : {std::pair{from_module.q_proj, to_module.q_proj},
                          std::pair{from_module.k_proj, to_module.k_proj},
                          std::pair{from_module.v_proj, to_module.v_proj},
                          std::pair{from_module.out_proj, to_module.out_proj}}) {
    raw::copy(src->weight, dst->weight);
    raw::copy(src->bias, dst->bias);
  }
}

// A [1, n] key-padding mask: positions real .. n-1 are padding (true).
Tensor padding_mask(std::int64_t real, std::int64_t n) {
  std::vector<bool> v(static_cast<std::size_t>(n), false);
  for (std::int64_t i = real; i < n; ++i) v[static_cast<std::size_t>(i)] = true;
  return from<bool>(v, {1, n});
}

// Exercise 7.1: a sequence of 7 real positions padded to 12 with a [PAD] embedding. Without the
// key-padding mask the padding changes the real positions' outputs, in full attention and in
// Linformer alike; with it, they equal the cut sequence's.
void padding_leaks() {
  std::printf("Exercise 7.1: padding leaks without the mask\n");
  const std::int64_t n = 12, real = 7, d_model = 8;
  const Tensor sequence = randn({1, real, d_model}, {.dtype = kFloat64});
  const Tensor pad = randn({1, 1, d_model}, {.dtype = kFloat64}).expand({1, n - real, d_model});
  const Tensor padded = cat({sequence, pad}, 1);  // [1, 12, d_model]
  const Tensor mask = padding_mask(real, n);
  nn::MultiHeadAttention full(d_model, 2);
  auto e = nn::make_projection("mean", {.k = 4, .max_seq_len = n, .head_dim = 4});
  nn::LinformerAttention linformer(d_model, 2, e, e);
  for (nn::Attention* attention :
       {static_cast<nn::Attention*>(&full), static_cast<nn::Attention*>(&linformer)}) {
    attention->to(kFloat64);
    const std::string name = attention->type_name();
    const Tensor cut = attention->forward(sequence);
    const double unmasked =
        tutorial::max_abs_diff(attention->forward(padded).narrow(1, 0, real), cut);
    const double masked =
        tutorial::max_abs_diff(attention->forward(padded, mask).narrow(1, 0, real), cut);
    std::printf("  %-20s real positions vs the cut sequence: %.3g without the mask, %.3g with\n",
                name.c_str(), unmasked, masked);
    check(unmasked > 1e-3, "7.1 " + name + ": without the mask the padding changes the output");
    check(masked < 1e-12, "7.1 " + name + ": with the mask the output is the cut sequence's");
  }
}

// Exercise 7.2: the masked mean pooling by hand. Window r of the m real rows is
// nn::pool_window(r, m, k); the k summary rows are the windows' means, and a window with no row
// is empty. Compared with project() for m from below k to n.
void windows_by_hand() {
  std::printf("Exercise 7.2: the masked windows by hand\n");
  const std::int64_t n = 12, k = 4;
  auto mean_projection = nn::make_projection("mean", {.k = k, .max_seq_len = n, .head_dim = 1});
  const Tensor values = arange(n, {.dtype = kFloat64}).view({1, 1, n, 1}) * 2.0 + 1.0;  // 1 3 5...
  bool all_equal = true;
  for (std::int64_t m : {2, 5, 7, 12}) {
    const Tensor mask = padding_mask(m, n);
    const Tensor zeroed = masked_fill(values, mask.view({1, 1, n, 1}), 0.0);
    const nn::Projected projected = mean_projection->project(zeroed, mask);
    const auto x = values.to_vector<double>();
    std::vector<double> rows;
    std::vector<bool> empty;
    for (std::int64_t r = 0; r < k; ++r) {
      const auto [start, end] = nn::pool_window(r, m, k);
      double total = 0;
      for (std::int64_t j = start; j < end; ++j) total += x[static_cast<std::size_t>(j)];
      rows.push_back(end > start ? total / static_cast<double>(end - start) : 0.0);
      empty.push_back(end == start);
    }
    std::printf("  m = %2lld: by hand", static_cast<long long>(m));
    for (double v : rows) std::printf(" %5.2f", v);
    std::printf(", project()");
    for (double v : projected.rows.to_vector<double>()) std::printf(" %5.2f", v);
    std::printf("\n");
    const std::vector<bool> reported = projected.empty_rows.defined()
                                           ? projected.empty_rows.to_vector<bool>()
                                           : std::vector<bool>(static_cast<std::size_t>(k), false);
    all_equal = all_equal && projected.rows.to_vector<double>() == rows && reported == empty;
  }
  check(all_equal, "7.2 the windows by hand give project()'s rows and empty rows, m = 2 .. 12");
}

// Exercise 7.3: an empty row. With n = 2 < k = 4 the mean projection has two empty summary rows.
// Excluded, they get weight exactly 0 and Linformer equals full attention over the 2 positions;
// left in as zero keys (score 0, weight e^0 / sum > 0), they pull the output towards 0.
void empty_rows() {
  std::printf("Exercise 7.3: an empty row must be excluded, not left as a zero key\n");
  const std::int64_t n = 2, k = 4, d_model = 8, heads = 2;
  nn::MultiHeadAttention full(d_model, heads);
  auto e = nn::make_projection("mean", {.k = k, .max_seq_len = 8, .head_dim = d_model / heads});
  nn::LinformerAttention linformer(d_model, heads, e, e);
  copy_weights(full, linformer);
  linformer.keep_attention(true);
  const Tensor x = randn({1, n, d_model});
  const Tensor out = linformer.forward(x);
  const Tensor weights = linformer.last_attention();  // [1, H, n, k]
  check(tutorial::max_abs_diff(weights.narrow(3, n, k - n), zeros({1, heads, n, k - n})) == 0,
        "7.3 the two empty rows get weight exactly 0");
  check(tutorial::max_abs_diff(out, full.forward(x)) < 1e-6,
        "7.3 ... and Linformer equals full attention over the 2 positions");
  // The same attention by hand, with the empty rows left in as zero keys and zero values.
  auto heads_of = [&](const Tensor& t) {
    return t.view({1, n, heads, d_model / heads}).transpose(1, 2);
  };
  const Tensor q = heads_of(linformer.q_proj->forward(x));
  const Tensor key_rows = e->forward(heads_of(linformer.k_proj->forward(x)));    // [1, H, 4, d]
  const Tensor value_rows = e->forward(heads_of(linformer.v_proj->forward(x)));  // rows 2, 3: 0
  const Tensor kept_in = fused_attention(q, key_rows, value_rows);
  const Tensor excluded = from<bool>({false, false, true, true}, {1, 1, 1, k});
  const Tensor left_out = fused_attention(q, key_rows, value_rows, excluded);
  std::printf("  zero keys left in change the heads' outputs by up to %.3g\n",
              tutorial::max_abs_diff(kept_in, left_out));
  check(tutorial::max_abs_diff(kept_in, left_out) > 1e-2,
        "7.3 left in as zero keys, the empty rows take weight and change the output");
}

}  // namespace

int main() {
  manual_seed(107);
  std::printf("Step 7, exercises\n");
  padding_leaks();
  windows_by_hand();
  empty_rows();
  return tutorial::finish();
}
