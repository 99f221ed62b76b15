// What a training program needs around its loop besides TrainingRun: checks of numeric flag
// values that any argument parser can call, the device named on the command line, output paths
// checked before any work, and the one-line report of the error that ends the program.
//
//   int main(int argc, char** argv) {
//     try {
//       ... parse flags; for each number: if (auto bad = nn::flags::positive()(text); !bad.empty())
//             throw nn::UsageError("--lr: " + bad);
//       const Device device = nn::usable_device(device_flag);
//       nn::check_writable(log_path, "--log");
//       ... the model, the optimizer, nn::TrainingRun and the loop ...
//     } catch (...) {
//       return nn::report_error("my_program", std::current_exception());
//     }
//   }
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

#include "core/dtype.h"

namespace tinyformer::nn {

// Bad input from the command line or the files it names: report_error prints its message alone.
// Messages say what was wrong and what to do.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace flags {

// A check of a number given as text: call it with the flag's text; it returns an empty string
// when the text is a finite number that the check accepts, else what is wrong ("expected a
// value above 0, got -1"; bounds printed as %g, never the 309 digits of DBL_MAX). NaN and the
// infinities are always refused: no flag means them.
struct NumberCheck {
  std::function<bool(double)> accept;
  std::string expected;     // completes "expected ...": "a value above 0"
  std::string description;  // a short name for --help: "POSITIVE"
  std::string operator()(const std::string& text) const;
};

NumberCheck positive();                         // > 0
NumberCheck non_negative();                     // >= 0
NumberCheck in_range(double low, double high);  // [low, high]

// A check of a whole number given as text, for flags that hold integers: decimal digits, with a
// '-' in front only for a negative number, nothing else (no '+', no spaces, no exponent, no
// octal or hexadecimal), and a value in [low, high]. Nothing wraps or saturates: a number
// beyond the range, however many digits it has, is "out of range". Messages quote at most 20
// characters of the text: "expected a whole number, got 'abc'", "out of range: expected a whole
// number of 1 or more, got '-3'".
struct IntegerCheck {
  std::int64_t low;
  std::uint64_t high;
  std::string expected;     // completes "expected ...": "a whole number of 1 or more"
  std::string description;  // a short name for --help: "POSITIVE", "IN [0, 255]"
  // Empty when `text` passes; then `canonical`, when given, receives the value in plain decimal
  // (leading zeros dropped) for a parser that reads the text after the check.
  std::string operator()(const std::string& text, std::string* canonical = nullptr) const;
};

// [low, high]; with high left at INT64_MAX the check reads "of <low> or more".
IntegerCheck integer(std::int64_t low, std::uint64_t high = INT64_MAX);

// What a message shows of a user's text: at most its first 20 characters, then "..." when it is
// longer; shortened() as it is, quoted() in single quotes.
std::string shortened(const std::string& text);
std::string quoted(const std::string& text);

}  // namespace flags

// The device `name` names ("cpu", "cuda", "cuda:1"), checked to be usable here; a UsageError
// naming `flag` otherwise (an unknown name, or CUDA in a build without it or without a GPU).
Device usable_device(const std::string& name, const std::string& flag = "--device");

// Creates the directory of `file` when needed; a UsageError naming `flag` when it cannot be
// written. Called before training, so that a bad path fails at once rather than at the first
// save. An empty `file` (no output asked for) passes.
void check_writable(const std::string& file, const std::string& flag);

// Prints "<program>: <message>" on one line of stderr for the exception that ends a program
// (main catches with `catch (...)` and passes std::current_exception()) and returns the exit
// status, 1. A UsageError or an Error prints its message; running out of memory prints it
// followed by `out_of_memory_hint` (e.g. "; lower --batch"); a file system failure says to
// check the path and its permissions; anything else is reported as a bug to report. In a
// data-parallel job of several processes it ends every process instead (distributed::abort,
// which prints the message with the rank), so that none is left waiting for this one.
int report_error(const std::string& program, std::exception_ptr error,
                 const std::string& out_of_memory_hint = "");

}  // namespace tinyformer::nn
