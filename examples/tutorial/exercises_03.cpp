// Solutions to the exercises of tutorial step 3 (docs/tutorial/03-fused-backward.md): attention as
// a custom autograd function with the backward derived in the step, the gradient with respect to
// a softmax temperature, and what each way of computing attention keeps for its backward. One
// function per exercise; each checks its result.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// Exercise 3.1: attention as a custom function. forward keeps Q, K, V and P; backward is the
// step's five formulas. gradcheck then compares it with finite differences.
struct MyAttention : autograd::Function {
  Tensor query, key, value, probs;
  double scale = 1.0;

  Tensor forward(const std::vector<Tensor>& in) override {
    query = in[0];
    key = in[1];
    value = in[2];
    scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
    probs = softmax(matmul(query, key.transpose(-2, -1)) * scale, -1);  // [..., n, m]
    return matmul(probs, value);
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor d_value = matmul(probs.transpose(-2, -1), g);            // P^T G
    const Tensor d_probs = matmul(g, value.transpose(-2, -1));            // G V^T
    const Tensor row_dot = sum(d_probs * probs, {-1}, /*keepdim=*/true);  // <g, p> per row
    const Tensor d_scores = probs * (d_probs - row_dot);                  // J^T g, row by row
    return {matmul(d_scores, key) * scale, matmul(d_scores.transpose(-2, -1), query) * scale,
            d_value};
  }
  std::string name() const override { return "MyAttention"; }
};

void custom_function() {
  std::printf("Exercise 3.1: attention as a custom function\n");
  const auto like = TensorOptions{.dtype = kFloat64, .requires_grad = true};
  const Tensor q = randn({2, 4, 3}, like), k = randn({2, 5, 3}, like), v = randn({2, 5, 2}, like);
  auto mine = [](const std::vector<Tensor>& in) {
    return autograd::apply(std::make_shared<MyAttention>(), in);
  };
  check(tutorial::max_abs_diff(mine({q, k, v}), fused_attention(q, k, v)) < 1e-12,
        "3.1 the custom function's forward equals fused_attention");
  check(gradcheck(mine, {q, k, v}), "3.1 gradcheck: its hand-written backward is right");
  // A wrong backward is caught: forgetting the softmax Jacobian's -<g, p> term.
  struct Wrong : MyAttention {
    std::vector<Tensor> backward(const Tensor& g) override {
      const Tensor d_scores = probs * matmul(g, value.transpose(-2, -1));  // no row_dot
      return {matmul(d_scores, key) * scale, matmul(d_scores.transpose(-2, -1), query) * scale,
              matmul(probs.transpose(-2, -1), g)};
    }
  };
  bool caught = false;
  try {
    caught = !gradcheck(
        [](const std::vector<Tensor>& in) {
          return autograd::apply(std::make_shared<Wrong>(), in);
        },
        {q, k, v});
  } catch (const Error& error) {
    caught = true;
    std::printf("  without the -<g, p> term: %.120s...\n", error.what());
  }
  check(caught, "3.1 gradcheck catches a backward without the -<g, p> term");
}

// Exercise 3.2: a temperature t multiplies the scores, S = t Q K^T. Its gradient is the sum over
// all scores of dS * dS/dt = sum(dS * Q K^T), with dS from the step's formulas.
void temperature_gradient() {
  std::printf("Exercise 3.2: the gradient of a temperature\n");
  const auto like = TensorOptions{.dtype = kFloat64};
  const Tensor q = randn({2, 6, 4}, like), k = randn({2, 6, 4}, like), v = randn({2, 6, 3}, like);
  const Tensor g = randn({2, 6, 3}, like);  // dL/dO: L = <g, O>
  const double t0 = 0.7;
  auto loss = [&](const Tensor& t) {
    return sum(matmul(softmax(matmul(q, k.transpose(-2, -1)) * t, -1), v) * g);
  };

  // By hand: the formulas of the step, then dL/dt = sum(dS * Q K^T).
  const Tensor raw = matmul(q, k.transpose(-2, -1));
  const Tensor p = softmax(raw * t0, -1);
  const Tensor d_probs = matmul(g, v.transpose(-2, -1));
  const Tensor d_scores = p * (d_probs - sum(d_probs * p, {-1}, true));
  const double by_hand = sum(d_scores * raw).item<double>();
  // By autograd, t a 0-dim tensor that requires grad.
  const Tensor t = scalar_tensor(t0, {.dtype = kFloat64, .requires_grad = true});
  loss(t).backward();
  const double by_autograd = t.grad().item<double>();
  // By central finite differences.
  const double eps = 1e-6;
  const double numeric = (loss(scalar_tensor(t0 + eps, like)).item<double>() -
                          loss(scalar_tensor(t0 - eps, like)).item<double>()) /
                         (2 * eps);
  std::printf("  dL/dt: by hand %.12f, autograd %.12f, finite differences %.12f\n", by_hand,
              by_autograd, numeric);
  check(std::abs(by_hand - by_autograd) < 1e-12, "3.2 dL/dt by hand equals autograd's");
  check(std::abs(by_hand - numeric) < 1e-7, "3.2 ... and central finite differences");
}

// Exercise 3.3: the memory a forward leaves for the backward. The composition's graph keeps the
// scores, their exponentials and P (several [n, m] tensors); the fused op on its materialized
// kernel keeps P alone, and on its memory-efficient kernel (the default) none of them.
void what_the_backward_keeps() {
  std::printf("Exercise 3.3: what each forward keeps for the backward\n");
  const auto like = TensorOptions{.requires_grad = true};
  const std::int64_t n = 256;
  const Tensor q = randn({1, 4, n, 16}, like), k = randn({1, 4, n, 16}, like),
               v = randn({1, 4, n, 16}, like);
  const double p_bytes = 4.0 * n * n * 4;  // one [1, 4, n, n] float32 tensor
  auto kept = [&](auto&& attention) {
    const auto before = memory_stats().current_bytes;
    const Tensor out = attention();  // the graph stays alive with `out`
    return static_cast<double>(memory_stats().current_bytes - before) / p_bytes;
  };
  const double fused =
      kept([&] { return fused_attention(q, k, v, {}, {.kernel = AttentionKernel::materialized}); });
  const double efficient = kept([&] { return fused_attention(q, k, v); });
  const double composed = kept([&] { return nn::functional::attention(q, k, v); });
  std::printf(
      "  kept after the forward, in units of one [B, H, n, n] tensor: fused %.2f, "
      "composition %.2f\n",
      fused, composed);
  check(fused > 0.9 && fused < 1.5, "3.3 the fused op keeps about one n x n tensor: P");
  check(composed > fused + 0.9, "3.3 the composition keeps at least one n x n tensor more");
  std::printf("  the memory-efficient kernel (the default) keeps %.2f of one\n", efficient);
  check(efficient < 0.1, "3.3 the memory-efficient kernel keeps no n x n tensor");
}

}  // namespace

int main() {
  manual_seed(103);
  std::printf("Step 3, exercises\n");
  custom_function();
  temperature_gradient();
  what_the_backward_keeps();
  return tutorial::finish();
}
