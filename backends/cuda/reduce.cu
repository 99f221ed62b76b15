// Reductions on the GPU: sum, mean, max and min over a set of dims, and max_dim (values and
// indices along one dim), with the CPU's semantics: float32 sums accumulate in double (bfloat16
// in float), int64 sums wrap around, max and min propagate NaN, max_dim returns the first
// maximum (a NaN counts as the maximum).
//
// x is seen as a matrix [n_out, n_red]: output o (row-major over out's keepdim shape) reduces
// the elements x[kept(o) + red(r)], r < n_red, where kept and red are x's strides over the kept
// and the reduced dims (the reduced dims ordered by stride, the smallest innermost, so that a
// transposed tensor reduces as contiguously as the original). Two kernels cover every case:
//  - rows: a warp (or, for long rows, a block) per output. When the reduced elements are one
//    contiguous run (x.sum(-1), the mean of layer statistics) it reads them as 16-byte vectors.
//  - columns: when the kept dims are the contiguous ones (x.sum(0) of [N, D], a bias gradient),
//    the 32 lanes of a warp take 32 neighbouring outputs, so each load instruction reads 32
//    neighbouring elements, and 8 warps split the reduced range.
// With few outputs and a long reduction, the reduced range is cut into chunks whose partial
// results are combined in order by a second kernel. The cut depends only on the shapes, so the
// results are the same on every run and every GPU.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/strided.cuh"
#include "core/math.h"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

constexpr std::int64_t kLongRow = 4096;       // from this many elements a row gets a whole block
constexpr std::int64_t kRowChunk = 4096;      // the fewest elements per block of a split row
constexpr std::int64_t kColumnChunk = 256;    // the fewest rows per block of a split column tile
constexpr std::int64_t kTargetBlocks = 1024;  // enough blocks to fill a GPU several times over
constexpr int kColumns = 32;                  // outputs per column block (its x dimension)
constexpr int kColumnRows = 8;                // warps per column block (its y dimension)

// --- the reductions: accumulator type, identity, step (one more value), combine ---

// float32 and float64 sum in double, bfloat16 in float, int64 in int64 (wrapping around).
template <typename T>
struct SumOp {
  using Acc = std::conditional_t<std::is_same_v<T, bf16>, float,
                                 std::conditional_t<std::is_integral_v<T>, std::int64_t, double>>;
  __device__ static Acc identity() { return Acc(0); }
  __device__ static Acc combine(Acc a, Acc b) {
    if constexpr (std::is_integral_v<Acc>) {
      return static_cast<Acc>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
    } else {
      return a + b;
    }
  }
  __device__ static Acc step(Acc acc, T v) { return combine(acc, static_cast<Acc>(to_acc(v))); }
};

// max (kMax) and min; once a NaN is seen it stays.
template <typename T, bool kMax>
struct ExtremumOp {
  using Acc = acc_t<T>;
  __device__ static Acc identity() {
    if constexpr (std::is_floating_point_v<Acc>) {
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    } else {
      return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
    }
  }
  __device__ static Acc combine(Acc acc, Acc v) {
    return (kMax ? v > acc : v < acc) || math::is_nan(v) ? v : acc;
  }
  __device__ static Acc step(Acc acc, T v) { return combine(acc, to_acc(v)); }
};

// --- the layout of one reduction ---

// x as [n_out, n_red] (see the top of the file), out's addressing, and how the reduced range is
// cut: `splits` chunks of `chunk` elements (one chunk unless the reduction is split).
struct ReduceLayout {
  StridedIndex kept;  // x's offset of output o's first element
  StridedIndex red;   // x's offset of reduced element r from there
  StridedIndex out;   // out's offset of output o
  std::int64_t n_out = 0, n_red = 0;
  std::int64_t splits = 1, chunk = 0;
  bool narrow = true;  // every index fits in 32 bits (see offset_of)
  bool mean = false;   // divide the sum by n_red
};

// Dims of `index` that are one run of unit stride (the innermost dim has stride 1).
bool unit_inner(const StridedIndex& index) {
  return index.dims > 0 && index.strides[index.dims - 1] == 1;
}

