// Attention spectra through LAPACK's dgesdd (from OpenBLAS).
#include "nn/inspect/spectrum.h"

#include <algorithm>

#include "autograd/grad_mode.h"

extern "C" void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda,
                        double* s, double* u, const int* ldu, double* vt, const int* ldvt,
                        double* work, const int* lwork, int* iwork, int* info);

namespace tinyformer::nn {

namespace {
// Singular values of the row-major [rows, cols] matrix `a` (destroyed), descending.
std::vector<double> singular_values(std::vector<double>& a, int rows, int cols) {
  // LAPACK is column-major: the row-major [rows, cols] buffer is the column-major A^T, which has
  // the same singular values.
  const int m = cols, n = rows, lda = cols;
  std::vector<double> s(static_cast<std::size_t>(std::min(m, n)));
  std::vector<int> iwork(static_cast<std::size_t>(8 * std::min(m, n)));
  double query = 0;
  int lwork = -1, info = 0, one = 1;
  double dummy = 0;
  dgesdd_("N", &m, &n, a.data(), &lda, s.data(), &dummy, &one, &dummy, &one, &query, &lwork,
          iwork.data(), &info);
  lwork = static_cast<int>(query);
  std::vector<double> work(static_cast<std::size_t>(std::max(lwork, 1)));
  dgesdd_("N", &m, &n, a.data(), &lda, s.data(), &dummy, &one, &dummy, &one, work.data(), &lwork,
          iwork.data(), &info);
  TF_CHECK(info == 0, "attention_spectrum: the SVD did not converge (LAPACK info ", info, ")");
  return s;
}
}  // namespace

std::vector<HeadSpectrum> attention_spectrum(const Tensor& probs) {
  TF_CHECK(probs.defined() && probs.dim() == 4 && probs.numel() > 0,
           "attention_spectrum: expected probabilities [B, H, n, m], got ",
           probs.defined() ? shape_str(probs.shape()) : "an undefined Tensor");
  const std::int64_t b = probs.size(0), h = probs.size(1), n = probs.size(2), m = probs.size(3);
  const std::vector<double> values = probs.to_vector<double>();
  const std::size_t r = static_cast<std::size_t>(std::min(n, m));
  std::vector<HeadSpectrum> out(static_cast<std::size_t>(h));
  for (auto& head : out) {
    head.singular_values.assign(r, 0.0);
    head.cumulative.assign(r, 0.0);
  }
  for (std::int64_t bi = 0; bi < b; ++bi) {
    for (std::int64_t hi = 0; hi < h; ++hi) {
      const auto start = values.begin() + (bi * h + hi) * n * m;
      std::vector<double> a(start, start + n * m);
      const std::vector<double> s = singular_values(a, static_cast<int>(n), static_cast<int>(m));
      double total = 0;
      for (double v : s) total += v;
      double running = 0;
      HeadSpectrum& head = out[static_cast<std::size_t>(hi)];
      for (std::size_t i = 0; i < r; ++i) {
        running += s[i];
        head.singular_values[i] += s[i] / static_cast<double>(b);
        head.cumulative[i] += (total > 0 ? running / total : 0.0) / static_cast<double>(b);
      }
    }
  }
  return out;
}

std::vector<std::vector<HeadSpectrum>> encoder_spectrum(TransformerEncoder& encoder,
                                                        const Tensor& x,
                                                        const Tensor& key_padding_mask) {
  const auto layers = encoder.attention_layers();
  for (const auto& a : layers) a->keep_attention(true);
  {
    NoGradGuard no_grad;
    encoder.forward(x, key_padding_mask);
  }
  std::vector<std::vector<HeadSpectrum>> out;
  for (const auto& a : layers) {
    out.push_back(attention_spectrum(a->last_attention()));
    a->keep_attention(false);
  }
  return out;
}

}  // namespace tinyformer::nn
