// Training curves: CSV logs (nn::CsvLogger's, e.g. TrainingRun's) drawn as one PNG by gnuplot.
#pragma once

#include <string>
#include <vector>

namespace tinyformer::nn {

// Renders the CSV logs as one PNG: the "loss" column against "step" on the left,
// `right_column` (e.g. "val_ppl") on the right, one curve per log, titled run_name(log). Written
// to a temporary file and renamed, so a failed plot leaves no partial image. Throws an Error
// when gnuplot is missing or fails, or a log lacks a column.
void plot_logs(const std::string& png, const std::vector<std::string>& csvs,
               const std::string& right_column, const std::string& right_label);

// The file's name without directories and extension: "runs/full.csv" -> "full".
std::string run_name(const std::string& path);

}  // namespace tinyformer::nn
