// Solutions to the exercises of tutorial step 6 (docs/tutorial/06-sharing.md): what each sharing
// mode saves in parameters, why a shared matrix's gradient is the sum of its uses', and what a k
// per layer saves in attention maps. One function per exercise; each checks its result.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

const std::int64_t kLayers = 4, kHeads = 4, kModel = 32, kSeq = 64, kRank = 16;

nn::EncoderConfig linformer_config(nn::Sharing sharing) {
  return {.layers = kLayers,
          .d_model = kModel,
          .heads = kHeads,
          .d_ff = 64,
          .max_seq_len = kSeq,
          .attention = nn::AttentionKind::linformer,
          .linformer = {.k = kRank, .sharing = sharing}};
}

// Exercise 6.1: whole-model parameter counts. Each mode owns the parameters of full attention
// plus its number of k x n matrices (2 h L, 2 L, L, 1) times k n.
void parameters_per_mode() {
  std::printf(
      "Exercise 6.1: parameters per sharing mode (%lld layers, %lld heads, k = %lld, "
      "n = %lld)\n",
      static_cast<long long>(kLayers), static_cast<long long>(kHeads),
      static_cast<long long>(kRank), static_cast<long long>(kSeq));
  nn::EncoderConfig full_config = linformer_config(nn::Sharing::none);
  full_config.attention = nn::AttentionKind::full;
  const std::int64_t full = nn::TransformerEncoder(full_config).num_parameters();
  std::printf("  %-10s %10s %12s\n", "mode", "parameters", "full + m k n");
  std::printf("  %-10s %10lld\n", "full", static_cast<long long>(full));
  const std::pair<nn::Sharing, std::int64_t> modes[] = {{nn::Sharing::none, 2 * kHeads * kLayers},
                                                        {nn::Sharing::headwise, 2 * kLayers},
                                                        {nn::Sharing::key_value, kLayers},
                                                        {nn::Sharing::layerwise, 1}};
  std::vector<std::int64_t> counts;
  bool formula = true;
  for (const auto& [sharing, matrices] : modes) {
    counts.push_back(nn::TransformerEncoder(linformer_config(sharing)).num_parameters());
    const std::int64_t expected = full + matrices * kRank * kSeq;
    std::printf("  %-10s %10lld %12lld\n", nn::sharing_name(sharing),
                static_cast<long long>(counts.back()), static_cast<long long>(expected));
    formula = formula && counts.back() == expected;
  }
  check(formula, "6.1 every mode owns full attention's parameters plus m k n (m matrices)");
  check(counts[0] > counts[1] && counts[1] > counts[2] && counts[2] > counts[3],
        "6.1 none > headwise > key-value > layerwise");
}

// Exercise 6.2: a shared matrix's gradient. With key-value sharing one E projects the keys and the
// values; its gradient equals the sum of the gradients of two separate copies, one per use.
void shared_gradient() {
  std::printf("Exercise 6.2: a shared matrix receives the sum of its uses' gradients\n");
  const nn::ProjectionSpec spec{
      .k = 4, .max_seq_len = 12, .head_dim = 4, .init = nn::ProjectionInit::normal};
  auto shared = std::make_shared<nn::LinearProjection>(spec);
  auto for_keys = std::make_shared<nn::LinearProjection>(spec);
  auto for_values = std::make_shared<nn::LinearProjection>(spec);
  nn::LinformerAttention one(8, 2, shared, shared);
  nn::LinformerAttention two(8, 2, for_keys, for_values);
  one.to(kFloat64);
  two.to(kFloat64);
  {
    NoGradGuard no_grad;
    raw::copy(shared->weight, for_keys->weight);
    raw::copy(shared->weight, for_values->weight);
    for (auto [src, dst] :
         {std::pair{one.q_proj, two.q_proj}, std::pair{one.k_proj, two.k_proj},
          std::pair{one.v_proj, two.v_proj}, std::pair{one.out_proj, two.out_proj}}) {
      raw::copy(src->weight, dst->weight);
      raw::copy(src->bias, dst->bias);
    }
  }
  const Tensor x = randn({3, 12, 8}, {.dtype = kFloat64});
  const Tensor g = randn({3, 12, 8}, {.dtype = kFloat64});
  one.forward(x).backward(g);
  two.forward(x).backward(g);
  const Tensor sum_of_uses = for_keys->weight.grad() + for_values->weight.grad();
  std::printf("  max |grad(shared E) - (grad(E for keys) + grad(E for values))| = %.3g\n",
              tutorial::max_abs_diff(shared->weight.grad(), sum_of_uses));
  check(tutorial::max_abs_diff(shared->weight.grad(), sum_of_uses) < 1e-12,
        "6.2 the shared E's gradient is the keys' plus the values' gradient");
  check(tutorial::max_abs_diff(for_keys->weight.grad(), for_values->weight.grad()) > 1e-3,
        "6.2 ... and the two uses' gradients differ (neither alone is the answer)");
}

// Exercise 6.3: a k per layer. Layer l's attention maps are [B, H, n, k_l]; the stack's maps take
// sum(k_l) / (L k0) of what a constant k0 takes.
void k_per_layer_memory() {
  std::printf("Exercise 6.3: what a k per layer saves in attention maps\n");
  const auto ks = nn::k_geometric_decay(kLayers, /*k0=*/32, /*ratio=*/0.5, /*k_min=*/4);
  nn::EncoderConfig config = linformer_config(nn::Sharing::headwise);
  config.linformer.k_per_layer = ks;
  nn::TransformerEncoder encoder(config);
  for (const auto& attention : encoder.attention_layers()) attention->keep_attention(true);
  encoder.forward(randn({2, kSeq, kModel}));
  std::int64_t floats = 0, expected_sum = 0;
  bool shapes = true;
  for (std::size_t l = 0; l < ks.size(); ++l) {
    const Tensor maps = encoder.attention_layers()[l]->last_attention();
    std::printf("  layer %zu: k = %2lld, maps %s\n", l, static_cast<long long>(ks[l]),
                shape_str(maps.shape()).c_str());
    shapes = shapes && maps.shape() == Shape{2, kHeads, kSeq, ks[l]};
    floats += maps.numel();
    expected_sum += ks[l];
  }
  const double ratio =
      static_cast<double>(floats) / static_cast<double>(2 * kHeads * kSeq * 32 * kLayers);
  std::printf("  maps hold %lld floats, %.3f of a constant k = 32 (sum k_l / (L k0) = %.3f)\n",
              static_cast<long long>(floats), ratio,
              static_cast<double>(expected_sum) / static_cast<double>(32 * kLayers));
  check(shapes, "6.3 layer l's maps are [B, H, n, k_l]");
  check(
      std::abs(ratio - static_cast<double>(expected_sum) / (32.0 * kLayers)) < 1e-12 && ratio < 0.5,
      "6.3 k = 32, 16, 8, 4 keeps under half the maps of a constant 32");
}

}  // namespace

int main() {
  manual_seed(106);
  std::printf("Step 6, exercises\n");
  parameters_per_mode();
  shared_gradient();
  k_per_layer_memory();
  return tutorial::finish();
}
