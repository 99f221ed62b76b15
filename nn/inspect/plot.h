// Figures of the inspection tools, drawn by gnuplot (nn/train/plot.h): attention heat maps and
// the spectrum curves of the Linformer paper's Figure 1.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/inspect/spectrum.h"

namespace tinyformer::nn {

// One layer's attention probabilities as heat maps, one panel per head in a grid (four per row):
// probs [H, n, m] (one sequence of encoder_attention's [B, H, n, m]), queries down, keys (or
// Linformer's k compressed rows) across. Every panel is coloured on one scale, from 0 to the
// largest weight of any head, so that a colour means the same weight in every panel. `key_label`
// names the horizontal axis ("key position", "compressed row"). `query_tokens` (n labels) and
// `key_tokens` (m labels), when given, label the rows and the columns with the tokens instead of
// their positions, in larger panels two to a row: every one when there are at most 40, else
// every s-th with s = ceil(count / 40), each prefixed with its position (a space is drawn as an
// open box, a newline and a tab as \n and \t, other control characters as '?'). A label list of
// another length than its axis is an Error.
void plot_attention(const std::string& png, const Tensor& probs, const std::string& title,
                    const std::string& key_label = "key position",
                    const std::vector<std::string>& query_tokens = {},
                    const std::vector<std::string>& key_tokens = {});

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
