// Loops over strided tensors for the CPU's memory-bound kernels: an OpenMP range splitter, a
// dtype dispatcher, and map(), which applies an elementwise function to tensors of any strides.
//
// map() first coalesces the operands' dims (size-1 dims dropped, neighbours that every operand
// walks contiguously merged into one), so most views reduce to one or two dims. When every
// operand is contiguous the loop is a plain `o[i] = f(a[i], b[i])` over pointers, which the
// compiler vectorizes; otherwise it walks the innermost dim row by row. Inputs that are constant
// along a row (stride 0 there: a row's mask, a scalar) are read once per row by a loop compiled
// for that pattern; strided operands are staged through small contiguous blocks so that the same
// vectorized loop does the arithmetic.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/parallel.h"
#include "core/op_checks.h"
#include "core/strided_layout.h"
#include "core/tensor.h"

namespace tinyformer::cpu {

// Runs body(begin, end) over [0, n) cut into one contiguous chunk per OpenMP thread, when the
// work is worth waking the team for (backends/cpu/parallel.h): n items of `item_elements`
// elements each, every element costing `cost` streaming elements. Otherwise, and inside a
// parallel region, it runs on the calling thread. body must not throw: an exception cannot
// leave an OpenMP region, so callers validate first.
template <typename Body>
void parallel_for(std::int64_t n, Body&& body, std::int64_t item_elements = 1,
                  std::int64_t cost = 1) {
  if (n <= 0) return;
  if (!parallel_worth(n * item_elements, cost)) {
    body(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t chunk = (n + threads - 1) / threads;
    const std::int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

// --- dtype dispatch ---

// "float32, float64 or int64": the dtypes a kernel accepts, for error messages.
template <typename... Ts>
std::string dtype_list() {
  const char* names[] = {dtype_name(dtype_of<Ts>())...};
  std::string s;
  for (std::size_t i = 0; i < sizeof...(Ts); ++i) {
    if (i > 0) s += i + 1 == sizeof...(Ts) ? " or " : ", ";
    s += names[i];
  }
  return s;
}

// Calls f(T{}) where T is the C++ type of `dtype`, which must be one of Ts; else throws an
// Error naming `op`. Use as
//   dispatch<float, double>(x.dtype(), "exp", [&](auto tag) { using T = decltype(tag); ... });
template <typename... Ts, typename F>
void dispatch(DType dtype, const char* op, F&& f) {
  const bool found = ((dtype == dtype_of<Ts>() ? (f(Ts{}), true) : false) || ...);
  if (!found) fail(op, ": unsupported dtype ", dtype, " (expected ", dtype_list<Ts...>(), ")");
}

template <typename F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  dispatch<float, double>(dtype, op, std::forward<F>(f));
}

// --- shape checks shared by the kernels (the rules live in core/op_checks.h) ---

// Throws unless every tensor is defined and has `out`'s shape.
inline void check_same_shape(const char* op, const Tensor& out,
                             std::initializer_list<Tensor> inputs) {
  tinyformer::check_same_shape(op, out, inputs, instance());
}

// --- the layout walk ---

// The layout walk starts from core's coalesce() (core/strided_layout.h), the same dim merging
// the CUDA backend's addressing uses.

// Calls row(offsets, len) for every run of the innermost dim that meets the row-major element
// range [begin, end): offsets[k] is operand k's element offset of the run's first element, and
// the run continues with stride layout.inner_stride(k) for len elements. N: the layout's number
// of operands. The rows of one plane (the two innermost dims) are stepped with the offsets in
// locals, so that a short row (a head's 16 floats) costs little more than its own loop; the dims
// outside the plane are stepped like an odometer.
template <std::size_t N, typename Row>
void for_each_row(const StridedLayout& layout, std::int64_t begin, std::int64_t end, Row&& row) {
  static_assert(N >= 1 && N <= StridedLayout::kMaxOperands);
  if (begin >= end) return;
  const std::size_t ndim = layout.sizes.size();
  const std::int64_t inner = layout.sizes.back();
  std::array<std::int64_t, N> at{}, inner_step{};
  for (std::size_t k = 0; k < N; ++k) inner_step[k] = layout.inner_stride(k);
  if (ndim == 1) {  // one run: no multi-index to set up (a short reduction calls this per item)
    for (std::size_t k = 0; k < N; ++k) at[k] = begin * inner_step[k];
    row(at.data(), end - begin);
    return;
  }
  const std::size_t plane_dim = ndim - 2;  // the dim whose steps move from row to row
  const std::int64_t rows = layout.sizes[plane_dim];
  std::array<std::int64_t, N> row_step{}, plane_start{};
  for (std::size_t k = 0; k < N; ++k) row_step[k] = layout.strides[k][plane_dim];
  // The multi-index of `begin`'s plane, each operand's offset of that plane, and the row and
  // position of `begin` in it.
  Shape index(plane_dim, 0);
  std::int64_t rest = begin / inner, pos = begin % inner;
  std::int64_t r = rest % rows;
  rest /= rows;
  for (std::size_t d = plane_dim; d-- > 0;) {
    index[d] = rest % layout.sizes[d];
    rest /= layout.sizes[d];
    for (std::size_t k = 0; k < N; ++k) plane_start[k] += index[d] * layout.strides[k][d];
  }
  for (std::int64_t done = begin; done < end;) {
    for (std::size_t k = 0; k < N; ++k) {
      at[k] = plane_start[k] + r * row_step[k] + pos * inner_step[k];
    }
    // The rows of this plane, the first one from pos on, the last one up to end.
    const std::int64_t stop = std::min(end, done - pos + (rows - r) * inner);
    if (pos > 0) {  // the rest of a row begun before
      const std::int64_t len = std::min(inner - pos, stop - done);
      row(at.data(), len);
      done += len;
      for (std::size_t k = 0; k < N; ++k) at[k] += row_step[k] - pos * inner_step[k];
      pos = 0;
    }
    for (; done + inner <= stop; done += inner) {  // whole rows
      row(at.data(), inner);
      for (std::size_t k = 0; k < N; ++k) at[k] += row_step[k];
    }
    if (done < stop) {  // the start of a row that ends after `end`
      row(at.data(), stop - done);
      done = stop;
    }
    r = 0;
    // Step the plane's multi-index like an odometer.
    for (std::size_t d = plane_dim; d-- > 0;) {
      ++index[d];
      for (std::size_t k = 0; k < N; ++k) plane_start[k] += layout.strides[k][d];
      if (index[d] < layout.sizes[d]) break;
      for (std::size_t k = 0; k < N; ++k) plane_start[k] -= layout.sizes[d] * layout.strides[k][d];
      index[d] = 0;
    }
  }
}

// --- map: out = f(in...) elementwise ---

namespace detail {

inline constexpr std::int64_t kBlock = 256;  // elements staged at a time (a few KiB of stack)
// A tile of a transposing walk: kTileCols columns keep as few cache lines of the transposed
// operand live at once (a power-of-two stride maps them all to a few cache sets), kTileRows rows
// use each of those lines whole before moving on.
inline constexpr std::int64_t kTileRows = 64, kTileCols = 16;

// The loop every map() ends in: out[i] = f(in_k[i]...) with unit strides, which the compiler
// vectorizes, except that the inputs marked in kConstant are constant along the row (a row's
// mask or scale, a scalar: stride 0 there), read once as in_k[0] (bit k: input k).
template <unsigned kConstant = 0, typename Out, typename... In, typename F>
inline void apply_row(F& f, Out* out, std::int64_t n, const In*... in) {
  if (n <= 0) return;
  const std::tuple<In...> first{*in...};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = f(((kConstant >> I) & 1u ? std::get<I>(first) : in[i])...);
    }
  }
  (std::index_sequence_for<In...>{});
}

// Calls g(std::integral_constant<unsigned, mask>) for the runtime `mask` < 2^N - 1: a pattern of
// constant inputs with at least one input that is not (all of them constant is a rare case,
// left to the staged loop rather than compiled once more for every op).
template <std::size_t N, typename G>
inline void with_mask(unsigned mask, G&& g) {
  [&]<unsigned... M>(std::integer_sequence<unsigned, M...>) {
    static_cast<void>(
        ((mask == M ? (g(std::integral_constant<unsigned, M>{}), true) : false) || ...));
  }
  (std::make_integer_sequence<unsigned, (1u << N) - 1>{});
}

// Reads one operand along a row in blocks: a unit-stride operand is used in place, a strided
// or broadcast one is first copied into a contiguous buffer (a broadcast one only once per row).
template <typename T>
struct RowReader {
  explicit RowReader(std::int64_t s) : stride(s) {}
  void start(const T* row) {
    ptr = row;
    filled = false;
  }
  const T* block(std::int64_t j, std::int64_t m) {
    if (stride == 1) return ptr + j;
    if (stride == 0) {
      // A row's first block is its longest: filling its m elements serves the later ones.
      if (!filled) std::fill(buffer, buffer + m, ptr[0]);
      filled = true;
    } else {
      for (std::int64_t i = 0; i < m; ++i) buffer[i] = ptr[(j + i) * stride];
    }
    return buffer;
  }

  const T* ptr = nullptr;
  std::int64_t stride;
  bool filled = false;
  alignas(64) T buffer[kBlock];
};

// out[i * out_stride] = f(in_k[i * stride_k]...) for i in [0, len).
template <typename Out, typename... In, typename F>
void map_row(F& f, std::int64_t len, Out* out, std::int64_t out_stride,
             std::tuple<RowReader<In>...>& readers) {
  alignas(64) Out staged[kBlock];
  for (std::int64_t j = 0; j < len; j += kBlock) {
    const std::int64_t m = std::min(kBlock, len - j);
    Out* dst = out_stride == 1 ? out + j : staged;
    std::apply([&](auto&... r) { apply_row(f, dst, m, r.block(j, m)...); }, readers);
    if (out_stride != 1) {
      for (std::int64_t i = 0; i < m; ++i) out[(j + i) * out_stride] = staged[i];
    }
  }
}

template <typename Out, typename... In, typename F, std::size_t... I>
void map_impl(F& f, const Tensor& out, const std::array<Tensor, sizeof...(In)>& in,
              std::int64_t cost, std::index_sequence<I...>) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  Out* o = static_cast<Out*>(out.data_ptr());
  const std::tuple<const In*...> p{static_cast<const In*>(in[I].data_ptr())...};
  const StridedLayout layout = coalesce(out.shape(), {&out.strides(), &in[I].strides()...});
  if (layout.contiguous()) {
    parallel_for(
        n,
        [&](std::int64_t begin, std::int64_t end) {
          apply_row(f, o + begin, end - begin, (std::get<I>(p) + begin)...);
        },
        1, cost);
    return;
  }
  if (layout.transposing()) {
    // Tiles over the last two dims, so the rows of a tile read the same cache lines of the
    // transposed operand while they are still in L1.
    const std::size_t nd = layout.sizes.size();
    const std::int64_t rows = layout.sizes[nd - 2], cols = layout.sizes[nd - 1];
    const std::int64_t row_tiles = (rows + kTileRows - 1) / kTileRows;
    const std::int64_t col_tiles = (cols + kTileCols - 1) / kTileCols;
    const auto row_step = [&](std::size_t k) { return layout.strides[k][nd - 2]; };
    parallel_for(
        n / (rows * cols) * row_tiles * col_tiles,
        [&](std::int64_t begin, std::int64_t end) {
          std::tuple<RowReader<In>...> readers{RowReader<In>(layout.inner_stride(I + 1))...};
          for (std::int64_t t = begin; t < end; ++t) {
            const std::int64_t plane = t / (row_tiles * col_tiles);
            const std::int64_t r0 = t / col_tiles % row_tiles * kTileRows;
            const std::int64_t c0 = t % col_tiles * kTileCols;
            const std::int64_t first = (plane * rows + r0) * cols + c0;
            const std::int64_t o_at = element_offset(layout, first, 0);
            [[maybe_unused]] const std::array<std::int64_t, sizeof...(In)> at{
                element_offset(layout, first, I + 1)...};
            for (std::int64_t r = 0; r < std::min(kTileRows, rows - r0); ++r) {
              (std::get<I>(readers).start(std::get<I>(p) + at[I] + r * row_step(I + 1)), ...);
              map_row(f, std::min(kTileCols, cols - c0), o + o_at + r * row_step(0),
                      layout.inner_stride(0), readers);
            }
          }
        },
        kTileRows * kTileCols, cost);
    return;
  }
  // Rows that every operand walks with unit stride (a permuted copy that keeps the last dim, a
  // bias add), or along which some inputs are constant (a mask or a scale per row, a scalar),
  // go straight to a vectorized loop that reads each constant input once per row.
  bool unit_rows = layout.inner_stride(0) == 1;
  unsigned constant = 0;  // bit k: input k has stride 0 along the rows
  for (std::size_t k = 0; k < sizeof...(In); ++k) {
    const std::int64_t stride = layout.inner_stride(k + 1);
    unit_rows = unit_rows && (stride == 1 || stride == 0);
    if (stride == 0) constant |= 1u << k;
  }
  if (unit_rows && constant != (1u << sizeof...(In)) - 1) {
    // One walk compiled per pattern of constant inputs, so that a short row (a head's 16 floats)
    // costs no choice of loop.
    with_mask<sizeof...(In)>(constant, [&](auto mask) {
      parallel_for(
          n,
          [&](std::int64_t begin, std::int64_t end) {
            for_each_row<sizeof...(In) + 1>(
                layout, begin, end, [&](const std::int64_t* at, std::int64_t len) {
                  apply_row<decltype(mask)::value>(f, o + at[0], len,
                                                   (std::get<I>(p) + at[I + 1])...);
                });
          },
          1, cost);
    });
    return;
  }
  parallel_for(
      n,
      [&](std::int64_t begin, std::int64_t end) {
        std::tuple<RowReader<In>...> readers{RowReader<In>(layout.inner_stride(I + 1))...};
        for_each_row<sizeof...(In) + 1>(
            layout, begin, end, [&](const std::int64_t* at, std::int64_t len) {
              (std::get<I>(readers).start(std::get<I>(p) + at[I + 1]), ...);
              map_row(f, len, o + at[0], layout.inner_stride(0), readers);
            });
      },
      1, cost);
}

}  // namespace detail

// out = f(in[0][i], in[1][i], ...) for every element i; the element types are given
// explicitly and must match the tensors' dtypes (the caller dispatches first):
//   map<float, float, float>(out, {a, b}, [](float x, float y) { return x + y; });
// Every tensor has out's shape (broadcast inputs arrive as stride-0 views). f must not throw.
// cost: f's time per element in streaming elements (parallel.h), for the choice of threads.
template <typename Out, typename... In, typename F>
void map(const Tensor& out, const std::array<Tensor, sizeof...(In)>& in, F f,
         std::int64_t cost = 1) {
  detail::map_impl<Out, In...>(f, out, in, cost, std::index_sequence_for<In...>{});
}

}  // namespace tinyformer::cpu
