// Tutorial step 6: sharing the projection matrices (none, headwise, key_value, layerwise) and
// their parameter counts, and a different k per layer. docs/tutorial/06-sharing.md walks
// through it.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// The k x n projection matrices an encoder owns: its parameters named *projection*, counted in
// units of k x max_seq_len (named_parameters lists a shared tensor once).
std::int64_t projection_matrices(const nn::Module& m, std::int64_t k, std::int64_t n) {
  std::int64_t count = 0;
  for (const auto& [name, p] : m.named_parameters())
    if (name.find("projection") != std::string::npos) count += p.numel() / (k * n);
  return count;
}

}  // namespace

int main() {
  std::printf("Step 6: sharing and a k per layer\n");
  // The paper's count is for 12 layers of 12 heads; a narrow model keeps this quick.
  const std::int64_t layers = 12, heads = 12, k = 16, n = 64;
  const nn::EncoderConfig base{.layers = layers,
                               .d_model = 48,
                               .heads = heads,
                               .d_ff = 48,
                               .max_seq_len = n,
                               .attention = nn::AttentionKind::linformer};
  const std::pair<nn::Sharing, std::int64_t> modes[] = {{nn::Sharing::none, 2 * heads * layers},
                                                        {nn::Sharing::headwise, 2 * layers},
                                                        {nn::Sharing::key_value, layers},
                                                        {nn::Sharing::layerwise, 1}};
  std::printf("  %-10s %9s %9s %20s\n", "sharing", "matrices", "expected", "projection params");
  for (const auto& [sharing, expected] : modes) {
    nn::EncoderConfig config = base;
    config.linformer = {.k = k, .sharing = sharing};
    nn::TransformerEncoder encoder(config);
    const std::int64_t count = projection_matrices(encoder, k, n);
    std::printf("  %-10s %9lld %9lld %20lld\n", nn::sharing_name(sharing),
                static_cast<long long>(count), static_cast<long long>(expected),
                static_cast<long long>(count * k * n));
    check(count == expected,
          std::string(nn::sharing_name(sharing)) + ": " + std::to_string(expected) +
              (expected == 1 ? " matrix" : " matrices") + " for 12 layers x 12 heads");
  }
  // Shared means the same tensor: with layerwise sharing every layer's key and value
  // projections are one module.
  {
    nn::EncoderConfig config = base;
    config.linformer = {.k = k, .sharing = nn::Sharing::layerwise};
    nn::TransformerEncoder encoder(config);
    auto first = std::dynamic_pointer_cast<nn::LinformerAttention>(encoder.layer(0)->attention);
    auto last = std::dynamic_pointer_cast<nn::LinformerAttention>(encoder.layer(11)->attention);
    check(first->key_projection == last->value_projection,
          "layerwise: layer 0's key projection is layer 11's value projection");
  }

  // A k per layer: the paper saw more skewed spectra (lower rank) in higher layers and
  // suggested a smaller k there. A list, or a rule.
  const auto linear = nn::k_linear_decay(/*layers=*/6, /*k0=*/64, /*step=*/16, /*k_min=*/16);
  const auto geometric = nn::k_geometric_decay(6, 64, 0.7, 16);
  auto print = [](const char* name, const std::vector<std::int64_t>& ks) {
    std::printf("  %-32s", name);
    for (std::int64_t v : ks) std::printf(" %3lld", static_cast<long long>(v));
    std::printf("\n");
  };
  print("k_linear_decay(6, 64, 16, 16):", linear);
  print("k_geometric_decay(6, 64, 0.7, 16):", geometric);
  check(linear == std::vector<std::int64_t>{64, 48, 32, 16, 16, 16},
        "linear decay: k_l = max(k_min, k0 - l step)");
  nn::EncoderConfig per_layer = base;
  per_layer.layers = 6;
  per_layer.linformer = {.k_per_layer = geometric, .sharing = nn::Sharing::headwise};
  nn::TransformerEncoder encoder(per_layer);
  bool matches = true;
  for (std::size_t l = 0; l < 6; ++l) {
    auto attn = std::dynamic_pointer_cast<nn::LinformerAttention>(encoder.layer(l)->attention);
    matches = matches && attn->key_projection->k() == geometric[l];
  }
  check(matches, "each layer projects to its own k");
  const Tensor y = encoder.forward(randn({2, n, 48}));
  check(y.shape() == Shape{2, n, 48}, "the stack still maps [B, n, d_model] to the same shape");

  // One matrix cannot have several shapes: layerwise sharing with unequal k is an error.
  per_layer.linformer.sharing = nn::Sharing::layerwise;
  try {
    nn::TransformerEncoder bad(per_layer);
    check(false, "layerwise sharing with a k per layer is refused");
  } catch (const Error& error) {
    std::printf("layerwise with k per layer: %s\n", error.what());
    check(true, "layerwise sharing with a k per layer is refused, with a message");
  }
  return tutorial::finish();
}
