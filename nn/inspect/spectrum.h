// Inspection for teaching: the spectrum of attention probabilities (the Linformer paper's
// Figure 1). For each layer and head, the singular values of P (n x n, or n x k for Linformer),
// sorted, and their normalised cumulative sum, averaged over the batch.
#pragma once

#include <vector>

#include "nn/encoder.h"

namespace tinyformer::nn {

struct HeadSpectrum {
  std::vector<double> singular_values;  // descending, averaged over the batch
  std::vector<double> cumulative;       // cumsum(singular_values) / sum, averaged
};

// probs: [B, H, n, m] attention probabilities -> one HeadSpectrum per head.
std::vector<HeadSpectrum> attention_spectrum(const Tensor& probs);

// Runs `encoder` on x ([B, n, d_model], no graph) with every attention layer keeping its
// probabilities, and returns [layer][head] spectra.
std::vector<std::vector<HeadSpectrum>> encoder_spectrum(TransformerEncoder& encoder,
                                                        const Tensor& x,
                                                        const Tensor& key_padding_mask = {});

}  // namespace tinyformer::nn
