// Memory and creation kernels on the CPU: fill, copy (with dtype conversion) and arange.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"

namespace tinyformer::cpu {

namespace {

// Converts one element between dtypes. Floating -> int64 truncates toward zero like a C++ cast,
// but NaN becomes 0 and out-of-range values saturate: the plain cast is undefined behaviour.
// bfloat16 converts through float32 both ways, as PyTorch does: reading one is exact, and writing
// one rounds the float32 value to nearest even (so a double or an int64 is rounded twice, first
// to float32). The CUDA backend's copy follows the same rules element for element.
template <typename To, typename From>
To convert(From v) {
  if constexpr (std::is_same_v<From, bfloat16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bfloat16>) {
    return bfloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    constexpr double limit = 9223372036854775808.0;  // 2^63
    if (std::isnan(v)) return 0;
    if (v >= limit) return std::numeric_limits<To>::max();
    if (v < -limit) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace

// out: any shape and strides, any dtype.
void CpuBackend::fill(const Tensor& out, double value) {
  TF_CHECK(out.defined(), "fill: expected a defined tensor, got an undefined Tensor");
  dispatch<float, double, std::int64_t, bool, bfloat16>(out.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    const T v = convert<T>(value);
    map<T>(out, {}, [v] { return v; });
  });
}

// src, dst: same shape, any strides and dtypes. map() makes a contiguous copy a plain vectorized
// loop and a transposing one a tiled walk (strided.h).
void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  check_same_shape("copy", dst, {src});
  dispatch<float, double, std::int64_t, bool, bfloat16>(src.dtype(), "copy", [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch<float, double, std::int64_t, bool, bfloat16>(dst.dtype(), "copy", [&](auto dst_tag) {
      using D = decltype(dst_tag);
      map<D, S>(dst, {src}, [](S v) { return convert<D>(v); });
    });
  });
}

// out: [n] contiguous; out[i] = start + i * step, computed in double (one fused multiply-add, so
// that the CUDA backend computes the same double) and then converted.
void CpuBackend::arange(const Tensor& out, double start, double step) {
  TF_CHECK(out.defined() && out.dim() == 1 && out.is_contiguous(),
           "arange: expected a contiguous 1-d output, got ",
           out.defined() ? shape_str(out.shape()) : "an undefined Tensor");
  dispatch<float, double, std::int64_t, bfloat16>(out.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    parallel_for(out.numel(), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        o[i] = convert<T>(std::fma(static_cast<double>(i), step, start));
      }
    });
  });
}

}  // namespace tinyformer::cpu