// --- group reductions (combine is exact for max and min, ordered for sums) ---

template <typename Op, typename A>
__device__ inline A warp_reduce(A v) {
  for (int s = 16; s > 0; s >>= 1) v = Op::combine(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}

// The reduction of v over the block, valid in thread 0. Every thread of the block must call it.
template <typename Op, typename A>
__device__ inline A block_reduce(A v, A* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce<Op>(v);
  __syncthreads();  // scratch may still be read by the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : Op::identity();
    v = warp_reduce<Op>(v);
  }
  return v;
}

// The value written for a finished accumulator.
template <typename Op, typename T>
__device__ inline T finish(typename Op::Acc acc, const ReduceLayout& l) {
  using Acc = typename Op::Acc;
  if constexpr (std::is_floating_point_v<Acc>) {
    if (l.mean) return from_acc<T>(acc / static_cast<Acc>(l.n_red));
  }
  return from_acc<T>(acc);
}

// Writes output o, or the partial result of work item `item` when the reduction is split.
template <typename Op, typename T>
__device__ inline void store(typename Op::Acc acc, std::int64_t o, std::int64_t item, T* out,
                             typename Op::Acc* partial, const ReduceLayout& l) {
  if (l.splits == 1) {
    out[offset_of(l.out, o, l.narrow)] = finish<Op, T>(acc, l);
  } else {
    partial[item] = acc;
  }
}

// --- rows: a group of `group` threads (a warp or the block) per output and chunk ---

// Thread t of the group reduces its share of row elements [r0, r1) (row: output o's first
// element). A contiguous run is read as aligned 16-byte vectors after a scalar head.
template <typename Op, typename T>
__device__ typename Op::Acc reduce_row_share(const T* row, const ReduceLayout& l, std::int64_t r0,
                                             std::int64_t r1, int t, int group) {
  typename Op::Acc acc = Op::identity();
  if (l.red.dims == 1 && l.red.strides[0] == 1) {
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    const T* p = row + r0;
    const std::int64_t len = r1 - r0;
    const auto misaligned = static_cast<int>(reinterpret_cast<std::uintptr_t>(p) / sizeof(T) % V);
    const std::int64_t head = misaligned == 0 ? 0 : std::min<std::int64_t>(V - misaligned, len);
    if (t < head) acc = Op::step(acc, p[t]);
    const std::int64_t vectors = (len - head) / V;
    const auto* body = reinterpret_cast<const Vec<T, V>*>(p + head);
    for (std::int64_t v = t; v < vectors; v += group) {
      const Vec<T, V> values = body[v];
#pragma unroll
      for (int k = 0; k < V; ++k) acc = Op::step(acc, values.v[k]);
    }
    for (std::int64_t i = head + vectors * V + t; i < len; i += group) acc = Op::step(acc, p[i]);
  } else {
    for (std::int64_t r = r0 + t; r < r1; r += group) {
      acc = Op::step(acc, row[offset_of(l.red, r, l.narrow)]);
    }
  }
  return acc;
}

// Work item = (output o, chunk s), item = o * splits + s. group is 32 or blockDim.x; every
// thread of a group walks the same items, so the group's shuffles and barriers see all of it.
template <typename Op, typename T>
__global__ void reduce_rows_kernel(const T* x, T* out, typename Op::Acc* partial, ReduceLayout l,
                                   int group) {
  using Acc = typename Op::Acc;
  __shared__ Acc scratch[32];
  const int t = static_cast<int>(threadIdx.x) % group;
  const std::int64_t groups_per_block = blockDim.x / group;
  const std::int64_t items = l.n_out * l.splits;
  for (std::int64_t item = blockIdx.x * groups_per_block + threadIdx.x / group; item < items;
       item += gridDim.x * groups_per_block) {
    const std::int64_t o = item / l.splits, r0 = item % l.splits * l.chunk;
    const std::int64_t r1 = std::min(l.n_red, r0 + l.chunk);
    Acc acc = reduce_row_share<Op>(x + offset_of(l.kept, o, l.narrow), l, r0, r1, t, group);
    acc = group == 32 ? warp_reduce<Op>(acc) : block_reduce<Op>(acc, scratch);
    if (t == 0) store<Op>(acc, o, item, out, partial, l);
  }
}

