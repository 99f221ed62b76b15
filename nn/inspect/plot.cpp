// plot_attention and plot_spectra: gnuplot scripts with the data inline, as datablocks.
#include "nn/inspect/plot.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "nn/train/plot.h"

namespace tinyformer::nn {

namespace {

constexpr int kHeadsPerRow = 4;
constexpr int kPanelPixels = 330;

// White through orange to dark red: zero weight stays white, so the structure of a map reads
// on the page.
constexpr const char* kPalette =
    "set palette defined (0 '#ffffff', 0.15 '#fee8c8', 0.4 '#fdbb84', 0.7 '#e34a33', "
    "1 '#7f0000')\n";

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.5g", v);
  return text;
}

// Panels with token labels are larger, two to a row, to leave room for the labels.
constexpr int kLabelledHeadsPerRow = 2;
constexpr int kLabelledPanelPixels = 560;
constexpr std::size_t kMostLabels = 40;

// A token as a tic label: a space as an open box (U+2423), a newline and a tab as \n and \t, any
// other control character as '?', so that every label is visible and the script stays one line per
// command.
std::string visible_token(const std::string& token) {
  std::string out;
  for (const char c : token) {
    if (c == ' ') {
      out += "\u2423";  // an open box, the usual sign for a space
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if ((c >= 0 && c < 32) || c == 127) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out;
}

// gnuplot's explicit tic list for an axis of token labels: ('0 t' 0, '3 x' 3, ...), every
// s-th position with s = ceil(count / kMostLabels).
std::string tics(const std::vector<std::string>& tokens) {
  const std::size_t step = (tokens.size() + kMostLabels - 1) / kMostLabels;
  std::string list = "(";
  for (std::size_t i = 0; i < tokens.size(); i += step) {
    list += (i ? ", " : "") + gnuplot_quote(std::to_string(i) + " " + visible_token(tokens[i])) +
            " " + std::to_string(i);
  }
  return list + ")";
}

}  // namespace

void plot_attention(const std::string& png, const Tensor& probs, const std::string& title,
                    const std::string& key_label, const std::vector<std::string>& query_tokens,
                    const std::vector<std::string>& key_tokens) {
  TF_CHECK(probs.defined() && probs.dim() == 3 && probs.numel() > 0,
           "plot_attention: expected probabilities [H, n, m] of one sequence, got ",
           probs.defined() ? shape_str(probs.shape()) : "an undefined Tensor");
  const std::int64_t heads = probs.size(0), n = probs.size(1), m = probs.size(2);
  TF_CHECK(query_tokens.empty() || static_cast<std::int64_t>(query_tokens.size()) == n,
           "plot_attention: expected ", n, " query labels (one per row), got ",
           query_tokens.size());
  TF_CHECK(key_tokens.empty() || static_cast<std::int64_t>(key_tokens.size()) == m,
           "plot_attention: expected ", m, " key labels (one per column), got ", key_tokens.size());
  const std::vector<double> values = probs.contiguous().to_vector<double>();
  std::ostringstream gp;
  for (std::int64_t h = 0; h < heads; ++h) {
    gp << "$head" << h << " << EOD\n";
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < m; ++j) {
        gp << (j ? " " : "") << number(values[static_cast<std::size_t>((h * n + i) * m + j)]);
      }
      gp << "\n";
    }
    gp << "EOD\n";
  }
  const bool labelled = !query_tokens.empty() || !key_tokens.empty();
  const int per_row = labelled ? kLabelledHeadsPerRow : kHeadsPerRow;
  const int panel = labelled ? kLabelledPanelPixels : kPanelPixels;
  const int columns = static_cast<int>(std::min<std::int64_t>(heads, per_row));
  const int rows = static_cast<int>((heads + per_row - 1) / per_row);
  // One scale for every panel: 0 to the largest weight of any head.
  const double top = std::max(*std::max_element(values.begin(), values.end()), 1e-12);
  gp << kPalette << "unset key\nset tics out nomirror font ',8'\n"
     << "set cbrange [0:" << number(top) << "]\nset cbtics font ',8'\n"
     << "set xlabel " << gnuplot_quote(key_label) << "\nset ylabel 'query position'\n"
     << "set xrange [-0.5:" << m - 0.5 << "]\nset yrange [" << n - 0.5 << ":-0.5]\n";
  if (!key_tokens.empty()) gp << "set xtics rotate by 90 right " << tics(key_tokens) << "\n";
  if (!query_tokens.empty()) gp << "set ytics " << tics(query_tokens) << "\n";
  gp << "set multiplot layout " << rows << "," << columns << " title "
     << gnuplot_quote(title + " (one colour scale for all heads)") << "\n";
  for (std::int64_t h = 0; h < heads; ++h) {
    gp << "set title 'head " << h << "'\nplot $head" << h << " matrix with image\n";
  }
  gp << "unset multiplot\n";
  gnuplot_png(png, columns * panel, rows * panel + 30, gp.str(), "plot_attention");
}

