// Adding a differentiable op: a custom autograd::Function with its own forward and backward,
// checked by gradcheck. The op is softplus(x) = log(1 + exp(x)), whose derivative is
// sigmoid(x).
#include <tinyformer/tinyformer.h>

#include <cstdio>

using namespace tinyformer;

struct Softplus : autograd::Function {
  Tensor x;  // saved for backward

  Tensor forward(const std::vector<Tensor>& inputs) override {
    x = inputs[0];
    // log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)), which never overflows.
    return relu(x) + log(1.0 + exp(-abs(x)));
  }
  std::vector<Tensor> backward(const Tensor& grad) override { return {grad * sigmoid(x)}; }
  std::string name() const override { return "Softplus"; }
};

Tensor softplus(const Tensor& x) {
  return autograd::apply(std::make_shared<Softplus>(), {x});
}

int main() {
  Tensor x = randn({3, 4}, {.dtype = kFloat64, .requires_grad = true});
  const bool ok = gradcheck([](const std::vector<Tensor>& in) { return softplus(in[0]); }, {x});
  std::printf("gradcheck of Softplus: %s\n", ok ? "passed" : "failed");

  Tensor y = softplus(from<float>({-30.0f, 0.0f, 30.0f}, {3}));
  std::printf("softplus([-30, 0, 30]) = ");
  for (float v : y.to_vector<float>()) std::printf("%g ", v);
  std::printf("\n");
  return ok ? 0 : 1;
}
