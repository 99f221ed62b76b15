// Training curves: CSV logs (nn::CsvLogger's, e.g. TrainingRun's) drawn as one PNG by gnuplot.
#pragma once

#include <string>
#include <vector>

namespace tinyformer::nn {

// Renders the CSV logs as one PNG: the "loss" column against "step" on the left,
// `right_column` (e.g. "val_ppl") on the right, one curve per log, titled run_name(log). Written
// by gnuplot_png, atomically. Throws an Error when gnuplot is missing or fails, a log lacks a
// column, or `png` is one of the logs.
void plot_logs(const std::string& png, const std::vector<std::string>& csvs,
               const std::string& right_column, const std::string& right_label);

// The file's name without directories and extension: "runs/full.csv" -> "full".
std::string run_name(const std::string& path);

// The plotting machinery the figures share (plot_logs, nn/inspect/plot.h): runs gnuplot on
// `commands` with a pngcairo terminal of `width` x `height` pixels (text rendered plain, no
// enhanced mode) and writes `png` through nn::AtomicFile (nn/io/atomic_file.h: only a regular
// file or a missing path is replaced, its mode kept). Throws an Error starting with `op` when
// gnuplot is missing or fails, or the file cannot be written (with the system's reason).
void gnuplot_png(const std::string& png, int width, int height, const std::string& commands,
                 const char* op);
// A string literal for gnuplot: 'text' with every quote doubled.
std::string gnuplot_quote(const std::string& text);

}  // namespace tinyformer::nn
