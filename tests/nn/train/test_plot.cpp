// plot_logs: logs that cannot be drawn are Errors before gnuplot runs; drawable ones give a PNG
// (where gnuplot is installed) and no temporary file.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "nn/train/plot.h"

using namespace tinyformer;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("tinyformer_plot_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("run_name is the log's file name without folder and extension") {
  CHECK(nn::run_name("runs/full-k32.csv") == "full-k32");
  CHECK(nn::run_name("plain") == "plain");
}

TEST_CASE("plot_logs: a missing log or column is an Error and no image is written") {
  TempDir dir;
  const std::string png = dir.file("out.png");
  write(dir.file("a.csv"), "step,loss,val_ppl\n1,2.5,12\n2,2.25,11\n");
  write(dir.file("b.csv"), "step,loss\n1,2.5\n");
  CHECK_THROWS_WITH_AS(nn::plot_logs(png, {dir.file("missing.csv")}, "val_ppl", "perplexity"),
                       doctest::Contains("cannot read the log"), Error);
  CHECK_THROWS_WITH_AS(
      nn::plot_logs(png, {dir.file("a.csv"), dir.file("b.csv")}, "val_ppl", "perplexity"),
      doctest::Contains("has no 'val_ppl' column"), Error);
  CHECK_THROWS_AS(nn::plot_logs(png, {}, "val_ppl", "perplexity"), Error);
  CHECK_FALSE(fs::exists(png));

  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    MESSAGE("gnuplot is not installed: the drawing itself is not checked");
    return;
  }
  nn::plot_logs(png, {dir.file("a.csv")}, "val_ppl", "perplexity");
  CHECK(fs::file_size(png) > 0);
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
  }
}
