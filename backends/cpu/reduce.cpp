// Reductions on the CPU: sum, mean, max and min over a set of dims, and max_dim (values and
// indices along one dim).
//
// After coalescing, x is seen as kept dims (one per output element) and reduced dims. Two loop
// orders cover the cases that matter:
//  - inner: the reduced elements of one output are read in order; when they are contiguous
//    (x.sum(-1)) the loop keeps 16 independent partial results, which the compiler vectorizes
//    and which also keep the rounding error of long float sums small;
//  - outer: when the kept dims are the contiguous ones (x.sum(0) of [N, D], a bias gradient),
//    each step adds a whole contiguous row into a tile of up to 256 accumulators, so memory is
//    read in order and the adds vectorize across outputs. Lines of up to 256 outputs (pooling
//    windows: 16) are walked by for_each_row, line after line, without per-item bookkeeping.
// float32 sums accumulate in double. With few outputs and a long reduction, the reduced range
// is cut into fixed blocks whose partial results are combined in order; the cut depends only on
// the shapes, never on the thread count, so results are the same on any number of threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"
#include "core/math.h"
#include "core/op_checks.h"

namespace tinyformer::cpu {

namespace {

constexpr std::int64_t kLanes = 16;          // independent partial results in an inner loop
constexpr std::int64_t kTile = 256;          // outputs per work item in the outer order
constexpr std::int64_t kBlockElems = 16384;  // elements per block of a split reduction
constexpr std::int64_t kFewItems = 32;       // fewer work items than this: split long ones

// Each reduction: its accumulator type, identity, step (acc with one more value) and combine
// (two partial results).
struct SumOp {
  template <typename T>
  using Acc = std::conditional_t<std::is_integral_v<T>, std::int64_t, double>;
  template <typename A>
  static A identity() {
    return A(0);
  }
  template <typename A, typename T>
  static A step(A acc, T v) {
    if constexpr (std::is_integral_v<A>) {  // wraps around instead of overflowing
      return static_cast<A>(static_cast<std::uint64_t>(acc) + static_cast<std::uint64_t>(v));
    } else {
      return acc + static_cast<A>(v);
    }
  }
  template <typename A>
  static A combine(A a, A b) {
    return step(a, b);
  }
};

// max and min propagate NaN: once a NaN is seen it stays.
template <bool kMax>
struct ExtremumOp {
  template <typename T>
  using Acc = T;
  template <typename A>
  static A identity() {
    if constexpr (std::is_floating_point_v<A>) {
      return kMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    } else {
      return kMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
    }
  }
  template <typename A, typename T>
  static A step(A acc, T v) {
    return (kMax ? v > acc : v < acc) || math::is_nan(v) ? v : acc;
  }
  template <typename A>
  static A combine(A a, A b) {
    return step(a, b);
  }
};

// Contiguous run p[0, n): kLanes interleaved partial results, then the tail.
template <typename Op, typename A, typename T>
A reduce_contiguous(const T* p, std::int64_t n) {
  A lanes[kLanes];
  for (A& l : lanes) l = Op::template identity<A>();
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    // Independent lanes: with `omp simd` the compiler vectorizes any Op, even a select.
#pragma omp simd
    for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] = Op::step(lanes[l], p[i + l]);
  }
  A acc = Op::template identity<A>();
  for (const A& l : lanes) acc = Op::combine(acc, l);
  for (; i < n; ++i) acc = Op::step(acc, p[i]);
  return acc;
}

// The offsets in x (operand 0) and out (operand 1) of output f of the kept layout, for f
// visited in increasing order, as a thread visits its items: a step within the innermost dim,
// or to the start of the next run of it, adds strides; any other jump (a thread's first item)
// computes the offsets from the index. A division per item would cost more than a short
// reduction's arithmetic (a 64-bit division is among the slowest integer instructions).
class KeptOffsets {
 public:
  explicit KeptOffsets(const StridedLayout& kept) : kept_(kept), index_(kept.sizes.size(), 0) {}

  void go_to(std::int64_t f) {
    const std::size_t last = index_.size() - 1;
    const std::int64_t delta = f - pos_;
    const Shape& sizes = kept_.sizes;
    const Shape& sx = kept_.strides[0];
    const Shape& so = kept_.strides[1];
    if (pos_ >= 0 && delta >= 0 && index_[last] + delta < sizes[last]) {
      index_[last] += delta;
      x += delta * sx[last];
      out += delta * so[last];
    } else if (pos_ >= 0 && delta > 0 && index_[last] + delta == sizes[last]) {
      x -= index_[last] * sx[last];
      out -= index_[last] * so[last];
      index_[last] = 0;
      for (std::size_t d = last; d-- > 0;) {  // an odometer over the outer dims
        ++index_[d];
        x += sx[d];
        out += so[d];
        if (index_[d] < sizes[d]) break;
        x -= sizes[d] * sx[d];
        out -= sizes[d] * so[d];
        index_[d] = 0;
      }
    } else {
      std::int64_t rest = f;
      x = 0;
      out = 0;
      for (std::size_t d = last + 1; d-- > 0;) {
        index_[d] = rest % sizes[d];
        rest /= sizes[d];
        x += index_[d] * sx[d];
        out += index_[d] * so[d];
      }
    }
    pos_ = f;
  }

