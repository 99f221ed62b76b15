// ProgressBar output on terminals and in logs, and CsvLogger's rows and resumption.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "nn/train/progress.h"

using namespace tinyformer;
namespace fs = std::filesystem;

namespace {

// What `fill` printed to a temporary FILE*.
template <typename F>
std::string capture(F fill) {
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  fill(out);
  std::fflush(out);
  std::rewind(out);
  std::string text;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, out)) text += buffer;
  std::fclose(out);
  return text;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("tinyformer-test-" + std::to_string(::getpid()) + "-" + name);
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("format_duration") {
  CHECK(nn::format_duration(42) == "42s");
  CHECK(nn::format_duration(187) == "3m07s");
  CHECK(nn::format_duration(3720) == "1h02m");
  CHECK(nn::format_duration(NAN) == "?");
}

TEST_CASE("ProgressBar in a log prints plain lines: the first step, the last, none between") {
  const std::string text = capture([](std::FILE* out) {
    nn::ProgressBar bar(50, 0, {.out = out, .line_interval_s = 3600, .terminal = false});
    for (int step = 1; step <= 50; ++step) bar.update(step, 2.5, 1e-3, 100);
    bar.finish();
  });
  CHECK(count(text, "\n") == 2);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(text.find(" 1/50") != std::string::npos);
  CHECK(text.find("50/50") != std::string::npos);
  CHECK(text.find("loss 2.5000") != std::string::npos);
  CHECK(text.find("lr 1.00e-03") != std::string::npos);
  CHECK(text.find("tok/s") != std::string::npos);
  CHECK(text.find("ETA 0s") != std::string::npos);  // nothing left after the last step
}

TEST_CASE("ProgressBar on a terminal redraws in place and keeps printed lines apart") {
  const std::string text = capture([](std::FILE* out) {
    nn::ProgressBar bar(4, 0, {.out = out, .redraw_interval_s = 0, .terminal = true});
    bar.update(1, 3.0, 1e-3, 10);
    bar.update(2, 2.0, 1e-3, 10);
    bar.print("step 2: validation loss 1.5");
    bar.update(3, 1.0, 1e-3, 10);
    bar.update(4, 0.5, 1e-3, 10);
    bar.finish();
  });
  CHECK(count(text, "\r") >= 4);
  // The printed line stands on a line of its own, and the output ends with a newline.
  CHECK(text.find("\r\x1b[Kstep 2: validation loss 1.5\n") != std::string::npos);
  CHECK(text.back() == '\n');
  CHECK(count(text, "\n") == 2);
}

TEST_CASE("ProgressBar counts the steps of a resumed run only and rejects bad totals") {
  const std::string text = capture([](std::FILE* out) {
    nn::ProgressBar bar(10, 8, {.out = out, .terminal = false});
    bar.update(9, 1.0, 1e-4, 1000);
    bar.update(10, 1.0, 1e-4, 1000);
  });
  CHECK(text.find(" 9/10") != std::string::npos);
  CHECK_THROWS_AS(nn::ProgressBar(0), Error);
  CHECK_THROWS_AS(nn::ProgressBar(10, 11), Error);
}

TEST_CASE("CsvLogger writes the header once, one row per call, NaN as an empty cell") {
  const fs::path path = temp_path("log.csv");
  {
    nn::CsvLogger log(path.string(), {"step", "loss", "val"});
    log.row({1, 2.5, NAN});
    // Rows are flushed at once: readable while the logger is alive.
    CHECK(read_all(path) == "step,loss,val\n1,2.5,\n");
    log.row({2, 0.123456789, 7});
    CHECK_THROWS_AS(log.row({3, 1}), Error);
  }
  CHECK(read_all(path) == "step,loss,val\n1,2.5,\n2,0.123456789,7\n");
  fs::remove(path);
}

TEST_CASE("CsvLogger::resume keeps the rows up to the checkpoint's step and appends") {
  const fs::path path = temp_path("resume.csv");
  {
    nn::CsvLogger log(path.string(), {"step", "loss"});
    for (int step = 1; step <= 5; ++step) log.row({double(step), 10.0 - step});
  }
  // A crash in the middle of a row leaves a last line without its newline.
  { std::ofstream(path, std::ios::app) << "6,4."; }
  {
    nn::CsvLogger log = nn::CsvLogger::resume(path.string(), {"step", "loss"}, 3);
    log.row({4, 0.5});
  }
  CHECK(read_all(path) == "step,loss\n1,9\n2,8\n3,7\n4,0.5\n");

  // Another program's log is not silently mixed in.
  CHECK_THROWS_AS(nn::CsvLogger::resume(path.string(), {"step", "accuracy"}, 3), Error);
  CHECK(read_all(path) == "step,loss\n1,9\n2,8\n3,7\n4,0.5\n");

  // No log yet: a fresh one.
  fs::remove(path);
  { nn::CsvLogger::resume(path.string(), {"step", "loss"}, 3).row({4, 1}); }
  CHECK(read_all(path) == "step,loss\n4,1\n");
  fs::remove(path);
}

TEST_CASE("CsvLogger reports a path it cannot write") {
  CHECK_THROWS_AS(nn::CsvLogger("/nonexistent-dir/log.csv", {"step"}), Error);
  CHECK_THROWS_AS(nn::CsvLogger(temp_path("x.csv").string(), {}), Error);
}
