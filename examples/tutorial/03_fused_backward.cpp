// Tutorial step 3: the backward pass of attention, derived by hand (the softmax Jacobian, then
// dV, dP, dS, dQ, dK), written with primitive ops, and checked three ways: against the fused
// op's hand-written backward (autograd/attention.cpp), against autograd through the
// composition, and by finite differences (gradcheck). docs/tutorial/03-fused-backward.md
// derives the formulas.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

struct Gradients {
  Tensor query, key, value;
};

// Forward: S = Q K^T / sqrt(d), P = softmax(S) (rows), O = P V. Given dO = dL/dO:
//   dV = P^T dO                              (O = P V is linear in V)
//   dP = dO V^T                              (and in P)
//   dS = P * (dP - rowsum(dP * P))           (the softmax Jacobian, applied row by row)
//   dQ = dS K / sqrt(d),   dK = dS^T Q / sqrt(d)
Gradients attention_backward_by_hand(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& probs, const Tensor& d_out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const Tensor d_value = matmul(probs.transpose(-2, -1), d_out);
  const Tensor d_probs = matmul(d_out, value.transpose(-2, -1));
  const Tensor row_dot = sum(d_probs * probs, {-1}, /*keepdim=*/true);  // [..., n, 1]
  const Tensor d_scores = probs * (d_probs - row_dot);
  return {matmul(d_scores, key) * scale, matmul(d_scores.transpose(-2, -1), query) * scale,
          d_value};
}

int main() {
  manual_seed(3);
  std::printf("Step 3: the backward pass of attention\n");

  // The softmax Jacobian of one row: dp_i/ds_j = p_i (delta_ij - p_j), i.e. J = diag(p) - p p^T.
  // Its product with an upstream gradient g is p * (g - <g, p>): no n x n matrix needed.
  {
    const Tensor s = randn({5}, {.dtype = kFloat64});
    const Tensor p = softmax(s, 0);
    std::vector<double> identity(25, 0.0);
    for (int i = 0; i < 5; ++i) identity[i * 5 + i] = 1.0;
    const Tensor diag_p = from<double>(identity, {5, 5}) * p.unsqueeze(0);    // p on the diagonal
    const Tensor jacobian = diag_p - matmul(p.unsqueeze(1), p.unsqueeze(0));  // [5, 5]
    tutorial::print_matrix("softmax Jacobian diag(p) - p p^T", jacobian);
    const Tensor g = randn({5}, {.dtype = kFloat64});
    const Tensor full = matmul(jacobian.transpose(0, 1), g.unsqueeze(1)).squeeze(1);
    const Tensor short_form = p * (g - sum(g * p));
    check(tutorial::max_abs_diff(full, short_form) < 1e-14,
          "J^T g equals p * (g - <g, p>) (J is symmetric)");
    check(tutorial::max_abs_diff(sum(jacobian, {1}), zeros({5}, {.dtype = kFloat64})) < 1e-15,
          "the Jacobian's rows sum to 0 (adding a constant to every score changes nothing)");
  }

  // float64: the three computations agree to rounding.
  const auto like = TensorOptions{.dtype = kFloat64, .requires_grad = true};
  const Tensor query = randn({2, 3, 6, 4}, like), key = randn({2, 3, 6, 4}, like),
               value = randn({2, 3, 6, 5}, like);
  const Tensor d_out = randn({2, 3, 6, 5}, {.dtype = kFloat64});

  // (a) The fused op: one graph node whose backward is the formulas above.
  Tensor probs;
  const Tensor out = fused_attention(query, key, value, {}, {.probs = &probs});
  out.backward(d_out);
  const Gradients fused{query.grad(), key.grad(), value.grad()};
  // (b) By hand, from the probabilities the forward kept.
  const Gradients ours =
      attention_backward_by_hand(query.detach(), key.detach(), value.detach(), probs, d_out);
  // (c) Autograd through the textbook composition (matmul, division, softmax, matmul).
  for (const Tensor& t : {query, key, value}) t.zero_grad();
  nn::functional::attention(query, key, value).backward(d_out);
  const Gradients composed{query.grad(), key.grad(), value.grad()};

  const char* names[] = {"dQ", "dK", "dV"};
  const Tensor Gradients::*members[] = {&Gradients::query, &Gradients::key, &Gradients::value};
  for (int i = 0; i < 3; ++i) {
    const double by_hand = tutorial::max_abs_diff(ours.*members[i], fused.*members[i]);
    const double by_graph = tutorial::max_abs_diff(composed.*members[i], fused.*members[i]);
    std::printf("%s: |by hand - fused| = %.2g, |composition - fused| = %.2g\n", names[i], by_hand,
                by_graph);
    check(by_hand < 1e-12 && by_graph < 1e-12,
          std::string(names[i]) + " by hand = fused backward = autograd through the composition");
  }

  // Finite differences: gradcheck perturbs every input element by +-eps and compares.
  auto fused_fn = [](const std::vector<Tensor>& in) {
    return fused_attention(in[0], in[1], in[2]);
  };
  const Tensor q = randn({1, 2, 5, 3}, like), k = randn({1, 2, 5, 3}, like),
               v = randn({1, 2, 5, 3}, like);
  check(gradcheck(fused_fn, {q, k, v}), "gradcheck: fused_attention's backward, no mask");
  check(gradcheck(
            [](const std::vector<Tensor>& in) {
              return fused_attention(in[0], in[1], in[2], {}, {.causal = true});
            },
            {q, k, v}),
        "gradcheck: with a causal mask");
  const Tensor excluded = from<bool>({false, false, false, true, true}, {1, 1, 1, 5});
  check(gradcheck(
            [&](const std::vector<Tensor>& in) {
              return fused_attention(in[0], in[1], in[2], excluded);
            },
            {q, k, v}),
        "gradcheck: with a key-padding mask");

  // What the fused op saves for its backward: Q (scaled), K, V and P; not the scores S nor
  // exp(S), which the composition's graph keeps as well.
  std::printf(
      "saved by the fused op: Q, K, V and P; P is [..., n, m], the O(n^2) term that "
      "Linformer shrinks to [..., n, k]\n");
  return tutorial::finish();
}
