// Adding a layer: a Module subclass that registers its parameters and submodules in the
// constructor and has a forward. This one is a gated feed-forward block (GLU variant):
// out = W2 (gelu(W1 x) * (V x)), trained for a few steps on a toy regression to show that its
// parameters learn.
#include <tinyformer/tinyformer.h>

#include <cstdio>

using namespace tinyformer;

class GatedFeedForward : public nn::Module {
 public:
  GatedFeedForward(std::int64_t d_model, std::int64_t d_hidden) {
    w1 = register_module("w1", std::make_shared<nn::Linear>(d_model, d_hidden));
    v = register_module("v", std::make_shared<nn::Linear>(d_model, d_hidden));
    w2 = register_module("w2", std::make_shared<nn::Linear>(d_hidden, d_model));
  }
  // x: [..., d_model] -> [..., d_model]
  Tensor forward(const Tensor& x) const {
    return w2->forward(gelu(w1->forward(x)) * v->forward(x));
  }
  std::string type_name() const override { return "GatedFeedForward"; }

  std::shared_ptr<nn::Linear> w1, v, w2;
};

int main() {
  manual_seed(0);
  auto layer = std::make_shared<GatedFeedForward>(8, 32);
  std::printf("%s", layer->to_string().c_str());

  // Learn y = x * x (elementwise) on random inputs with plain SGD.
  Tensor x = randn({256, 8});
  Tensor y = x * x;
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor diff = layer->forward(x) - y;
    Tensor loss = mean(diff * diff);
    layer->zero_grad();
    loss.backward();
    {
      NoGradGuard no_grad;
      for (const Tensor& p : layer->parameters()) raw::copy(p - 0.05 * p.grad(), p);
    }
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 50 == 0) std::printf("step %3d  loss %.4f\n", step, last);
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  return last < 0.5 * first ? 0 : 1;
}
