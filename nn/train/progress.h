// Reporting for training loops: a progress bar (step/total, loss, learning rate, tokens per
// second, time left) and a CSV log of the logged steps.
//
//   nn::ProgressBar bar(steps);
//   nn::CsvLogger log("run.csv", {"step", "loss", "lr"});
//   for (std::int64_t step = 1; step <= steps; ++step) {
//     ...
//     bar.update(step, loss, lr, tokens_in_batch);
//     log.row({double(step), loss, lr});
//   }
//   bar.finish();
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace tinyformer::nn {

struct ProgressOptions {
  std::FILE* out = stdout;
  // On a terminal the bar is redrawn in place ('\r') at most this often.
  double redraw_interval_s = 0.2;
  // Elsewhere (a file, a CI log) one plain line is printed at most this often, plus the first
  // and the last step, so a log stays short and readable.
  double line_interval_s = 10.0;
  // Overrides the terminal check (isatty) when set; tests use it.
  std::optional<bool> terminal;
};

class ProgressBar {
 public:
  // `first_step` is the step a resumed run starts after (0 for a fresh run): the rate and the
  // time left count only the steps this run takes.
  explicit ProgressBar(std::int64_t total_steps, std::int64_t first_step = 0,
                       ProgressOptions options = {});

  // Reports that `step` (1-based, at most total) is done: its loss, learning rate and the
  // number of tokens it processed.
  void update(std::int64_t step, double loss, double lr, std::int64_t tokens);
  // Prints a line of its own (an evaluation result) without mixing it into the bar.
  void print(const std::string& line);
  // Time between pause() and resume() (evaluation, checkpoints) counts neither towards the
  // rate nor towards the time left.
  void pause();
  void resume();
  // Ends the bar's line on a terminal.
  void finish();

  // Tokens per second over the training time of this run (pauses excluded).
  double tokens_per_second() const;
  double training_seconds() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::string render(std::int64_t step, double loss, double lr) const;
  void clear_line();

  std::int64_t total_steps_;
  std::int64_t first_step_;
  ProgressOptions options_;
  bool terminal_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  std::optional<Clock::time_point> paused_at_;
  double paused_seconds_ = 0;
  std::int64_t tokens_ = 0;
  std::int64_t last_step_ = 0;
  bool drawn_ = false;         // a bar is on the current terminal line
  bool line_printed_ = false;  // at least one plain line was printed
};

// "1h02m", "3m07s", "42s".
std::string format_duration(double seconds);

// A CSV file: the header once, then one row per call, each flushed at once so that a crash or
// an interrupted run leaves every logged row readable.
// The file is written as nn::AtomicFile writes (nn/io/atomic_file.h): the header (and a resumed
// log's kept rows) replace the file atomically, keeping its mode; a directory, a FIFO or a device
// at the path is refused; errors give the system's reason.
class CsvLogger {
 public:
  // Replaces `path` with a file holding the header.
  CsvLogger(const std::string& path, std::vector<std::string> columns);
  CsvLogger(CsvLogger&& other) noexcept;
  CsvLogger& operator=(CsvLogger&& other) noexcept;
  CsvLogger(const CsvLogger&) = delete;
  CsvLogger& operator=(const CsvLogger&) = delete;
  ~CsvLogger();
  // Continues the log of a resumed run: keeps the rows whose first column is at most
  // `keep_up_to` (rows written after the checkpoint would be repeated otherwise) and appends.
  // A missing file starts a new log. Throws an Error when the file's header differs from
  // `columns`.
  static CsvLogger resume(const std::string& path, std::vector<std::string> columns,
                          double keep_up_to);

  // One value per column; NaN is written as an empty cell (a value not measured at this step).
  void row(const std::vector<double>& values);
  const std::string& path() const { return path_; }

 private:
  CsvLogger(const std::string& path, std::vector<std::string> columns, std::string kept_rows);

  std::string path_;
  std::vector<std::string> columns_;
  int fd_ = -1;  // the file, opened for appending
};

}  // namespace tinyformer::nn
