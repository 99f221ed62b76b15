// Tutorial step 2: multi-head attention by hand (projections, split into heads, attention per
// head, concatenation, output projection), checked against nn::MultiHeadAttention.
// docs/tutorial/02-multi-head.md walks through it.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

int main() {
  manual_seed(2);
  std::printf("Step 2: multi-head attention\n");
  const std::int64_t batch = 2, n = 6, d_model = 8, heads = 2, d_head = d_model / heads;
  nn::MultiHeadAttention mha(d_model, heads);
  const Tensor x = randn({batch, n, d_model});

  // 1. Three linear maps of the same input: Q = X Wq + bq, K = X Wk + bk, V = X Wv + bv.
  //    nn::Linear stores W as [out, in] (PyTorch's layout), so X W^T.
  auto linear = [](const Tensor& in, const nn::Linear& l) {
    return matmul(in, l.weight.transpose(0, 1)) + l.bias;
  };
  const Tensor q = linear(x, *mha.q_proj), k = linear(x, *mha.k_proj), v = linear(x, *mha.v_proj);

  // 2. Each head sees its own slice of d_head columns. Heads become a batch dim:
  //    [B, n, d_model] -> [B, n, H, d_head] -> [B, H, n, d_head] (a view: no data moves).
  auto split = [&](const Tensor& t) { return t.view({batch, n, heads, d_head}).transpose(1, 2); };
  const Tensor qh = split(q), kh = split(k), vh = split(v);
  std::printf("x %s -> per-head query %s\n", shape_str(x.shape()).c_str(),
              shape_str(qh.shape()).c_str());

  // 3. Attention in every head at once (matmul batches over [B, H]); then head by head, to
  //    show that the heads do not interact.
  const Tensor all_heads = fused_attention(qh, kh, vh);  // [B, H, n, d_head]
  std::vector<Tensor> per_head;
  for (std::int64_t h = 0; h < heads; ++h) {
    per_head.push_back(fused_attention(qh.select(1, h), kh.select(1, h), vh.select(1, h)));
  }
  check(tutorial::max_abs_diff(all_heads, stack(per_head, 1)) < 1e-6,
        "attention over [B, H] at once equals attention head by head");

  // 4. Concatenate the heads back to d_model columns, then the output projection Wo.
  const Tensor merged = all_heads.transpose(1, 2).reshape({batch, n, d_model});
  const Tensor ours = linear(merged, *mha.out_proj);
  const Tensor theirs = mha.forward(x);
  std::printf("max |by hand - MultiHeadAttention| = %.3g\n", tutorial::max_abs_diff(ours, theirs));
  check(tutorial::max_abs_diff(ours, theirs) < 1e-5, "by hand equals nn::MultiHeadAttention");

  // Parameters: four d_model x d_model matrices and four biases, whatever the number of heads.
  const std::int64_t expected = 4 * d_model * d_model + 4 * d_model;
  std::printf("parameters: %lld (4 d^2 + 4 d = %lld)\n",
              static_cast<long long>(mha.num_parameters()), static_cast<long long>(expected));
  check(mha.num_parameters() == expected, "MultiHeadAttention owns 4 d^2 + 4 d parameters");

  // The probabilities of each head: [B, H, n, n], each row a distribution over the n keys.
  mha.keep_attention(true);
  mha.forward(x);
  const Tensor p = mha.last_attention();
  check(p.shape() == Shape{batch, heads, n, n}, "the attention maps are [B, H, n, n]");
  tutorial::print_matrix("head 0 of the first sequence", p.select(1, 0));
  tutorial::print_matrix("head 1 of the first sequence", p.select(1, 1));
  return tutorial::finish();
}