  std::int64_t x = 0, out = 0;

 private:
  const StridedLayout& kept_;
  Shape index_;
  std::int64_t pos_ = -1;
};

// out: x's shape with the reduced dims set to 1.
template <typename T, typename Op>
class Reduction {
 public:
  using A = typename Op::template Acc<T>;

  Reduction(const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, bool mean)
      : x_(x.data<T>()), out_(out.data<T>()), mean_(mean) {
    // Split x's dims into kept (shared with out) and reduced ones, then coalesce each group.
    // The reduced dims may be visited in any order, so the one with the smallest stride goes
    // innermost: a transposed tensor then reduces as contiguously as the original.
    Shape kept_sizes, kept_x, kept_out, red_sizes, red_x;
    std::vector<std::int64_t> red_dims;
    for (std::int64_t d = 0; d < x.dim(); ++d) {
      if (reduced[d]) {
        red_dims.push_back(d);
      } else {
        kept_sizes.push_back(x.size(d));
        kept_x.push_back(x.stride(d));
        kept_out.push_back(out.stride(d));
      }
    }
    std::stable_sort(red_dims.begin(), red_dims.end(), [&](std::int64_t a, std::int64_t b) {
      return std::abs(x.stride(a)) > std::abs(x.stride(b));
    });
    for (std::int64_t d : red_dims) {
      red_sizes.push_back(x.size(d));
      red_x.push_back(x.stride(d));
    }
    kept_ = coalesce(kept_sizes, {&kept_x, &kept_out});
    red_ = coalesce(red_sizes, {&red_x});
    n_out_ = shape_numel(kept_sizes);
    n_red_ = shape_numel(red_sizes);
    // The outer order pays when the kept dims, not the reduced ones, are contiguous in x.
    outer_ = kept_.inner_stride(0) == 1 && kept_.inner_stride(1) == 1 &&
             red_.inner_stride(0) != 1 && n_red_ > 1;
  }

  void run() {
    // A line is a run of outputs handled together: kept_.sizes.back() contiguous outputs in the
    // outer order, one output in the inner order. Lines are cut into items of <= width outputs.
    const std::int64_t line = outer_ ? kept_.sizes.back() : 1;
    const std::int64_t width = std::min(line, kTile);
    const std::int64_t per_line = (line + width - 1) / width;
    const std::int64_t items = n_out_ / line * per_line;
    const bool split = items < kFewItems && n_red_ * width >= 2 * kBlockElems;
    const std::int64_t block = split ? std::max<std::int64_t>(1, kBlockElems / width) : n_red_;
    const std::int64_t blocks = (n_red_ + block - 1) / block;

    // Item i covers outputs [first, first + m) of the kept layout. (The tests for one part per
    // line and one block per item skip divisions, which cost more than a short item's work.)
    const auto item_range = [=](std::int64_t i) {
      if (per_line == 1) return std::pair{i * line, line};
      const std::int64_t part = i % per_line;
      return std::pair{i / per_line * line + part * width, std::min(width, line - part * width)};
    };
    if (outer_ && blocks == 1 && per_line == 1) {
      // Whole lines of outputs, one item each (Linformer's pooling windows: lines of a head's
      // 16 floats, 4 rows each): the kept layout walked line by line by for_each_row, without
      // the per-item bookkeeping of the loop below (whose items can be parts of lines or blocks).
      parallel_for(
          n_out_ / line,
          [&](std::int64_t begin, std::int64_t end) {
            A acc[kTile];
            for_each_row<2>(kept_, begin * line, end * line,
                            [&](const std::int64_t* at, std::int64_t len) {
                              accumulate(at[0], len, 0, n_red_, acc);
                              write(at[1], len, acc);
                            });
          },
          n_red_ * line);
      return;
    }
    std::vector<A> partial(blocks > 1 ? static_cast<std::size_t>(items * blocks * width) : 0);
    parallel_for(
        items * blocks,
        [&](std::int64_t begin, std::int64_t end) {
          A acc[kTile];
          KeptOffsets at(kept_);
          for (std::int64_t w = begin; w < end; ++w) {
            const std::int64_t i = blocks == 1 ? w : w / blocks, b = blocks == 1 ? 0 : w % blocks;
            const auto [first, m] = item_range(i);
            const std::int64_t r0 = b * block, r1 = std::min(n_red_, r0 + block);
            at.go_to(first);
            accumulate(at.x, m, r0, r1, acc);
            if (blocks == 1) {
              write(at.out, m, acc);
            } else {
              std::copy(acc, acc + m, partial.begin() + w * width);
            }
          }
        },
        block * width);
    if (blocks == 1) return;
    // Combine each item's blocks in order.
    parallel_for(
        items,
        [&](std::int64_t begin, std::int64_t end) {
          A acc[kTile];
          KeptOffsets at(kept_);
          for (std::int64_t i = begin; i < end; ++i) {
            const auto [first, m] = item_range(i);
            std::copy_n(partial.begin() + i * blocks * width, m, acc);
            for (std::int64_t b = 1; b < blocks; ++b) {
              const A* p = partial.data() + (i * blocks + b) * width;
              for (std::int64_t k = 0; k < m; ++k) acc[k] = Op::combine(acc[k], p[k]);
            }
            at.go_to(first);
            write(at.out, m, acc);
          }
        },
        blocks * width);
  }

