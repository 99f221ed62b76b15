// Inspection for teaching: the spectrum of attention probabilities (the Linformer paper's
// Figure 1). For each layer and head, the singular values of P (n x n, or n x k for Linformer),
// sorted, and their normalised cumulative sum, averaged over the batch.
#pragma once

#include <vector>

#include "nn/encoder.h"
#include "nn/models.h"

namespace tinyformer::nn {

struct HeadSpectrum {
  std::vector<double> singular_values;  // descending, averaged over the batch
  std::vector<double> cumulative;       // cumsum(singular_values) / sum, averaged
};

// probs: [B, H, n, m] attention probabilities -> one HeadSpectrum per head, each with min(n, m)
// values. With key_padding_mask ([B, n] bool, true at padding), a sequence's padded query rows
// are left out (zeroed: a zero row adds only a zero singular value), so each sequence's spectrum
// is that of its real rows; padded keys already have weight 0. A sequence with n' real tokens
// then has at most n' nonzero values, and its cumulative sum reaches 1 by index n'.
std::vector<HeadSpectrum> attention_spectrum(const Tensor& probs,
                                             const Tensor& key_padding_mask = {});

// Runs `encoder` on x ([B, n, d_model], no graph) with every attention layer keeping its
// probabilities (encoder_attention), and returns [layer][head] spectra.
std::vector<std::vector<HeadSpectrum>> encoder_spectrum(TransformerEncoder& encoder,
                                                        const Tensor& x,
                                                        const Tensor& key_padding_mask = {});

// The same from tokens ([B, n] int64) through a model (attention_maps: evaluation mode, the
// model's mode restored after).
std::vector<std::vector<HeadSpectrum>> encoder_spectrum(TokenEncoder& model, const Tensor& tokens,
                                                        const Tensor& key_padding_mask = {});
std::vector<std::vector<HeadSpectrum>> encoder_spectrum(MaskedLM& model, const Tensor& tokens,
                                                        const Tensor& key_padding_mask = {});
// Any model class attention_maps takes, by its dynamic type.
std::vector<std::vector<HeadSpectrum>> encoder_spectrum(Module& model, const Tensor& tokens,
                                                        const Tensor& key_padding_mask = {});

// The share of the singular-value mass in the first `count` values: cumulative[count - 1]
// (1 when count is at least the number of values). The paper's heat-map variant of Figure 1 is
// this share per layer and head. An Error for count < 1.
double mass_in_first(const HeadSpectrum& spectrum, std::size_t count);

}  // namespace tinyformer::nn