// --- columns: block [kColumns, kColumnRows], one output per lane ---

// Work item = (tile of kColumns outputs, chunk s). Thread (c, w) reduces output
// tile * kColumns + c over rows r0 + w, r0 + w + kColumnRows, ... of the chunk; the warps'
// results are combined in order through shared memory.
template <typename Op, typename T>
__global__ void reduce_columns_kernel(const T* x, T* out, typename Op::Acc* partial,
                                      ReduceLayout l) {
  using Acc = typename Op::Acc;
  __shared__ Acc tile[kColumnRows][kColumns];
  const int c = threadIdx.x, w = threadIdx.y;
  const std::int64_t tiles = (l.n_out + kColumns - 1) / kColumns;
  for (std::int64_t item = blockIdx.x; item < tiles * l.splits; item += gridDim.x) {
    const std::int64_t o = item / l.splits * kColumns + c, s = item % l.splits;
    const std::int64_t r0 = s * l.chunk, r1 = std::min(l.n_red, r0 + l.chunk);
    Acc acc = Op::identity();
    if (o < l.n_out) {
      const T* p = x + offset_of(l.kept, o, l.narrow);
      for (std::int64_t r = r0 + w; r < r1; r += kColumnRows) {
        acc = Op::step(acc, p[offset_of(l.red, r, l.narrow)]);
      }
    }
    tile[w][c] = acc;
    __syncthreads();
    if (w == 0 && o < l.n_out) {
      for (int k = 1; k < kColumnRows; ++k) acc = Op::combine(acc, tile[k][c]);
      store<Op>(acc, o, o * l.splits + s, out, partial, l);
    }
    __syncthreads();  // the tile is rewritten by the next item
  }
}

// partial: [n_out, splits]; combines each output's chunks in order and writes it.
template <typename Op, typename T>
__global__ void combine_partials_kernel(const typename Op::Acc* partial, T* out, ReduceLayout l) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       o < l.n_out; o += step) {
    typename Op::Acc acc = partial[o * l.splits];
    for (std::int64_t s = 1; s < l.splits; ++s) acc = Op::combine(acc, partial[o * l.splits + s]);
    out[offset_of(l.out, o, l.narrow)] = finish<Op, T>(acc, l);
  }
}

// Cuts the reduced range into at most `wanted` chunks of at least `min_chunk` elements.
void split(ReduceLayout& l, std::int64_t wanted, std::int64_t min_chunk) {
  const std::int64_t splits =
      std::max<std::int64_t>(1, std::min(wanted, l.n_red / std::max<std::int64_t>(1, min_chunk)));
  l.chunk = (l.n_red + splits - 1) / splits;
  l.splits = (l.n_red + l.chunk - 1) / l.chunk;  // no empty chunk
}

template <typename Op, typename T>
void run_reduction(const char* name, const Tensor& x, const Tensor& out, ReduceLayout l) {
  using Acc = typename Op::Acc;
  const bool columns = l.n_red == 1 || (!unit_inner(l.red) && unit_inner(l.kept) &&
                                        l.kept.sizes[l.kept.dims - 1] >= kColumns / 2);
  const std::int64_t tiles = (l.n_out + kColumns - 1) / kColumns;
  const int group = l.n_red >= kLongRow ? kBlock : 32;
  l.chunk = l.n_red;
  if (columns && tiles < kTargetBlocks / 2) {
    split(l, (kTargetBlocks + tiles - 1) / tiles, kColumnChunk);
  } else if (!columns && group == kBlock && l.n_out < kTargetBlocks / 2) {
    split(l, (kTargetBlocks + l.n_out - 1) / l.n_out, kRowChunk);
  }
  Tensor partial;  // [n_out, splits] accumulators of a split reduction
  if (l.splits > 1) {
    partial = empty({l.n_out * l.splits}, {.dtype = device_dtype_of<Acc>(), .device = x.device()});
  }
  const T* px = device_data<const T>(x);
  T* po = device_data<T>(out);
  Acc* pp = l.splits > 1 ? device_data<Acc>(partial) : nullptr;
  if (columns) {
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(tiles * l.splits, 65536));
    reduce_columns_kernel<Op><<<blocks, dim3(kColumns, kColumnRows), 0, stream()>>>(px, po, pp, l);
  } else {
    reduce_rows_kernel<Op>
        <<<grid_for(l.n_out * l.splits * group), kBlock, 0, stream()>>>(px, po, pp, l, group);
  }
  TF_CUDA_CHECK_LAUNCH(name);
  if (l.splits > 1) {
    combine_partials_kernel<Op><<<grid_for(l.n_out), kBlock, 0, stream()>>>(pp, po, l);
    TF_CUDA_CHECK_LAUNCH(name);
  }
}

