// An outside program built against the installed package: it checks one gradient by hand.
//
// f(x, w) = sum(tanh(x @ w)), so df/dw = x^T (1 - tanh(x @ w)^2), computed here with plain loops
// and compared with what backward() gives. Exits non-zero on a mismatch.
#include <cmath>
#include <cstdio>
#include <vector>

#include <tinyformer/tinyformer.h>

namespace tf = tinyformer;

int main() {
  // x: [2, 3], w: [3, 2]
  const std::vector<double> xs = {0.5, -1.0, 2.0, 1.5, 0.25, -0.75};
  const std::vector<double> ws = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6};
  const tf::Tensor x = tf::from(xs, {2, 3});
  tf::Tensor w = tf::from(ws, {3, 2});
  w.requires_grad_();

  tf::Tensor f = tf::sum(tf::tanh(tf::matmul(x, w)));
  f.backward();
  const std::vector<double> grad = w.grad().to_vector<double>();

  double expected_f = 0;
  std::vector<double> expected_grad(6, 0.0);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      double z = 0;
      for (int k = 0; k < 3; ++k) z += xs[i * 3 + k] * ws[k * 2 + j];
      const double t = std::tanh(z);
      expected_f += t;
      for (int k = 0; k < 3; ++k) expected_grad[k * 2 + j] += xs[i * 3 + k] * (1 - t * t);
    }
  }

  int wrong = 0;
  if (std::abs(f.item<double>() - expected_f) > 1e-12) {
    std::printf("f: got %.17g, expected %.17g\n", f.item<double>(), expected_f);
    ++wrong;
  }
  for (std::size_t k = 0; k < expected_grad.size(); ++k) {
    if (std::abs(grad[k] - expected_grad[k]) > 1e-12) {
      std::printf("df/dw[%zu]: got %.17g, expected %.17g\n", k, grad[k], expected_grad[k]);
      ++wrong;
    }
  }
  if (wrong != 0) return 1;
  std::printf("installed tinyformer works: f = %.6f, df/dw matches by hand\n", expected_f);
  return 0;
}
