// fill, copy and arange.
//   fill:   out[i] = value                 out: any shape, strides and dtype
//   copy:   dst[i] = src[i]                same shape, any strides and dtypes
//   arange: out[i] = start + i * step      out: [n] contiguous
// Conversions between dtypes follow element.h's store(): float to int64 truncates toward zero,
// anything to bool is "not zero", bfloat16 rounds through float32.
#include <cmath>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::fill(const Tensor& out, double value) {
  TF_CHECK(out.defined(), "fill: expected a defined tensor, got an undefined Tensor");
  for (std::int64_t i = 0; i < out.numel(); ++i) set(out, i, value);
}

void ReferenceBackend::copy(const Tensor& src, const Tensor& dst) {
  check_same_shape("copy", dst, {src}, *this);
  for (std::int64_t i = 0; i < src.numel(); ++i) {
    if (src.dtype() == DType::int64 && dst.dtype() == DType::int64) {
      set_int(dst, i, get_int(src, i));  // exactly, beyond the 53 bits of a double
    } else if (src.dtype() == DType::int64 && dst.dtype() != DType::float64) {
      // int64 -> float32/bfloat16 rounds once, from the integer (as a C++ cast does).
      set(dst, i, static_cast<float>(get_int(src, i)));
    } else {
      set(dst, i, get(src, i));
    }
  }
}

void ReferenceBackend::arange(const Tensor& out, double start, double step) {
  TF_CHECK(out.defined() && out.dim() == 1 && out.is_contiguous(),
           "arange: expected a contiguous 1-d output");
  TF_CHECK(out.dtype() != DType::boolean, "arange: unsupported dtype ", out.dtype());
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    set(out, i, std::fma(static_cast<double>(i), step, start));
  }
}

}  // namespace tinyformer::reference