 private:
  // acc[k], k < m: the reduction over reduced elements [r0, r1) of the output whose x offset
  // is base + k (outer order; m == 1 in the inner order).
  void accumulate(std::int64_t base, std::int64_t m, std::int64_t r0, std::int64_t r1,
                  A* acc) const {
    std::fill(acc, acc + m, Op::template identity<A>());
    const std::int64_t step = red_.inner_stride(0);
    for_each_row<1>(red_, r0, r1, [&](const std::int64_t* at, std::int64_t len) {
      const T* p = x_ + base + at[0];
      if (outer_) {
        for (std::int64_t j = 0; j < len; ++j, p += step) {
#pragma omp simd
          for (std::int64_t k = 0; k < m; ++k) acc[k] = Op::step(acc[k], p[k]);
        }
      } else if (step == 1) {
        acc[0] = Op::combine(acc[0], reduce_contiguous<Op, A>(p, len));
      } else {
        for (std::int64_t j = 0; j < len; ++j) acc[0] = Op::step(acc[0], p[j * step]);
      }
    });
  }

  // m outputs from out's element `offset` on (contiguous in out when m > 1).
  void write(std::int64_t offset, std::int64_t m, const A* acc) const {
    T* o = out_ + offset;
    for (std::int64_t k = 0; k < m; ++k) {
      if constexpr (std::is_floating_point_v<A>) {
        o[k] = static_cast<T>(mean_ ? acc[k] / static_cast<A>(n_red_) : acc[k]);
      } else {
        o[k] = static_cast<T>(acc[k]);
      }
    }
  }

  const T* x_;
  T* out_;
  bool mean_;
  StridedLayout kept_, red_;
  std::int64_t n_out_ = 0, n_red_ = 0;
  bool outer_ = false;
};

}  // namespace

// x: any shape and strides; out: x's shape with every dim in `dims` set to 1.
void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& out) {
  const char* name = reduce_name(op);
  const std::vector<bool> reduced = check_reduce_args(op, x, dims, out, *this);
  if (out.numel() == 0) return;
  if (x.numel() == 0) {  // an empty reduced dim: the sum of nothing is 0, the mean NaN
    fill(out, op == ReduceOp::sum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    return;
  }
  dispatch<float, double, std::int64_t>(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean:
        return Reduction<T, SumOp>(x, reduced, out, op == ReduceOp::mean).run();
      case ReduceOp::max:
        return Reduction<T, ExtremumOp<true>>(x, reduced, out, false).run();
      case ReduceOp::min:
        return Reduction<T, ExtremumOp<false>>(x, reduced, out, false).run();
    }
  });
}

// x: any shape; values (x's dtype), indices (int64): x's shape with `dim` set to 1. The first
// maximum wins ties; a NaN counts as the maximum (the first NaN wins).
void CpuBackend::max_dim(const Tensor& x, std::int64_t dim, const Tensor& values,
                         const Tensor& indices) {
  const std::int64_t d = check_max_dim_args(x, dim, values, indices, *this);
  Shape kept_shape = x.shape();
  if (x.dim() > 0) kept_shape[static_cast<std::size_t>(d)] = 1;
  if (values.numel() == 0) return;
  const std::int64_t n = x.dim() > 0 ? x.size(d) : 1, step = x.dim() > 0 ? x.stride(d) : 0;
  TF_CHECK(n > 0, "max_dim: cannot take the maximum over an empty dim of shape ",
           shape_str(x.shape()));
  dispatch<float, double, std::int64_t>(x.dtype(), "max_dim", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    std::int64_t* pi = indices.data<std::int64_t>();
    // The size-1 dim is dropped by coalescing: the layout walks the outputs.
    const StridedLayout kept =
        coalesce(kept_shape, {&x.strides(), &values.strides(), &indices.strides()});
    parallel_for(
        values.numel(),
        [&](std::int64_t begin, std::int64_t end) {
          for_each_row<3>(kept, begin, end, [&](const std::int64_t* at, std::int64_t len) {
            for (std::int64_t j = 0; j < len; ++j) {
              const T* p = px + at[0] + j * kept.inner_stride(0);
              T best = p[0];
              std::int64_t arg = 0;
              for (std::int64_t i = 1; i < n && !math::is_nan(best); ++i) {
                const T v = p[i * step];
                if (v > best || math::is_nan(v)) {
                  best = v;
                  arg = i;
                }
              }
              pv[at[1] + j * kept.inner_stride(1)] = best;
              pi[at[2] + j * kept.inner_stride(2)] = arg;
            }
          });
        },
        n);
  });
}

}  // namespace tinyformer::cpu
