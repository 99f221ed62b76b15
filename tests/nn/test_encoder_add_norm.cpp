// The post-norm encoder layer's residual steps, norm(x + branch): one fused add_layer_norm when
// the norm is the built-in LayerNorm, the composite add then norm for any other norm module.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "core/profiler.h"
#include "nn/gradcheck_module.h"

using namespace tinyformer;
using test::max_abs_diff;
using test::randn64;

namespace {

// A LayerNorm in all but its type: the layer must treat it as a custom norm (the composite).
class OwnLayerNorm : public nn::LayerNorm {
 public:
  using nn::LayerNorm::LayerNorm;
  std::string type_name() const override { return "OwnLayerNorm"; }
};

nn::EncoderConfig post_norm_config() {
  return {.layers = 1,
          .d_model = 8,
          .heads = 2,
          .d_ff = 12,
          .max_seq_len = 6,
          .dropout = 0.0,
          .pre_norm = false};
}

// A post-norm layer with the given norms and fixed attention and feed-forward weights (seeded).
std::shared_ptr<nn::TransformerEncoderLayer> make_layer(std::shared_ptr<nn::NormModule> n1,
                                                        std::shared_ptr<nn::NormModule> n2) {
  const nn::EncoderConfig c = post_norm_config();
  manual_seed(5);
  auto attention = std::make_shared<nn::MultiHeadAttention>(c.d_model, c.heads);
  auto ff = nn::make_feed_forward(c.feed_forward, {c, 0});
  auto layer = std::make_shared<nn::TransformerEncoderLayer>(c, attention, ff, n1, n2);
  layer->to(kFloat64);
  return layer;
}

// Calls of `op` in a forward and backward of `layer`, and the output and input gradient.
struct Run {
  std::int64_t calls = 0;
  Tensor y, grad_x;
};
Run run(nn::TransformerEncoderLayer& layer, const Tensor& x0, const char* op) {
  Tensor x = x0.detach().requires_grad_(true);
  Profiler profiler;
  Tensor y = layer.forward(x, Tensor(), false);
  sum(mul(y, y)).backward();
  Run r{0, y, x.grad()};
  for (const OpProfile& row : profiler.ops()) {
    if (row.name == op) r.calls = row.calls;
  }
  return r;
}

}  // namespace

TEST_CASE("post-norm encoder layer: LayerNorm fuses the residual add, a custom norm does not") {
  const std::int64_t d = post_norm_config().d_model;
  const Tensor x = randn64({2, 6, d}, false);
  auto fused_layer =
      make_layer(std::make_shared<nn::LayerNorm>(d), std::make_shared<nn::LayerNorm>(d));
  auto composite_layer =
      make_layer(std::make_shared<OwnLayerNorm>(d), std::make_shared<OwnLayerNorm>(d));
  const Run fused = run(*fused_layer, x, "add_layer_norm");
  const Run composite = run(*composite_layer, x, "add_layer_norm");
  CHECK(fused.calls == 2);      // norm1 and norm2
  CHECK(composite.calls == 0);  // the custom norms saw the sums
  CHECK(run(*composite_layer, x, "layer_norm").calls == 2);
  // Same weights (one seed), same results.
  CHECK(max_abs_diff(fused.y, composite.y) < 1e-12);
  CHECK(max_abs_diff(fused.grad_x, composite.grad_x) < 1e-12);
  // And the fused layer's gradients are right.
  CHECK(test::gradcheck_module(*fused_layer, randn64({1, 3, d}), [&](const Tensor& in) {
    return fused_layer->forward(in, Tensor(), false);
  }));
}
