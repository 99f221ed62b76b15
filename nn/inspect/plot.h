// Figures of the inspection tools, drawn by gnuplot (nn/train/plot.h): attention heat maps and
// the spectrum curves of the Linformer paper's Figure 1.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/inspect/spectrum.h"

namespace tinyformer::nn {

// One layer's attention probabilities as heat maps, one panel per head in a grid (four per
// row): probs [H, n, m] (one sequence of encoder_attention's [B, H, n, m]), queries down,
// keys (or Linformer's k compressed rows) across, each panel coloured from 0 to its own
// largest weight. `key_label` names the horizontal axis ("key position", "compressed row").
void plot_attention(const std::string& png, const Tensor& probs, const std::string& title,
                    const std::string& key_label = "key position");

// Spectra to compare (e.g. a trained model and the same model untrained): one name each.
struct NamedSpectra {
  std::string name;
  std::vector<std::vector<HeadSpectrum>> layers;  // [layer][head], as encoder_spectrum returns
};

// The normalised cumulative singular values against their index, one panel per layer, one
// curve per head and model: heads by colour, models by dash pattern (the first solid). A
// `mark` between 1 and the number of values (exclusive: every curve ends at 1) draws a vertical
// line at that index, a candidate k. Every model must have the same layers; an Error otherwise.
void plot_spectra(const std::string& png, const std::vector<NamedSpectra>& models,
                  const std::string& title, std::size_t mark = 0);

}  // namespace tinyformer::nn
