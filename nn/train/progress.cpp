// ProgressBar and CsvLogger: what a training loop prints and logs.
#include "nn/train/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "core/error.h"
#include "nn/io/atomic_file.h"

namespace tinyformer::nn {

namespace {
double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// 950 -> "950", 12345 -> "12.3k", 2.5e6 -> "2.50M".
std::string format_rate(double value) {
  char text[32];
  if (value >= 1e6)
    std::snprintf(text, sizeof text, "%.2fM", value / 1e6);
  else if (value >= 1e4)
    std::snprintf(text, sizeof text, "%.1fk", value / 1e3);
  else
    std::snprintf(text, sizeof text, "%.0f", value);
  return text;
}
}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(std::llround(seconds));
  char text[32];
  if (total >= 3600)
    std::snprintf(text, sizeof text, "%lldh%02lldm", total / 3600, total % 3600 / 60);
  else if (total >= 60)
    std::snprintf(text, sizeof text, "%lldm%02llds", total / 60, total % 60);
  else
    std::snprintf(text, sizeof text, "%llds", total);
  return text;
}

ProgressBar::ProgressBar(std::int64_t total_steps, std::int64_t first_step, ProgressOptions options)
    : total_steps_(total_steps),
      first_step_(first_step),
      options_(options),
      terminal_(options.terminal.value_or(::isatty(::fileno(options.out)) == 1)),
      start_(Clock::now()),
      last_draw_(start_),
      last_step_(first_step) {
  TF_CHECK(total_steps > 0, "ProgressBar: expected total_steps > 0, got ", total_steps);
  TF_CHECK(first_step >= 0 && first_step <= total_steps,
           "ProgressBar: expected 0 <= first_step <= total_steps, got first_step ", first_step,
           " and total_steps ", total_steps);
}

double ProgressBar::training_seconds() const {
  const Clock::time_point end = paused_at_.value_or(Clock::now());
  return seconds_between(start_, end) - paused_seconds_;
}

double ProgressBar::tokens_per_second() const {
  const double seconds = training_seconds();
  return seconds > 0 ? static_cast<double>(tokens_) / seconds : 0.0;
}

void ProgressBar::pause() {
  if (!paused_at_) paused_at_ = Clock::now();
}

void ProgressBar::resume() {
  if (!paused_at_) return;
  paused_seconds_ += seconds_between(*paused_at_, Clock::now());
  paused_at_.reset();
}

// "[######......]  120/1000  loss 2.3456  lr 1.20e-03  5.3k tok/s  ETA 2m13s"
std::string ProgressBar::render(std::int64_t step, double loss, double lr) const {
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * step / total_steps_);
  const std::int64_t done = step - first_step_;
  const double per_step = done > 0 ? training_seconds() / static_cast<double>(done) : NAN;
  const double left = per_step * static_cast<double>(total_steps_ - step);

  char text[200];
  std::snprintf(text, sizeof text, "[%s%s] %*lld/%lld  loss %.4f  lr %.2e  %s tok/s  ETA %s",
                std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                static_cast<int>(std::to_string(total_steps_).size()), static_cast<long long>(step),
                static_cast<long long>(total_steps_), loss, lr,
                format_rate(tokens_per_second()).c_str(), format_duration(left).c_str());
  return text;
}

void ProgressBar::update(std::int64_t step, double loss, double lr, std::int64_t tokens) {
  tokens_ += tokens;
  last_step_ = step;
  const Clock::time_point now = Clock::now();
  const double since_draw = seconds_between(last_draw_, now);
  const bool last = step >= total_steps_;
  if (terminal_) {
    if (!last && drawn_ && since_draw < options_.redraw_interval_s) return;
    // "\x1b[K" clears what a longer previous bar left to the right.
    std::fprintf(options_.out, "\r%s\x1b[K", render(step, loss, lr).c_str());
    drawn_ = true;
  } else {
    if (!last && line_printed_ && since_draw < options_.line_interval_s) return;
    std::fprintf(options_.out, "%s\n", render(step, loss, lr).c_str());
    line_printed_ = true;
  }
  std::fflush(options_.out);
  last_draw_ = now;
}

