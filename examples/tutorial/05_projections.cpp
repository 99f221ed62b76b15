// Tutorial step 5: Linformer's projections. Why projecting n positions to k rows can work (a
// random Gaussian map keeps lengths within ~sqrt(2/k), whatever n: the Johnson-Lindenstrauss
// lemma, measured), then each projection kind on a small input, and k = n with the identity,
// which is full attention exactly. Writes tutorial_05_jl.png. docs/tutorial/05-projections.md
// walks through it.
#include <map>
#include <numbers>
#include <sstream>

#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// The mean of | |R x|^2 / |x|^2 - 1 | over 400 random x in R^n, R: k x n with N(0, 1/k)
// entries. The lemma: with high probability every one of a fixed set of vectors keeps its
// length within a factor 1 +- eps once k = O(log(#vectors) / eps^2), independent of n.
double length_distortion(std::int64_t n, std::int64_t k) {
  const Tensor r = randn({k, n}, {.dtype = kFloat64}) / std::sqrt(static_cast<double>(k));
  const Tensor x = randn({n, 400}, {.dtype = kFloat64});
  const Tensor projected = matmul(r, x);  // [k, 400]
  const Tensor ratio = sum(projected * projected, {0}) / sum(x * x, {0});
  return mean(abs(ratio - 1.0)).item<double>();
}

// Copies the q/k/v/out weights of one attention module into another.
void copy_weights(const nn::Attention& from_module, nn::Attention& to_module) {
  NoGradGuard no_grad;
  for (auto [src, dst] : {std::pair{from_module.q_proj, to_module.q_proj},
                          std::pair{from_module.k_proj, to_module.k_proj},
                          std::pair{from_module.v_proj, to_module.v_proj},
                          std::pair{from_module.out_proj, to_module.out_proj}}) {
    raw::copy(src->weight, dst->weight);
    raw::copy(src->bias, dst->bias);
  }
}

}  // namespace

