// hello_autograd: a two-layer perceptron learns sin(x) on [-pi, pi] with plain gradient descent,
// written with nothing but tensors, autograd and an in-place update under NoGradGuard.
//
//   ./hello_autograd            (prints the loss every 400 steps, then a few predictions)
//
// It exits with status 1 if the loss did not fall by at least a factor of 100, so it doubles as
// an end-to-end test of the engine.
#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;

int main() {
  manual_seed(42);
  constexpr std::int64_t kPoints = 256, kHidden = 32, kSteps = 4000;
  constexpr double kLearningRate = 0.1;

  // The data: x evenly spaced on [-pi, pi], y = sin(x). x, y: [N, 1]
  std::vector<float> xs(kPoints), ys(kPoints);
  for (std::int64_t i = 0; i < kPoints; ++i) {
    const double x = -std::numbers::pi + 2 * std::numbers::pi * static_cast<double>(i) /
                                             static_cast<double>(kPoints - 1);
    xs[i] = static_cast<float>(x);
    ys[i] = static_cast<float>(std::sin(x));
  }
  const Tensor x = from(xs, {kPoints, 1});
  const Tensor y = from(ys, {kPoints, 1});

  // The parameters: leaves that require grad. w1's random directions give the hidden units
  // different slopes; w2 starts at zero, so the first prediction is 0 everywhere.
  Tensor w1 = randn({1, kHidden}, {.requires_grad = true});  // [1, H]
  Tensor b1 = zeros({kHidden}, {.requires_grad = true});     // [H]
  Tensor w2 = zeros({kHidden, 1}, {.requires_grad = true});  // [H, 1]
  Tensor b2 = zeros({1}, {.requires_grad = true});           // [1]
  const std::vector<Tensor> params = {w1, b1, w2, b2};

  // Inputs are scaled from [-pi, pi] to [-1, 1]: gradient descent converges far faster when
  // the hidden units do not start out saturated.
  auto model = [&](const Tensor& input) {
    Tensor scaled = input * (1.0 / std::numbers::pi);   // [N, 1]
    Tensor hidden = tanh(add(matmul(scaled, w1), b1));  // [N, H]; b1 broadcasts over rows
    return add(matmul(hidden, w2), b2);                 // [N, 1]
  };

  double first_loss = 0, last_loss = 0;
  for (std::int64_t step = 0; step <= kSteps; ++step) {
    Tensor diff = model(x) - y;
    Tensor loss = mean(diff * diff);  // mean squared error, a 0-dim tensor
    loss.backward();                  // fills p.grad() for every parameter

    last_loss = loss.item<double>();
    if (step == 0) first_loss = last_loss;
    if (step % 400 == 0) {
      std::printf("step %5lld  loss %.6f\n", static_cast<long long>(step), last_loss);
    }

    // Plain SGD, in place: the update itself must not become part of the graph.
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      raw::copy(p - kLearningRate * p.grad(), p);
      p.zero_grad();
    }
  }

  std::printf("\n     x    sin(x)   model\n");
  {
    NoGradGuard no_grad;
    const Tensor probe = from<float>({-3.0f, -1.5f, 0.0f, 0.5f, 1.5f, 3.0f}, {6, 1});
    const std::vector<float> predicted = model(probe).to_vector<float>();
    const std::vector<float> at = probe.to_vector<float>();
    for (std::size_t i = 0; i < at.size(); ++i) {
      std::printf("%6.2f  %7.4f  %7.4f\n", at[i], std::sin(at[i]), predicted[i]);
    }
  }

  const MemoryStats memory = memory_stats();
  std::printf("\nhost memory: %lld bytes in use, peak %lld bytes, %lld allocations\n",
              static_cast<long long>(memory.current_bytes),
              static_cast<long long>(memory.peak_bytes),
              static_cast<long long>(memory.allocation_count));

  if (!(last_loss < first_loss / 100)) {
    std::printf("the loss did not fall enough: %.6f -> %.6f\n", first_loss, last_loss);
    return 1;
  }
  std::printf("loss fell from %.4f to %.6f\n", first_loss, last_loss);
  return 0;
}
