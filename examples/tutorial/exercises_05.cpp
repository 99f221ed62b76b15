// Solutions to the exercises of tutorial step 5 (docs/tutorial/05-projections.md): a random sign
// matrix keeps lengths as well as a Gaussian one, mean pooling written as a matrix E, and the
// projection kinds compared on smooth and on random sequences. One function per exercise; each
// checks its result.
#include <map>

#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// The mean of | |R x|^2 / |x|^2 - 1 | over 400 random x in R^n (step 5's measurement).
double distortion(const Tensor& r) {
  const Tensor x = randn({r.size(1), 400}, {.dtype = kFloat64});
  const Tensor projected = matmul(r, x);
  return mean(abs(sum(projected * projected, {0}) / sum(x * x, {0}) - 1.0)).item<double>();
}

// Exercise 5.1: Johnson-Lindenstrauss does not need Gaussians. R with entries +1/sqrt(k) or
// -1/sqrt(k), each with probability 1/2 (Achlioptas' database-friendly projection), distorts
// lengths as little.
void random_signs() {
  std::printf("Exercise 5.1: a random sign matrix against a Gaussian one\n");
  const std::int64_t n = 1024;
  bool alike = true;
  for (std::int64_t k : {16, 64, 256}) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(k));
    const Tensor gaussian = randn({k, n}, {.dtype = kFloat64}) * scale;
    const Tensor normal = randn({k, n}, {.dtype = kFloat64});
    const Tensor signs =
        where(gt(normal, zeros_like(normal)), ones_like(normal), -ones_like(normal));
    const double g = distortion(gaussian), s = distortion(signs * scale);
    std::printf("  k = %3lld: Gaussian %.4f, signs %.4f\n", static_cast<long long>(k), g, s);
    alike = alike && s > 0.75 * g && s < 1.25 * g;
  }
  check(alike, "5.1 random signs distort lengths like a Gaussian R (within 25%), at every k");
}

// Exercise 5.2: mean pooling is a matrix. Row r of E averages window r (nn::pool_window), so E x
// is the mean projection, and the linear kind's E starts as exactly this matrix.
void pooling_as_a_matrix() {
  std::printf("Exercise 5.2: mean pooling as a k x n matrix\n");
  const std::int64_t n = 10, k = 4;
  std::vector<float> e(static_cast<std::size_t>(k * n), 0.0f);
  for (std::int64_t r = 0; r < k; ++r) {
    const auto [start, end] = nn::pool_window(r, n, k);
    for (std::int64_t j = start; j < end; ++j)
      e[static_cast<std::size_t>(r * n + j)] = 1.0f / static_cast<float>(end - start);
  }
  const Tensor pooling = from<float>(e, {k, n});
  tutorial::print_matrix("E for n = 10, k = 4 (rows 0-2, 2-4, 5-7, 7-9)", pooling);
  const nn::ProjectionSpec spec{.k = k, .max_seq_len = n, .head_dim = 3};
  const Tensor x = randn({2, 1, n, 3});
  check(tutorial::max_abs_diff(matmul(pooling, x), nn::make_projection("mean", spec)->forward(x)) <
            1e-6,
        "5.2 E x equals the mean projection");
  const nn::LinearProjection linear(spec);
  check(tutorial::max_abs_diff(linear.weight.select(0, 0), pooling) < 1e-7,
        "5.2 the linear kind's E starts as the same matrix");
}

// [B, n, d] sequences that vary slowly along the positions: two sinusoids per feature, with
// random amplitudes and phases.
Tensor smooth_sequences(std::int64_t b, std::int64_t n, std::int64_t d) {
  const auto amplitude = randn({b, 2, d}).to_vector<float>();
  const auto phase = rand({b, 2, d}).to_vector<float>();
  std::vector<float> x(static_cast<std::size_t>(b * n * d));
  for (std::int64_t s = 0; s < b; ++s)
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t c = 0; c < d; ++c)
        for (std::int64_t f = 0; f < 2; ++f) {
          const auto i = static_cast<std::size_t>((s * 2 + f) * d + c);
          x[static_cast<std::size_t>((s * n + t) * d + c)] +=
              amplitude[i] *
              std::sin(6.2831853f * (static_cast<float>((f + 1) * t) / n + phase[i]));
        }
  return from<float>(x, {b, n, d});
}

// Exercise 5.3: the kinds compared. A Linformer layer with the weights of a full-attention layer,
// k = 8 of n = 64: how far is its output from full attention's, for a slowly varying input and
// for an input of independent random positions?
void kinds_compared() {
  std::printf("Exercise 5.3: projection kinds on smooth and on random sequences\n");
  const std::int64_t n = 64, k = 8, d_model = 16, heads = 2;
  nn::MultiHeadAttention full(d_model, heads);
  const Tensor smooth = smooth_sequences(4, n, d_model), random = randn({4, n, d_model});
  const Tensor full_smooth = full.forward(smooth), full_random = full.forward(random);
  auto relative_error = [](const Tensor& a, const Tensor& b) {
    return std::sqrt(sum((a - b) * (a - b)).item<double>() / sum(b * b).item<double>());
  };
  std::map<std::string, std::pair<double, double>> error;  // kind -> (smooth, random)
  std::printf("  %-16s %8s %8s\n", "kind", "smooth", "random");
  for (const std::string kind : {"mean", "max", "linear (random)"}) {
    nn::ProjectionSpec spec{.k = k, .max_seq_len = n, .head_dim = d_model / heads};
    if (kind == "linear (random)") spec.init = nn::ProjectionInit::normal;
    auto e = nn::make_projection(kind == "linear (random)" ? "linear" : kind, spec);
    nn::LinformerAttention linformer(d_model, heads, e, e);
    {
      NoGradGuard no_grad;
      for (auto [src, dst] :
           {std::pair{full.q_proj, linformer.q_proj}, std::pair{full.k_proj, linformer.k_proj},
            std::pair{full.v_proj, linformer.v_proj},
            std::pair{full.out_proj, linformer.out_proj}}) {
        raw::copy(src->weight, dst->weight);
        raw::copy(src->bias, dst->bias);
      }
    }
    error[kind] = {relative_error(linformer.forward(smooth), full_smooth),
                   relative_error(linformer.forward(random), full_random)};
    std::printf("  %-16s %8.3f %8.3f\n", kind.c_str(), error[kind].first, error[kind].second);
  }
  check(error["mean"].first < 0.5 * error["linear (random)"].first,
        "5.3 on smooth sequences mean pooling is far closer to full attention than a random E");
  check(error["mean"].first < 0.5 * error["mean"].second,
        "5.3 mean pooling works because neighbours are alike: on random sequences its error is "
        "over twice as large");
}

}  // namespace

int main() {
  manual_seed(105);
  std::printf("Step 5, exercises\n");
  random_signs();
  pooling_as_a_matrix();
  kinds_compared();
  return tutorial::finish();
}
