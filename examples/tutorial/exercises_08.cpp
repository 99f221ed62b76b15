// Solutions to the exercises of tutorial step 8 (docs/tutorial/08-causal.md): the causal mask by
// hand, a "causal Linformer" that hides the windows reaching into the future and what it costs,
// and greedy generation as the argmax of the logits. One function per exercise; each checks its
// result.
#include "tutorial.h"

using namespace tinyformer;
using nn::data::ByteTokenizer;
using tutorial::check;

namespace {

// Exercise 8.1: the causal mask by hand. Key j is excluded for query i when j > i: compare a
// column of positions with a row of positions.
void causal_mask_by_hand() {
  std::printf("Exercise 8.1: the causal mask by hand\n");
  const std::int64_t n = 6;
  const Tensor positions = arange(n, {.dtype = kInt64});
  const Tensor excluded = gt(positions.view({1, n}), positions.view({n, 1}));  // [n, n]: j > i
  tutorial::print_matrix("excluded (1 = key j lies after query i)", excluded.to(kFloat32));
  check(tutorial::max_abs_diff(excluded.to(kFloat32), future_mask(n, n).to(kFloat32)) == 0,
        "8.1 j > i is future_mask(n, n)");
  const Tensor q = randn({2, n, 4}), k = randn({2, n, 4}), v = randn({2, n, 4});
  check(tutorial::max_abs_diff(fused_attention(q, k, v, excluded),
                               fused_attention(q, k, v, {}, {.causal = true})) == 0,
        "8.1 attention with it equals causal = true, bit for bit");
}

// Exercise 8.2: a causal Linformer by windows. With mean pooling, summary row r averages window r;
// hiding from query i every row whose window ends after i stops the leak. The price: a query
// sees only complete windows, so the first w - 1 queries see nothing at all (their output is
// NaN: every key excluded), and no query sees the positions of its own unfinished window.
void causal_by_windows() {
  std::printf("Exercise 8.2: a causal Linformer by hiding windows\n");
  const std::int64_t n = 16, k = 4, d = 4, w = n / k, changed = 9;
  auto pool = nn::make_projection("mean", {.k = k, .max_seq_len = n, .head_dim = d});
  // Row r covers positions r w .. r w + w - 1; query i may see it when r w + w - 1 <= i.
  std::vector<bool> hidden;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t r = 0; r < k; ++r) hidden.push_back(r * w + w - 1 > i);
  const Tensor excluded = from<bool>(hidden, {n, k});
  auto attend = [&](const Tensor& x) {  // x: [1, 1, n, d], used as query, key and value
    return fused_attention(x, pool->forward(x), pool->forward(x), excluded);
  };
  const Tensor x = randn({1, 1, n, d});
  std::vector<float> moved = x.contiguous().to_vector<float>();
  for (std::int64_t c = 0; c < d; ++c) moved[static_cast<std::size_t>(changed * d + c)] += 5.0f;
  const auto before = attend(x).to_vector<float>();
  const auto after = attend(from<float>(moved, {1, 1, n, d})).to_vector<float>();
  std::int64_t blind = 0;
  bool leak = false;
  for (std::int64_t i = 0; i < n; ++i) {
    const float first = before[static_cast<std::size_t>(i * d)];
    if (first != first) {  // NaN: no visible row
      ++blind;
      continue;
    }
    if (i < changed)
      for (std::int64_t c = 0; c < d; ++c)
        leak = leak || before[static_cast<std::size_t>(i * d + c)] !=
                           after[static_cast<std::size_t>(i * d + c)];
  }
  std::printf("  window w = %lld: %lld queries see no row at all\n", static_cast<long long>(w),
              static_cast<long long>(blind));
  check(!leak, "8.2 hiding the unfinished windows: position 9 changes no earlier output");
  check(blind == w - 1, "8.2 ... but the first w - 1 queries see nothing (NaN)");
  // Query 10 sees window 0-3 and 4-7 only: positions 8, 9 and 10, its latest, are invisible.
  const double own =
      std::abs(before[static_cast<std::size_t>(10 * d)] - after[static_cast<std::size_t>(10 * d)]);
  check(own == 0.0, "8.2 ... and query 10 does not see position 9, two steps back");
}

// Exercise 8.3: generation. With temperature 0, generate appends the argmax of the last
// position's logits, one token at a time; with a temperature, the same seed gives the same text.
void greedy_is_argmax() {
  std::printf("Exercise 8.3: greedy generation is the argmax, step by step\n");
  nn::CausalLM model(
      {.layers = 1, .d_model = 16, .heads = 2, .d_ff = 32, .max_seq_len = 16, .dropout = 0.0},
      ByteTokenizer::vocab_size);
  const std::vector<std::int64_t> prompt = ByteTokenizer::encode("the cat");
  const auto greedy = model.generate(prompt, 5, {.temperature = 0});
  std::vector<std::int64_t> text = prompt, by_hand;
  {
    NoGradGuard no_grad;
    model.eval();
    for (int step = 0; step < 5; ++step) {
      const auto n = static_cast<std::int64_t>(text.size());
      const Tensor logits = model.forward(from<std::int64_t>(text, {1, n}));  // [1, n, vocab]
      const std::int64_t next = argmax(logits.select(1, n - 1), -1).item<std::int64_t>();
      by_hand.push_back(next);
      text.push_back(next);
    }
  }
  check(greedy == by_hand, "8.3 greedy generation = argmax of the last logits, 5 steps");
  const auto a = model.generate(prompt, 20, {.temperature = 1.0, .seed = 7});
  const auto b = model.generate(prompt, 20, {.temperature = 1.0, .seed = 7});
  const auto c = model.generate(prompt, 20, {.temperature = 1.0, .seed = 8});
  check(a == b, "8.3 the same seed draws the same tokens");
  check(a != c, "8.3 another seed draws others");
}

}  // namespace

int main() {
  manual_seed(108);
  std::printf("Step 8, exercises\n");
  causal_mask_by_hand();
  causal_by_windows();
  greedy_is_argmax();
  return tutorial::finish();
}
