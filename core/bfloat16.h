// bfloat16 on the host: the top 16 bits of a float32 (8 exponent bits, 7 mantissa bits), the
// storage type of DType::bfloat16. Converting from float rounds to nearest even; NaN stays NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace tinyformer {

struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  explicit bfloat16(float value) : bits(round(value)) {}
  explicit operator float() const {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }

  // Both results are computed and one selected, without a branch, so that loops over many
  // values vectorize.
  static std::uint16_t round(float value) {
    const auto u = std::bit_cast<std::uint32_t>(value);
    const auto quiet_nan = static_cast<std::uint16_t>((u >> 16) | 0x40u);
    const auto nearest_even = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest_even;
  }
};

}  // namespace tinyformer
