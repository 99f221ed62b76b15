// tinyformer::Error and the checks every public entry point uses to report bad input.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tinyformer {

// Every error a user can cause is an Error whose message names the op, what it expected and
// what it got, e.g. "matmul: inner dimensions differ: [2, 3] @ [4, 5]".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation the device could not serve. make_tensor's message names the op, the shape and
// the bytes asked for; an allocator's own message says what the device had left.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// An index outside the rows an op selects from (index_select, index_add). The message names the
// op, the index and its position; an op that knows what the index stands for catches it and
// says so (embedding: a token id outside the vocabulary).
class IndexOutOfRange : public Error {
 public:
  IndexOutOfRange(const std::string& message, std::int64_t index, std::int64_t at,
                  std::int64_t row_count)
      : Error(message), value(index), position(at), rows(row_count) {}
  std::int64_t value;     // the index
  std::int64_t position;  // its position among the indices (row-major)
  std::int64_t rows;      // the valid range is [0, rows)
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}
}  // namespace detail

// Throws an Error whose message is the concatenation of the parts (anything with operator<<).
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(detail::concat(parts...));
}

}  // namespace tinyformer

// TF_CHECK(cond, "op: expected ...", value, ...): throw an Error unless cond holds.
#define TF_CHECK(cond, ...)                       \
  do {                                            \
    if (!(cond)) ::tinyformer::fail(__VA_ARGS__); \
  } while (false)
