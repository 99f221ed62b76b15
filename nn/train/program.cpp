// Flag checks, device choice, output paths and error reports for training programs.
#include "nn/train/program.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string_view>
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

std::string shortened(const std::string& text) {
  constexpr std::size_t kShown = 20;
  return text.size() > kShown ? text.substr(0, kShown) + "..." : text;
}

std::string quoted(const std::string& text) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict) about "'" + std::string wrongly.
  std::string out(1, '\'');
  out += shortened(text);
  out += '\'';
  return out;
}

std::string NumberCheck::operator()(const std::string& text) const {
  // strtod reads what the argument parsers read ("1e-3", "inf", "nan", " 2"), all of it.
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size()) return "expected a number, got " + quoted(text);
  if (!std::isfinite(value)) return "expected a finite number, got " + shortened(text);
  if (!accept(value)) return "expected " + expected + ", got " + shortened(text);
  return {};
}

std::string IntegerCheck::operator()(const std::string& text, std::string* canonical) const {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view digits = std::string_view(text).substr(negative ? 1 : 0);
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "expected a whole number, got " + quoted(text);
  }
  const std::string out_of_range = "out of range: expected " + expected + ", got " + quoted(text);
  std::uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  if (ec != std::errc() || end != digits.data() + digits.size()) return out_of_range;  // too long
  if (negative && low >= 0) return out_of_range;  // "-0" too: no sign where none is allowed
  if (negative && magnitude != 0) {
    // -magnitude >= low, computed without overflow: low is at least INT64_MIN.
    if (magnitude - 1 > static_cast<std::uint64_t>(-(low + 1))) return out_of_range;
    if (canonical != nullptr) {
      *canonical = std::to_string(-static_cast<std::int64_t>(magnitude - 1) - 1);
    }
    return {};
  }
  if (magnitude > high || (low > 0 && magnitude < static_cast<std::uint64_t>(low))) {
    return out_of_range;
  }
  if (canonical != nullptr) *canonical = std::to_string(magnitude);
  return {};
}

IntegerCheck integer(std::int64_t low, std::uint64_t high) {
  TF_CHECK(low < 0 || static_cast<std::uint64_t>(low) <= high, "flags::integer: low (", low,
           ") is above high (", high, ")");
  const std::string lo = std::to_string(low), hi = std::to_string(high);
  if (high == static_cast<std::uint64_t>(INT64_MAX)) {
    const std::string description = low == 1   ? "POSITIVE"
                                    : low == 0 ? "NONNEGATIVE"
                                               : "AT LEAST " + lo;
    return {low, high, "a whole number of " + lo + " or more", description};
  }
  return {low, high, "a whole number from " + lo + " to " + hi, "IN [" + lo + ", " + hi + "]"};
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
  if (!ec && ::access(dir.c_str(), W_OK) != 0) ec = std::error_code(errno, std::generic_category());
  if (ec) {
    throw UsageError(flag + " " + file + ": cannot write to the directory '" + dir.string() +
                     "' (" + ec.message() + "); choose a writable path");
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