// --- max_dim ---

// x's offset of output o's first element, the step and count along the reduced dim, and the
// addressing of values and indices.
struct MaxDimLayout {
  StridedIndex kept, values, indices;
  std::int64_t n_out = 0, n = 0, step = 0;
  bool narrow = true;
};

// Candidate (b, a) beats (best, arg) in the order of max_dim: a NaN above every number, then
// the larger value, then (on ties) the smaller index. arg < 0 marks "no candidate yet".
template <typename A>
__device__ inline bool beats(A b, std::int64_t a, A best, std::int64_t arg) {
  if (a < 0) return false;
  if (arg < 0) return true;
  const bool nan_b = math::is_nan(b), nan_best = math::is_nan(best);
  if (nan_b || nan_best) return nan_b && (!nan_best || a < arg);
  return b > best || (b == best && a < arg);
}

// A warp per output: lane k scans elements k, k + 32, ... (keeping the first maximum of its
// share), then the lanes' candidates meet in a butterfly under the order of beats().
template <typename T>
__global__ void max_dim_rows_kernel(const T* x, T* values, std::int64_t* indices, MaxDimLayout l) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const std::int64_t warps_per_block = blockDim.x / 32;
  for (std::int64_t o = blockIdx.x * warps_per_block + threadIdx.x / 32; o < l.n_out;
       o += gridDim.x * warps_per_block) {
    const T* p = x + offset_of(l.kept, o, l.narrow);
    A best = A(0);
    std::int64_t arg = -1;
    for (std::int64_t i = lane; i < l.n && !math::is_nan(best); i += 32) {
      const A v = to_acc(p[i * l.step]);
      if (arg < 0 || v > best || math::is_nan(v)) {
        best = v;
        arg = i;
      }
    }
    for (int s = 16; s > 0; s >>= 1) {
      const A b = __shfl_xor_sync(0xffffffffu, best, s);
      const std::int64_t a = __shfl_xor_sync(0xffffffffu, arg, s);
      if (beats(b, a, best, arg)) {
        best = b;
        arg = a;
      }
    }
    if (lane == 0) {
      values[offset_of(l.values, o, l.narrow)] = from_acc<T>(best);
      indices[offset_of(l.indices, o, l.narrow)] = arg;
    }
  }
}

// A thread per output, scanning in order as the CPU does: used when neighbouring outputs are
// neighbours in memory, so a warp's loads are coalesced.
template <typename T>
__global__ void max_dim_columns_kernel(const T* x, T* values, std::int64_t* indices,
                                       MaxDimLayout l) {
  using A = acc_t<T>;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       o < l.n_out; o += step) {
    const T* p = x + offset_of(l.kept, o, l.narrow);
    A best = to_acc(p[0]);
    std::int64_t arg = 0;
    for (std::int64_t i = 1; i < l.n && !math::is_nan(best); ++i) {
      const A v = to_acc(p[i * l.step]);
      if (v > best || math::is_nan(v)) {
        best = v;
        arg = i;
      }
    }
    values[offset_of(l.values, o, l.narrow)] = from_acc<T>(best);
    indices[offset_of(l.indices, o, l.narrow)] = arg;
  }
}

}  // namespace

