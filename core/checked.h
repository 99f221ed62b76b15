// Size arithmetic that reports overflow instead of wrapping: every product or sum of sizes,
// strides, element offsets and byte counts that user input can make large goes through these.
// They run where shapes are computed (once per op), never inside an element loop.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/shape.h"

namespace tinyformer {

// The largest storage one tensor may ask for: 2^40 bytes (1 TiB), more than any GPU holds and
// than nearly any host has, and AddressSanitizer's own limit on one allocation. A request above
// it is refused before any allocator sees it: it would fail there anyway, or, where the kernel
// overcommits memory, succeed and take the machine down as it is filled, and a sanitizer's
// allocator aborts on it instead of failing.
inline constexpr std::int64_t kMaxStorageBytes = std::int64_t{1} << 40;

// The bytes of a contiguous `shape` of `dtype`: an Error naming `op` and the shape when the
// size arithmetic overflows, an OutOfMemory when it is above kMaxStorageBytes. The factories
// call it; so does code that builds a tensor's values in a host vector first, before it
// allocates that vector.
std::int64_t storage_bytes(const Shape& shape, DType dtype, const char* op);

// a + b and a * b into `out`; true when the exact result does not fit in an int64 (`out` then
// holds the wrapped value, which must not be used).
[[nodiscard]] inline bool add_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) {
  return __builtin_add_overflow(a, b, &out);
}
[[nodiscard]] inline bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) {
  return __builtin_mul_overflow(a, b, &out);
}

// Throws "<op>: shape <shape> is too large (<a> <sign> <b> overflows a 64-bit integer)".
[[noreturn]] void fail_size_overflow(const char* op, const Shape& shape, std::int64_t a, char sign,
                                     std::int64_t b);

// a + b and a * b, or an Error naming `op` and the `shape` whose size arithmetic overflowed.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* op,
                                const Shape& shape) {
  std::int64_t out;
  if (add_overflows(a, b, out)) [[unlikely]]
    fail_size_overflow(op, shape, a, '+', b);
  return out;
}
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* op,
                                const Shape& shape) {
  std::int64_t out;
  if (mul_overflows(a, b, out)) [[unlikely]]
    fail_size_overflow(op, shape, a, '*', b);
  return out;
}

}  // namespace tinyformer
