// Attention spectra through LAPACK's dgesdd (from OpenBLAS).
#include "nn/inspect/spectrum.h"

#include <algorithm>

#include "nn/inspect/attention_maps.h"

extern "C" void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda,
                        double* s, double* u, const int* ldu, double* vt, const int* ldvt,
                        double* work, const int* lwork, int* iwork, int* info);

namespace tinyformer::nn {

namespace {
// Singular values of the row-major [rows, cols] matrix `a` (destroyed), descending, into `s`
// (min(rows, cols) of them); returns LAPACK's info, 0 on success. It throws nothing, so that it
// can run inside an OpenMP loop.
int singular_values(double* a, int rows, int cols, double* s) {
  // LAPACK is column-major: the row-major [rows, cols] buffer is the column-major A^T, which has
  // the same singular values.
  const int m = cols, n = rows, lda = cols;
  std::vector<int> iwork(static_cast<std::size_t>(8 * std::min(m, n)));
  double query = 0;
  int lwork = -1, info = 0, one = 1;
  double dummy = 0;
  dgesdd_("N", &m, &n, a, &lda, s, &dummy, &one, &dummy, &one, &query, &lwork, iwork.data(), &info);
  if (info != 0) return info;
  lwork = static_cast<int>(query);
  std::vector<double> work(static_cast<std::size_t>(std::max(lwork, 1)));
  dgesdd_("N", &m, &n, a, &lda, s, &dummy, &one, &dummy, &one, work.data(), &lwork, iwork.data(),
          &info);
  return info;
}
}  // namespace

std::vector<HeadSpectrum> attention_spectrum(const Tensor& probs, const Tensor& key_padding_mask) {
  TF_CHECK(probs.defined() && probs.dim() == 4 && probs.numel() > 0,
           "attention_spectrum: expected probabilities [B, H, n, m], got ",
           probs.defined() ? shape_str(probs.shape()) : "an undefined Tensor");
  const std::int64_t b = probs.size(0), h = probs.size(1), n = probs.size(2), m = probs.size(3);
  std::vector<double> values = probs.to_vector<double>();
  if (key_padding_mask.defined()) {
    TF_CHECK(
        key_padding_mask.dtype() == DType::boolean && key_padding_mask.shape() == Shape({b, n}),
        "attention_spectrum: expected key_padding_mask of dtype bool and shape [", b, ", ", n,
        "] (true = padding), got ", key_padding_mask.dtype(), " ",
        shape_str(key_padding_mask.shape()));
    const std::vector<std::int64_t> padded =
        key_padding_mask.to(DType::int64).to_vector<std::int64_t>();
    for (std::int64_t bi = 0; bi < b; ++bi) {
      for (std::int64_t row = 0; row < n; ++row) {
        if (padded[static_cast<std::size_t>(bi * n + row)] == 0) continue;
        for (std::int64_t hi = 0; hi < h; ++hi) {
          const auto first = values.begin() + ((bi * h + hi) * n + row) * m;
          std::fill(first, first + m, 0.0);
        }
      }
    }
  }
  const std::size_t r = static_cast<std::size_t>(std::min(n, m));
  // One SVD per sequence and head, B * H of them, each in its own thread: inside the parallel
  // loop OpenBLAS (its OpenMP build) runs each one on the calling thread. Letting every SVD
  // spread its many small products over the team instead costs a synchronisation each, and
  // far more than the SVD itself when other programs share the cores.
  const std::int64_t count = b * h;
  std::vector<double> sigma(static_cast<std::size_t>(count) * r);
  std::vector<int> infos(static_cast<std::size_t>(count), 0);
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t i = 0; i < count; ++i) {
    infos[static_cast<std::size_t>(i)] =
        singular_values(values.data() + i * n * m, static_cast<int>(n), static_cast<int>(m),
                        sigma.data() + static_cast<std::size_t>(i) * r);
  }
  for (int info : infos) {
    TF_CHECK(info == 0, "attention_spectrum: the SVD did not converge (LAPACK info ", info, ")");
  }
  // The mean over the batch, summed in a fixed order: the result does not depend on the threads.
  std::vector<HeadSpectrum> out(static_cast<std::size_t>(h));
  for (auto& head : out) {
    head.singular_values.assign(r, 0.0);
    head.cumulative.assign(r, 0.0);
  }
  for (std::int64_t bi = 0; bi < b; ++bi) {
    for (std::int64_t hi = 0; hi < h; ++hi) {
      const double* sv = sigma.data() + static_cast<std::size_t>(bi * h + hi) * r;
      double total = 0;
      for (std::size_t i = 0; i < r; ++i) total += sv[i];
      double running = 0;
      HeadSpectrum& head = out[static_cast<std::size_t>(hi)];
      for (std::size_t i = 0; i < r; ++i) {
        running += sv[i];
        head.singular_values[i] += sv[i] / static_cast<double>(b);
        head.cumulative[i] += (total > 0 ? running / total : 0.0) / static_cast<double>(b);
      }
    }
  }
  return out;
}

namespace {
std::vector<std::vector<HeadSpectrum>> spectra(const std::vector<Tensor>& maps,
                                               const Tensor& key_padding_mask) {
  std::vector<std::vector<HeadSpectrum>> out;
  for (const Tensor& probs : maps) out.push_back(attention_spectrum(probs, key_padding_mask));
  return out;
}
}  // namespace

std::vector<std::vector<HeadSpectrum>> encoder_spectrum(TransformerEncoder& encoder,
                                                        const Tensor& x,
                                                        const Tensor& key_padding_mask) {
  return spectra(encoder_attention(encoder, x, key_padding_mask), key_padding_mask);
}

std::vector<std::vector<HeadSpectrum>> encoder_spectrum(TokenEncoder& model, const Tensor& tokens,
                                                        const Tensor& key_padding_mask) {
  return spectra(attention_maps(model, tokens, key_padding_mask), key_padding_mask);
}

std::vector<std::vector<HeadSpectrum>> encoder_spectrum(MaskedLM& model, const Tensor& tokens,
                                                        const Tensor& key_padding_mask) {
  return spectra(attention_maps(model, tokens, key_padding_mask), key_padding_mask);
}

std::vector<std::vector<HeadSpectrum>> encoder_spectrum(Module& model, const Tensor& tokens,
                                                        const Tensor& key_padding_mask) {
  return spectra(attention_maps(model, tokens, key_padding_mask), key_padding_mask);
}

double mass_in_first(const HeadSpectrum& spectrum, std::size_t count) {
  TF_CHECK(count >= 1, "mass_in_first: expected a count of at least 1, got ", count);
  if (spectrum.cumulative.empty()) return 0.0;
  return spectrum.cumulative[std::min(count, spectrum.cumulative.size()) - 1];
}

}  // namespace tinyformer::nn