// x: any shape and strides; out: x's shape with every dim in `dims` set to 1.
void CudaBackend::reduce(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& out) {
  const char* name = reduce_name(op);
  const std::vector<bool> reduced = check_reduce_args(op, x, dims, out, *this);
  if (out.numel() == 0) return;
  if (x.numel() == 0) {  // an empty reduced dim: the sum of nothing is 0, the mean NaN
    fill(out, op == ReduceOp::sum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    return;
  }

  ReduceLayout l;
  l.kept = strided_index(out.shape(), x.strides(), name);
  // The reduced dims, the one with the largest stride outermost.
  std::vector<std::int64_t> red_dims;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    if (reduced[static_cast<std::size_t>(d)]) red_dims.push_back(d);
  }
  std::stable_sort(red_dims.begin(), red_dims.end(), [&](std::int64_t a, std::int64_t b) {
    return std::abs(x.stride(a)) > std::abs(x.stride(b));
  });
  Shape red_sizes, red_strides;
  for (std::int64_t d : red_dims) {
    red_sizes.push_back(x.size(d));
    red_strides.push_back(x.stride(d));
  }
  l.red = strided_index(red_sizes, red_strides, name);
  l.out = strided_index(out, name);
  l.n_out = out.numel();
  l.n_red = x.numel() / l.n_out;
  l.narrow = fits_32_bits(std::max(l.n_out, l.n_red));
  l.mean = op == ReduceOp::mean;

  dispatch<float, double, bf16, std::int64_t>(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean:
        return run_reduction<SumOp<T>, T>(name, x, out, l);
      case ReduceOp::max:
        return run_reduction<ExtremumOp<T, true>, T>(name, x, out, l);
      case ReduceOp::min:
        return run_reduction<ExtremumOp<T, false>, T>(name, x, out, l);
    }
  });
}

// x: any shape; values (x's dtype), indices (int64): x's shape with `dim` set to 1. The first
// maximum wins ties; a NaN counts as the maximum (the first NaN wins).
void CudaBackend::max_dim(const Tensor& x, std::int64_t dim, const Tensor& values,
                          const Tensor& indices) {
  const std::int64_t d = check_max_dim_args(x, dim, values, indices, *this);
  Shape kept_shape = x.shape();
  if (x.dim() > 0) kept_shape[static_cast<std::size_t>(d)] = 1;
  if (values.numel() == 0) return;
  MaxDimLayout l;
  l.n = x.dim() > 0 ? x.size(d) : 1;
  l.step = x.dim() > 0 ? x.stride(d) : 0;
  TF_CHECK(l.n > 0, "max_dim: cannot take the maximum over an empty dim of shape ",
           shape_str(x.shape()));
  l.kept = strided_index(kept_shape, x.strides(), "max_dim");
  l.values = strided_index(values, "max_dim");
  l.indices = strided_index(indices, "max_dim");
  l.n_out = values.numel();
  l.narrow = fits_32_bits(std::max(l.n_out, l.n));
  // A thread per output when neighbouring outputs are neighbours in x and there are enough of
  // them to fill the GPU; a warp per output otherwise (the usual argmax over the last dim).
  const bool columns = l.step != 1 && unit_inner(l.kept) && l.n_out >= 1024;
  dispatch<float, double, bf16, std::int64_t>(x.dtype(), "max_dim", [&](auto tag) {
    using T = decltype(tag);
    const T* px = device_data<const T>(x);
    T* pv = device_data<T>(values);
    auto* pi = device_data<std::int64_t>(indices);
    if (columns) {
      max_dim_columns_kernel<<<grid_for(l.n_out), kBlock, 0, stream()>>>(px, pv, pi, l);
    } else {
      max_dim_rows_kernel<<<grid_for(l.n_out * 32), kBlock, 0, stream()>>>(px, pv, pi, l);
    }
    TF_CUDA_CHECK_LAUNCH("max_dim");
  });
}

}  // namespace tinyformer::cuda
