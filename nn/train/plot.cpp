// plot_logs: training curves from CSV logs, drawn by gnuplot.
#include "nn/train/plot.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "nn/io/atomic_file.h"
#include "nn/io/output_paths.h"

namespace tinyformer::nn {

namespace fs = std::filesystem;

std::string run_name(const std::string& path) {
  return fs::path(path).stem().string();
}

namespace {

// A string literal for the shell: single quotes, a quote written as '\''.
std::string sh_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

// The whole of a file; false when it cannot be read.
bool read_file(const fs::path& path, std::string& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return false;
  std::ostringstream text;
  text << in.rdbuf();
  bytes = text.str();
  return !in.bad();
}

std::vector<std::string> csv_header(const std::string& csv) {
  std::ifstream in(csv);
  if (!in.is_open()) fail("plot_logs: cannot read the log '", csv, "'; check the path");
  std::string header;
  std::getline(in, header);
  if (!header.empty() && header.back() == '\r') header.pop_back();
  return split(header, ',');
}

}  // namespace

std::string gnuplot_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

void gnuplot_png(const std::string& png, int width, int height, const std::string& commands,
                 const char* op) {
  // Before gnuplot runs: a path that is not a regular file, or a read-only directory, fails at
  // once.
  check_file_path(png, /*for_saving=*/true, std::string(op) + ": " + png);
  // gnuplot draws into a private file; its bytes then replace `png` through AtomicFile, which
  // keeps the old file's mode and refuses to replace anything but a regular file.
  const std::string stem = "tinyformer-plot-" + std::to_string(::getpid());
  const fs::path script = fs::temp_directory_path() / (stem + ".gp");
  const fs::path drawn = fs::temp_directory_path() / (stem + ".png");
  std::error_code ec;
  {
    std::ofstream gp(script);
    TF_CHECK(gp.is_open(), op, ": cannot write ", script.string());
    // Names and titles are plain text: noenhanced keeps "train_mlm" from showing "mlm" as a
    // subscript.
    gp << "set terminal pngcairo size " << width << "," << height << " font ',10' noenhanced\n"
       << "set output " << gnuplot_quote(drawn.string()) << "\n"
       << commands;
  }
  const std::string command = "gnuplot " + sh_quote(script.string()) + " 2>&1";
  std::string output;
  int status = -1;
  if (std::FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
    status = ::pclose(pipe);
  }
  fs::remove(script, ec);
  std::string bytes;
  const bool read = status == 0 && read_file(drawn, bytes);
  fs::remove(drawn, ec);
  if (status != 0) {
    std::string first = output.substr(0, output.find('\n'));
    if (status == 127 * 256 || first.find("not found") != std::string::npos) {
      first = "gnuplot is not installed (apt-get install gnuplot-nox)";
    }
    fail(op, ": gnuplot failed: ", first.empty() ? "no output" : first);
  }
  TF_CHECK(read, op, ": gnuplot wrote no image to ", drawn.string());
  write_file_atomically(png, bytes, std::string(op) + ": " + png);
}

void plot_logs(const std::string& png, const std::vector<std::string>& csvs,
               const std::string& right_column, const std::string& right_label) {
  TF_CHECK(!csvs.empty(), "plot_logs: no logs to plot");
  std::vector<NamedPath> logs;
  for (const std::string& csv : csvs) logs.push_back({"the log", csv});
  check_outputs_distinct(logs, {{"plot_logs: the image", png}});
  for (const std::string& csv : csvs) {
    const auto columns = csv_header(csv);
    for (const std::string& needed : {std::string("step"), std::string("loss"), right_column}) {
      TF_CHECK(std::find(columns.begin(), columns.end(), needed) != columns.end(),
               "plot_logs: the log '", csv, "' has no '", needed,
               "' column; pass logs written by the same program");
    }
  }
  std::ostringstream gp;
  gp << "set datafile separator ','\nset datafile columnheaders\n"
     << "set grid\nset key top right\nset xlabel 'step'\n"
     << "set multiplot layout 1,2\n"
     << "set title 'training loss'\nset ylabel 'loss (nats)'\n";
  // gnuplot cycles through 8 colours; later runs get dashed lines so no two curves look alike.
  auto plot = [&](const std::string& column, const char* style) {
    gp << "plot ";
    for (std::size_t i = 0; i < csvs.size(); ++i) {
      gp << (i ? ", \\\n     " : "") << gnuplot_quote(csvs[i]) << " using (column('step')):(column("
         << gnuplot_quote(column) << ")) with " << style << " lw 1.5 lt " << i % 8 + 1 << " dt "
         << i / 8 + 1 << " title " << gnuplot_quote(run_name(csvs[i]));
    }
    gp << "\n";
  };
  plot("loss", "lines");
  // One legend, on the left where the curves have fallen away from the top right corner.
  gp << "unset key\n";
  gp << "set title " << gnuplot_quote(right_label) << "\nset ylabel " << gnuplot_quote(right_label)
     << "\n";
  plot(right_column, "linespoints pt 7 ps 0.6");
  gp << "unset multiplot\n";
  gnuplot_png(png, 1400, 560, gp.str(), "plot_logs");
}

}  // namespace tinyformer::nn