int main(int argc, char** argv) {
  manual_seed(5);
  std::printf("Step 5: projections from n rows to k rows\n");

  // --- Johnson-Lindenstrauss, measured: the distortion depends on k, not on n. ---
  const std::vector<std::int64_t> ks = {8, 16, 32, 64, 128, 256};
  const std::vector<std::int64_t> ns = {256, 1024, 4096};
  std::vector<std::vector<double>> distortion(ns.size());
  std::printf("mean |(|Rx|^2 / |x|^2) - 1| for a random Gaussian R (k x n):\n  %8s", "k");
  for (std::int64_t n : ns) std::printf("  n = %-6lld", static_cast<long long>(n));
  std::printf("  2/sqrt(pi k)\n");
  for (std::size_t j = 0; j < ks.size(); ++j) {
    std::printf("  %8lld", static_cast<long long>(ks[j]));
    for (std::size_t i = 0; i < ns.size(); ++i) {
      distortion[i].push_back(length_distortion(ns[i], ks[j]));
      std::printf("  %-10.4f", distortion[i].back());
    }
    // For chi-squared / k, the mean absolute deviation is close to sqrt(2/k) sqrt(2/pi).
    std::printf("  %.4f\n", 2.0 / std::sqrt(std::numbers::pi * static_cast<double>(ks[j])));
  }
  const double shrink = distortion[1][1] / distortion[1][5];  // k = 16 against k = 256
  check(shrink > 2.5 && shrink < 6.0,
        "16x more rows shrink the distortion about 4x (as 1/sqrt(k))");
  bool same_for_every_n = true;
  for (std::size_t j = 0; j < ks.size(); ++j) {
    const double lo = std::min({distortion[0][j], distortion[1][j], distortion[2][j]});
    const double hi = std::max({distortion[0][j], distortion[1][j], distortion[2][j]});
    same_for_every_n = same_for_every_n && hi <= 1.3 * lo;
  }
  check(same_for_every_n,
        "at every k the distortion is the same for n = 256, 1024 and 4096 (within 30%)");

  // --- The projection kinds on x = 1..8 (one head of width 1), k = 4. ---
  const std::int64_t n = 8, k = 4;
  const Tensor x = arange(n, {.dtype = kFloat32}).view({1, 1, n, 1}) + 1.0;  // [B, H, n, d]
  const nn::ProjectionSpec spec{.k = k, .max_seq_len = n, .head_dim = 1};
  std::printf("x = 1 2 3 4 5 6 7 8 projected to k = %lld rows:\n", static_cast<long long>(k));
  std::map<std::string, Tensor> rows;
  for (const std::string kind : {"linear", "mean", "max", "conv"}) {
    rows[kind] = nn::make_projection(kind, spec)->forward(x);  // [1, 1, k, 1]
    std::printf("  %-8s", kind.c_str());
    for (float v : rows[kind].to_vector<float>()) std::printf(" %7.3f", v);
    std::printf("\n");
    check(rows[kind].shape() == Shape{1, 1, k, 1}, kind + ": k rows, whatever n");
  }
  check(tutorial::max_abs_diff(rows["mean"], from<float>({1.5f, 3.5f, 5.5f, 7.5f}, {1, 1, 4, 1})) ==
            0.0,
        "mean: each row is the mean of its window of n/k positions");
  check(tutorial::max_abs_diff(rows["max"], from<float>({2, 4, 6, 8}, {1, 1, 4, 1})) == 0.0,
        "max: each row is the maximum of its window");
  check(tutorial::max_abs_diff(rows["linear"], rows["mean"]) < 1e-6,
        "linear: E starts as mean pooling (the library's recipe), so it starts equal to mean");
  // A shorter sequence uses E's first columns: n = 6 gives k rows as well.
  check(nn::make_projection("linear", spec)->forward(x.narrow(2, 0, 6)).size(2) == k,
        "linear: a sequence of 6 < max_seq_len positions uses E[:, :6], still k rows");

  // --- k = n with the identity: Linformer is full attention, exactly. ---
  const Tensor h = randn({2, n, 8});
  nn::MultiHeadAttention full(8, 2);
  auto identity = nn::make_projection("identity", {.k = n, .max_seq_len = n, .head_dim = 4});
  nn::LinformerAttention linformer(8, 2, identity, identity);
  copy_weights(full, linformer);
  check(tutorial::max_abs_diff(full.forward(h), linformer.forward(h)) == 0.0,
        "k = n with identity projections: Linformer equals full attention bit for bit");

  // --- The figure: distortion against k for three n, with the 1/sqrt(k) law. ---
  const std::string dir = tutorial::figure_dir(argc, argv);
  const std::string csv = dir + "/tutorial_05_jl.csv";
  {
    std::ofstream out(csv);
    out << "k,n256,n1024,n4096,law\n";
    for (std::size_t j = 0; j < ks.size(); ++j) {
      out << ks[j] << "," << distortion[0][j] << "," << distortion[1][j] << "," << distortion[2][j]
          << "," << 2.0 / std::sqrt(std::numbers::pi * static_cast<double>(ks[j])) << "\n";
    }
  }
  // Both axes fit the data: k from 8 to 256, the distortions between their least and largest.
  double lo = INFINITY, hi = 0;
  for (const auto& row : distortion) {
    lo = std::min(lo, *std::min_element(row.begin(), row.end()));
    hi = std::max(hi, *std::max_element(row.begin(), row.end()));
  }
  std::ostringstream gp;
  gp << "set datafile separator ','\nset logscale xy\nset key top right\n"
     << "set title 'Random projection R (k x n): length distortion depends on k, not n'\n"
     << "set xlabel 'k (rows after projection)'\nset ylabel 'mean | |Rx|^2/|x|^2 - 1 |'\n"
     << "set xrange [" << ks.front() / 1.25 << ":" << ks.back() * 1.25 << "]\n"
     << "set xtics (8, 16, 32, 64, 128, 256)\n"
     << "set yrange [" << lo / 1.2 << ":" << hi * 1.2 << "]\n"
     << "set ytics (0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.4)\n"
     << "plot '" << csv
     << "' every ::1 using 1:2 with linespoints lw 2 pt 7 lc 1 title 'n = 256', \\\n"
     << "  '' every ::1 using 1:3 with linespoints lw 2 pt 5 lc 2 title 'n = 1024', \\\n"
     << "  '' every ::1 using 1:4 with linespoints lw 2 pt 9 lc 3 title 'n = 4096', \\\n"
     << "  '' every ::1 using 1:5 with lines dt 2 lw 2 lc rgb 'gray30' title '2 / sqrt(pi k)'\n";
  tutorial::plot(dir + "/tutorial_05_jl.png", gp.str());
  return tutorial::finish();
}
