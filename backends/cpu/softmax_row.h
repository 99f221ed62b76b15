// One row's softmax on the CPU, shared by the softmax op (backends/cpu/softmax.cpp) and fused
// attention (backends/cpu/attention.cpp): vectorized loops over a contiguous row.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cpu/avx512.h"
#include "core/math.h"

namespace tinyformer::cpu {

// The largest of x[0, n), NaNs left out; -inf for n = 0 or a row of -inf and NaN alone.
template <typename T>
T row_max(const T* x, std::int64_t n) {
  constexpr T lowest = std::numeric_limits<T>::lowest();
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (std::int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  // OpenMP starts each lane of a max reduction at the type's least value, which clang takes to be
  // lowest() and GCC -inf. A lane that met only -inf and NaN keeps that start, so lowest() is the
  // maximum only if some element is lowest(); otherwise every element was -inf or NaN.
  if (m == lowest) {
    bool seen = false;
    for (std::int64_t i = 0; i < n && !seen; ++i) seen = x[i] == lowest;
    if (!seen) m = -std::numeric_limits<T>::infinity();
  }
  return m;
}

// y = softmax(x) over one row of n (y may be x); returns the row's maximum, which was
// subtracted before exp() to keep it from overflowing (it cancels in the ratio). A row of -inf
// alone has maximum -inf, and every y is NaN (exp(-inf - -inf)).
// float32 runs avx512::softmax_row where the CPU has AVX-512: the same exponentials, its sums in
// another order.
template <typename T>
T softmax_row(const T* x, T* y, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (avx512::available()) return avx512::softmax_row(x, y, n);
  }
  const T m = row_max(x, n);
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = math::exp_nonpositive(x[i] - m);  // x[i] - m <= 0, or NaN
    sum += y[i];
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] *= inv;
  return m;
}

}  // namespace tinyformer::cpu
