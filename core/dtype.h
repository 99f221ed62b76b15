// Element types and devices: the two tags every tensor carries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "core/bfloat16.h"

namespace tinyformer {

// float64 is for gradient checks, int64 for indices and token ids, boolean for masks, bfloat16
// for halving the bytes of products and activations (computed in float32).
enum class DType : std::uint8_t { float32, float64, int64, boolean, bfloat16 };

constexpr DType kFloat32 = DType::float32;
constexpr DType kFloat64 = DType::float64;
constexpr DType kInt64 = DType::int64;
constexpr DType kBool = DType::boolean;
constexpr DType kBFloat16 = DType::bfloat16;

std::size_t element_size(DType dtype);
const char* dtype_name(DType dtype);
inline bool is_floating(DType dtype) {
  return dtype == DType::float32 || dtype == DType::float64 || dtype == DType::bfloat16;
}
std::ostream& operator<<(std::ostream& os, DType dtype);

// The C++ type stored for each dtype (boolean is one byte, 0 or 1).
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::float64;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::int64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::boolean;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return DType::bfloat16;
}

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

// Parses "cpu", "cuda" or "cuda:N"; throws Error on anything else.
Device parse_device(const std::string& text);
std::ostream& operator<<(std::ostream& os, Device device);

}  // namespace tinyformer
