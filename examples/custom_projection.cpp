// Adding a Linformer projection kind: a fixed random Gaussian E (not learned), as in the
// Linformer paper's proof that k = O(d / eps^2) rows suffice. One class, one registration; the
// encoder then builds it by name. The program compares the attention output of the new kind
// with full attention on the same weights, for growing k.
#include <tinyformer/tinyformer.h>

#include <cmath>
#include <cstdio>

using namespace tinyformer;

// x (the keys or the values): [B, H, n, d] -> [B, H, k, d] as x' = E[:, :n] x, with
// E ~ N(0, 1/k) fixed.
struct FixedGaussianProjection : nn::Projection {
  Tensor e;  // [k, max_seq_len], a buffer: saved with the model, never trained

  explicit FixedGaussianProjection(const nn::ProjectionSpec& spec) {
    e = register_buffer("e",
                        randn({spec.k, spec.max_seq_len}) / std::sqrt(static_cast<double>(spec.k)));
  }
  Tensor forward(const Tensor& x) const override {
    return matmul(e.narrow(1, 0, x.size(2)).to(x.dtype()), x);
  }
  std::int64_t k() const override { return e.size(0); }
  std::string type_name() const override { return "FixedGaussianProjection"; }
};

int main() {
  nn::register_projection("fixed_gaussian", [](const nn::ProjectionSpec& spec) {
    return std::make_shared<FixedGaussianProjection>(spec);
  });

  manual_seed(0);
  const std::int64_t n = 256, d_model = 64, heads = 4;
  nn::MultiHeadAttention full(d_model, heads);
  full.eval();
  Tensor x = randn({1, n, d_model});
  Tensor reference = full.forward(x);

  std::printf("k     relative error of the attention output against full attention\n");
  double previous = 1e9;
  bool improving = true;
  for (std::int64_t k : {8, 64, 256}) {
    const nn::ProjectionSpec spec{.k = k, .max_seq_len = n, .head_dim = d_model / heads};
    auto e = nn::make_projection("fixed_gaussian", spec);
    nn::LinformerAttention lin(d_model, heads, e, e);
    lin.load_state_dict(full.state_dict(), /*strict=*/false);  // same q/k/v/out_proj weights
    lin.eval();
    Tensor diff = lin.forward(x) - reference;
    const double error =
        std::sqrt(sum(diff * diff).item<float>() / sum(reference * reference).item<float>());
    std::printf("%-5lld %.4f\n", static_cast<long long>(k), error);
    improving = improving && error < previous;
    previous = error;
  }
  std::printf("%s\n", improving ? "the error falls as k grows" : "the error did not fall with k");
  return improving ? 0 : 1;
}