void plot_spectra(const std::string& png, const std::vector<NamedSpectra>& models,
                  const std::string& title, std::size_t mark) {
  TF_CHECK(!models.empty() && !models[0].layers.empty(),
           "plot_spectra: expected at least one model with at least one layer");
  const std::size_t layers = models[0].layers.size();
  for (const NamedSpectra& model : models) {
    TF_CHECK(model.layers.size() == layers, "plot_spectra: '", model.name, "' has ",
             model.layers.size(), " layers, '", models[0].name, "' has ", layers);
  }
  std::ostringstream gp;
  std::size_t values = 1;
  for (std::size_t mi = 0; mi < models.size(); ++mi) {
    for (std::size_t l = 0; l < layers; ++l) {
      for (std::size_t h = 0; h < models[mi].layers[l].size(); ++h) {
        const std::vector<double>& c = models[mi].layers[l][h].cumulative;
        values = std::max(values, c.size());
        gp << "$m" << mi << "l" << l << "h" << h << " << EOD\n";
        for (std::size_t i = 0; i < c.size(); ++i) gp << i + 1 << " " << number(c[i]) << "\n";
        gp << "EOD\n";
      }
    }
  }
  gp << "set grid\nset key bottom right font ',8'\n"
     << "set xlabel 'singular value index (largest first)'\n"
     << "set ylabel 'normalised cumulative sum'\n"
     << "set xrange [1:" << values << "]\nset yrange [0:1.02]\n";
  if (mark > 0 && mark < values) {
    gp << "set arrow from " << mark << ", graph 0 to " << mark
       << ", graph 1 nohead dt 3 lw 1.5 lc rgb 'gray40'\n"
       << "set label 'k = " << mark << "' at " << mark << ", graph 0.05 offset 0.5,0\n";
  }
  gp << "set multiplot layout 1," << layers << " title " << gnuplot_quote(title) << "\n";
  for (std::size_t l = 0; l < layers; ++l) {
    gp << "set title 'layer " << l << "'\nplot ";
    bool first = true;
    for (std::size_t mi = 0; mi < models.size(); ++mi) {
      for (std::size_t h = 0; h < models[mi].layers[l].size(); ++h) {
        gp << (first ? "" : ", \\\n     ") << "$m" << mi << "l" << l << "h" << h
           << " using 1:2 with lines lw 1.5 lt " << h % 8 + 1 << " dt " << mi % 5 + 1 << " title "
           << gnuplot_quote(models[mi].name + ", head " + std::to_string(h));
        first = false;
      }
    }
    gp << "\n";
  }
  gp << "unset multiplot\n";
  gnuplot_png(png, static_cast<int>(layers) * 520, 480, gp.str(), "plot_spectra");
}

}  // namespace tinyformer::nn
