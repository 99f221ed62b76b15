// Solutions to the exercises of tutorial step 4 (docs/tutorial/04-low-rank.md): the rank of P in
// three cases built by hand, two facts every attention spectrum obeys, and how the scale of the
// scores moves the spectrum. One function per exercise; each checks its result.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// The singular values of one [n, m] matrix, largest first (nn::attention_spectrum on a batch of
// one sequence and one head).
std::vector<double> singular_values(const Tensor& matrix) {
  return nn::attention_spectrum(matrix.view({1, 1, matrix.size(0), matrix.size(1)}))[0]
      .singular_values;
}

// The numerical rank: the number of singular values above 1e-9 times the largest.
std::int64_t rank(const std::vector<double>& s) {
  return std::count_if(s.begin(), s.end(), [&](double v) { return v > 1e-9 * s[0]; });
}

// Exercise 4.1: the rank of P. Uniform attention has identical rows (rank 1); queries of two kinds
// give rows of two kinds (rank 2, whatever n); a P that attends to the key at its own position is
// the identity (rank n).
void rank_by_hand() {
  std::printf("Exercise 4.1: the rank of P\n");
  const std::int64_t n = 32;
  const Tensor uniform = softmax(zeros({n, n}, {.dtype = kFloat64}), -1);
  // Two kinds of queries (even and odd positions), the same keys: two distinct rows.
  const Tensor keys = randn({n, 4}, {.dtype = kFloat64});
  const Tensor kinds = randn({2, 4}, {.dtype = kFloat64});
  const Tensor queries = cat(std::vector<Tensor>(n / 2, kinds), 0);  // rows 0 1 0 1 ...
  const Tensor two_kinds = softmax(matmul(queries, keys.transpose(0, 1)), -1);
  // Scores 50 on the diagonal: each query looks at its own position (e^-50 elsewhere).
  std::vector<double> diagonal(static_cast<std::size_t>(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) diagonal[static_cast<std::size_t>(i * n + i)] = 50.0;
  const Tensor own_position = softmax(from<double>(diagonal, {n, n}), -1);
  const auto r1 = rank(singular_values(uniform)), r2 = rank(singular_values(two_kinds)),
             rn = rank(singular_values(own_position));
  std::printf("  rank: uniform %lld, two kinds of queries %lld, own position %lld (n = %lld)\n",
              static_cast<long long>(r1), static_cast<long long>(r2), static_cast<long long>(rn),
              static_cast<long long>(n));
  check(r1 == 1, "4.1 uniform attention has rank 1");
  check(r2 == 2, "4.1 queries of two kinds give rank 2, whatever n");
  check(rn == n, "4.1 attending to the own position is the identity: rank n");
}

// Exercise 4.2: two facts of every P. Its rows sum to 1, so P 1 = 1 and the largest singular value
// is at least |P 1| / |1| = 1; and the squares of the singular values sum to |P|_F^2.
void spectrum_facts() {
  std::printf("Exercise 4.2: s_1 >= 1 and sum s_i^2 = |P|_F^2\n");
  bool at_least_one = true, frobenius = true;
  for (double scale : {0.1, 1.0, 10.0}) {
    const Tensor p = softmax(randn({24, 24}, {.dtype = kFloat64}) * scale, -1);
    const auto s = singular_values(p);
    double squares = 0;
    for (double v : s) squares += v * v;
    const double norm2 = sum(p * p).item<double>();
    std::printf("  scores x %-4g s_1 = %.4f, sum s_i^2 = %.6f, |P|_F^2 = %.6f\n", scale, s[0],
                squares, norm2);
    at_least_one = at_least_one && s[0] >= 1 - 1e-12;
    frobenius = frobenius && std::abs(squares - norm2) < 1e-10;
  }
  check(at_least_one, "4.2 the largest singular value of every P is at least 1");
  check(frobenius, "4.2 the squared singular values sum to |P|_F^2");
}

// Exercise 4.3: the scale of the scores. Small scores give near-uniform rows (near rank 1); large
// ones give near one-hot rows at scattered keys (many directions). The share of the spectrum in
// the first n/8 values falls as the scale grows.
void scale_and_rank() {
  std::printf("Exercise 4.3: how the scale of the scores moves the spectrum\n");
  const std::int64_t n = 64;
  const Tensor scores = randn({8, 1, n, n});
  std::vector<double> shares;
  for (double scale : {0.01, 0.1, 1.0, 16.0}) {
    const auto spectrum = nn::attention_spectrum(softmax(scores * scale, -1))[0];
    shares.push_back(nn::mass_in_first(spectrum, n / 8));
    std::printf("  scores x %-4g share of the first %lld singular values: %.3f\n", scale,
                static_cast<long long>(n / 8), shares.back());
  }
  check(std::is_sorted(shares.rbegin(), shares.rend()),
        "4.3 the larger the scores, the less the first n/8 values carry");
  check(shares.front() > 0.9 && shares.back() < 0.35,
        "4.3 scores x 0.01: over 90% (near rank 1); x 16: under 35%");
}

}  // namespace

int main() {
  manual_seed(104);
  std::printf("Step 4, exercises\n");
  rank_by_hand();
  spectrum_facts();
  scale_and_rank();
  return tutorial::finish();
}
