// Flag checks, device choice, output paths and error reports for training programs.
#include "nn/train/program.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <system_error>

#include "core/backend.h"
#include "core/error.h"
#include "nn/distributed/distributed.h"

namespace tinyformer::nn {

namespace fs = std::filesystem;

namespace flags {

namespace {

// %g: 0.99, 1e-06, 128.
std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

std::string NumberCheck::operator()(const std::string& text) const {
  // strtod reads what the argument parsers read ("1e-3", "inf", "nan", " 2"), all of it.
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size()) return "expected a number, got '" + text + "'";
  if (!std::isfinite(value)) return "expected a finite number, got " + text;
  if (!accept(value)) return "expected " + expected + ", got " + text;
  return {};
}

NumberCheck positive() {
  return {[](double v) { return v > 0; }, "a value above 0", "POSITIVE"};
}

NumberCheck non_negative() {
  return {[](double v) { return v >= 0; }, "a value of 0 or more", "NONNEGATIVE"};
}

NumberCheck in_range(double low, double high) {
  const std::string lo = number_text(low), hi = number_text(high);
  return {[low, high](double v) { return v >= low && v <= high; },
          "a value from " + lo + " to " + hi, "IN [" + lo + ", " + hi + "]"};
}

}  // namespace flags

Device usable_device(const std::string& name, const std::string& flag) {
  Device device;
  try {
    device = parse_device(name);
  } catch (const Error& e) {
    throw UsageError(flag + ": " + e.what());
  }
  if (device.type == DeviceType::cuda && !cuda_available()) {
    throw UsageError(flag + " " + name +
                     ": no usable CUDA device (this build has no CUDA backend, or no GPU is "
                     "present); use " +
                     flag + " cpu");
  }
  return device;
}

void check_writable(const std::string& file, const std::string& flag) {
  if (file.empty()) return;
  fs::path dir = fs::path(file).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || ::access(dir.c_str(), W_OK) != 0) {
    throw UsageError(flag + " " + file + ": cannot write to the directory '" + dir.string() +
                     "'; choose a writable path");
  }
}

int report_error(const std::string& program, std::exception_ptr error,
                 const std::string& out_of_memory_hint) {
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const OutOfMemory& e) {
    message = e.what() + out_of_memory_hint;
  } catch (const std::bad_alloc&) {
    message = "out of host memory" + out_of_memory_hint;
  } catch (const std::length_error& e) {  // a std::vector or string asked for too many elements
    message = std::string("a size too large for memory (") + e.what() + ")" + out_of_memory_hint;
  } catch (const fs::filesystem_error& e) {
    message = std::string(e.what()) +
              "; check that the path exists and that its permissions "
              "let this program read it (and write where it writes)";
  } catch (const UsageError& e) {  // bad input (flags, files, checkpoints): says what to do
    message = e.what();
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("unexpected error, a bug to report with the command line: ") + e.what();
  } catch (...) {
    message = "unexpected error of an unknown type, a bug to report with the command line";
  }
  std::replace(message.begin(), message.end(), '\n', ' ');  // one line, for logs and scripts
  // In a data-parallel job the other processes may wait for this one in a collective: end them
  // all, with this message ("rank R: <program>: <message>").
  if (distributed::is_initialized() && distributed::world_size() > 1) {
    distributed::abort(program + ": " + message, 1);
  }
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  return 1;
}

}  // namespace tinyformer::nn