void ProgressBar::clear_line() {
  if (terminal_ && drawn_) {
    std::fprintf(options_.out, "\r\x1b[K");
    drawn_ = false;
  }
}

void ProgressBar::print(const std::string& line) {
  clear_line();
  std::fprintf(options_.out, "%s\n", line.c_str());
  std::fflush(options_.out);
  // The bar comes back at the next update, without waiting for the redraw interval.
  last_draw_ = Clock::time_point{};
}

void ProgressBar::finish() {
  if (terminal_ && drawn_) std::fprintf(options_.out, "\n");
  drawn_ = false;
  std::fflush(options_.out);
}

namespace {
std::string join(const std::vector<std::string>& columns) {
  std::string line;
  for (std::size_t i = 0; i < columns.size(); ++i) line += (i ? "," : "") + columns[i];
  return line;
}
}  // namespace

CsvLogger::CsvLogger(const std::string& path, std::vector<std::string> columns)
    : CsvLogger(path, std::move(columns), "") {}

CsvLogger::CsvLogger(const std::string& path, std::vector<std::string> columns,
                     std::string kept_rows)
    : path_(path), columns_(std::move(columns)) {
  TF_CHECK(!columns_.empty(), "CsvLogger: expected at least one column for '", path, "'");
  // Header and kept rows replace the file atomically, so that a resumed log is never left half
  // rewritten; new rows are appended to it afterwards.
  AtomicFile file(path, "CsvLogger: " + path);
  file.write(join(columns_) + '\n' + kept_rows);
  file.commit();
  fd_ = ::open(file.target().c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd_ < 0) {
    const int error = errno;
    fail("CsvLogger: cannot open ", file.target(), " for appending: ", std::strerror(error));
  }
}

CsvLogger::CsvLogger(CsvLogger&& other) noexcept
    : path_(std::move(other.path_)),
      columns_(std::move(other.columns_)),
      fd_(std::exchange(other.fd_, -1)) {}

CsvLogger& CsvLogger::operator=(CsvLogger&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    columns_ = std::move(other.columns_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

CsvLogger::~CsvLogger() {
  if (fd_ >= 0) ::close(fd_);
}

CsvLogger CsvLogger::resume(const std::string& path, std::vector<std::string> columns,
                            double keep_up_to) {
  // A FIFO or a device at the path is refused before it is opened (reading a FIFO would wait).
  check_file_path(path, /*for_saving=*/true, "CsvLogger: " + path);
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return CsvLogger(path, std::move(columns));
  std::string header;
  std::getline(in, header);
  TF_CHECK(header == join(columns), "CsvLogger: '", path, "' has the columns '", header,
           "', expected '", join(columns), "'; log to another file (--log)");
  std::string kept, line;
  while (std::getline(in, line)) {
    // A last line without its '\n' was cut short by a crash: it goes.
    if (in.eof()) break;
    // The first column is the step.
    char* end = nullptr;
    const double first = std::strtod(line.c_str(), &end);
    if (end == line.c_str() || (*end != ',' && *end != '\0') || first > keep_up_to) continue;
    kept += line + '\n';
  }
  return CsvLogger(path, std::move(columns), std::move(kept));
}

void CsvLogger::row(const std::vector<double>& values) {
  TF_CHECK(values.size() == columns_.size(), "CsvLogger::row: '", path_, "' has ", columns_.size(),
           " columns, got ", values.size(), " values");
  std::string line;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) line += ',';
    if (std::isnan(values[i])) continue;
    char cell[32];
    // Nine significant digits print a float32 loss exactly, so logs of two runs compare equal
    // exactly when their losses do.
    std::snprintf(cell, sizeof cell, "%.9g", values[i]);
    line += cell;
  }
  line += '\n';
  // One write per row, appended at once: a crash leaves every earlier row complete.
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      fail("CsvLogger: writing to ", path_, " failed: ", std::strerror(error));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace tinyformer::nn
