// Memory and creation kernels on the GPU: fill, copy (with dtype conversion) and arange, with the
// conversion rules of backends/cpu/copy.cpp element for element.
//
// copy picks the cheapest of four paths: a cudaMemcpyAsync for a contiguous copy in one dtype;
// a vectorized kernel for a contiguous conversion; a shared-memory tiled kernel when the source
// is a transpose of its last two dims (the reads and the writes both coalesce); a StridedIndex
// kernel for everything else.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/strided.cuh"

namespace tinyformer::cuda {

namespace {

// --- conversions ---

// One element from From to To. Floating -> int64 truncates toward zero, with NaN becoming 0 and
// out-of-range values saturating (the plain cast is undefined); bool is v != 0; bfloat16 goes
// through float32 both ways (rounding to nearest even when written). Exactly the CPU's rules.
template <typename To, typename From>
__host__ __device__ inline To convert(From v) {
  if constexpr (std::is_same_v<From, bf16>) {
    return convert<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, bf16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    constexpr double limit = 9223372036854775808.0;  // 2^63
    if (v != v) return 0;                            // NaN
    if (v >= limit) return INT64_MAX;
    if (v < -limit) return INT64_MIN;
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// The dtypes copy and fill accept, in dispatch order.
template <typename F>
void dispatch_all(DType dtype, const char* op, F&& f) {
  dispatch<float, double, std::int64_t, bool, bf16>(dtype, op, static_cast<F&&>(f));
}

// --- fill ---

// out: [n] contiguous
template <typename T>
__global__ void fill_contiguous_kernel(T* __restrict__ out, std::int64_t n, T value) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    out[i] = value;
  }
}

// out: any view of n elements, addressed through `index`
template <typename T>
__global__ void fill_strided_kernel(T* out, StridedIndex index, std::int64_t n, T value) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    out[index.offset(i)] = value;
  }
}

// --- copy ---

// V elements loaded or stored as one access (8, 16 or 32 bytes for V = 4).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
constexpr int kVec = 4;

// dst, src: [n] contiguous, both aligned to whole Vec<..., kVec>; groups = n / kVec, and the
// n % kVec elements after the last group are done by the first threads of block 0.
template <typename D, typename S>
__global__ void convert_vec_kernel(D* __restrict__ dst, const S* __restrict__ src,
                                   std::int64_t groups, int tail) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto* in = reinterpret_cast<const Vec<S, kVec>*>(src);
  auto* out = reinterpret_cast<Vec<D, kVec>*>(dst);
  for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       g < groups; g += step) {
    const Vec<S, kVec> a = in[g];
    Vec<D, kVec> b;
#pragma unroll
    for (int j = 0; j < kVec; ++j) b.v[j] = convert<D>(a.v[j]);
    out[g] = b;
  }
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail) {
    const std::int64_t i = groups * kVec + threadIdx.x;
    dst[i] = convert<D>(src[i]);
  }
}

// dst[dst_index(i)] = src[src_index(i)] for the row-major index i of the shared shape; a side
// marked contiguous is addressed by i itself (skipping the divisions).
template <typename D, typename S, bool kDstContiguous, bool kSrcContiguous>
__global__ void copy_strided_kernel(D* dst, StridedIndex dst_index, const S* src,
                                    StridedIndex src_index, std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    const std::int64_t from = kSrcContiguous ? i : src_index.offset(i);
    const std::int64_t to = kDstContiguous ? i : dst_index.offset(i);
    dst[to] = convert<D>(src[from]);
  }
}

// A transposing copy into a contiguous dst. The source, after merging, is [planes..., R, C]
// with stride 1 along R and col_stride along C, so a warp walking dst's rows (along C) would
// touch a new memory segment of src at every element. Each block moves a 32 x 32 tile instead:
// it reads the tile with the threads of a warp along R (coalesced in src), parks it in shared
// memory, and writes it with the threads along C (coalesced in dst). The tile has 33 columns so
// that a warp reading a column of it hits 32 different banks.
constexpr int kTile = 32, kTileRows = 8;  // blocks of 32 x 8 threads, 4 elements each

// dst: [planes, R, C] contiguous; src plane p starts at outer.offset(p).
// grid: x over tiles of R, y over tiles of C, z over planes (grid-stride)
template <typename D, typename S>
__global__ void copy_transpose_kernel(D* __restrict__ dst, const S* __restrict__ src,
                                      StridedIndex outer, std::int64_t planes, std::int64_t rows,
                                      std::int64_t cols, std::int64_t col_stride) {
  __shared__ D tile[kTile][kTile + 1];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  // The plane loop runs the same number of times in every thread of the block, so each thread
  // reaches both barriers.
  for (std::int64_t p = blockIdx.z; p < planes; p += gridDim.z) {
    const S* s = src + (outer.dims > 0 ? outer.offset(p) : 0);
    D* d = dst + p * rows * cols;
    // tile[c - c0][r - r0] = src(r, c), threads of a warp along r.
#pragma unroll
    for (int k = 0; k < kTile; k += kTileRows) {
      const std::int64_t r = r0 + tx, c = c0 + ty + k;
      if (r < rows && c < cols) tile[ty + k][tx] = convert<D>(s[r + c * col_stride]);
    }
    __syncthreads();
    // dst(r, c) = tile[c - c0][r - r0], threads of a warp along c.
#pragma unroll
    for (int k = 0; k < kTile; k += kTileRows) {
      const std::int64_t r = r0 + ty + k, c = c0 + tx;
      if (r < rows && c < cols) d[r * cols + c] = tile[tx][ty + k];
    }
    __syncthreads();  // the tile is refilled for the next plane
  }
}

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Copies with a conversion from S to D; src and dst have the same shape and n > 0 elements.
template <typename D, typename S>
void copy_typed(const Tensor& src, const Tensor& dst, std::int64_t n) {
  D* out = device_data<D>(dst);
  const S* in = device_data<S>(src);
  const bool dst_contiguous = dst.is_contiguous(), src_contiguous = src.is_contiguous();
  if (dst_contiguous && src_contiguous && aligned(out, sizeof(Vec<D, kVec>)) &&
      aligned(in, sizeof(Vec<S, kVec>))) {
    const std::int64_t groups = n / kVec;
    convert_vec_kernel<D, S>
        <<<grid_for(groups), kBlock, 0, stream()>>>(out, in, groups, static_cast<int>(n % kVec));
    TF_CUDA_CHECK_LAUNCH("copy");
    return;
  }
  const StridedIndex di = strided_index(dst, "copy"), si = strided_index(src, "copy");
  if (dst_contiguous && si.dims >= 2 && si.strides[si.dims - 2] == 1 &&
      si.strides[si.dims - 1] != 1) {
    const std::int64_t rows = si.sizes[si.dims - 2], cols = si.sizes[si.dims - 1];
    const std::int64_t row_tiles = (rows + kTile - 1) / kTile,
                       col_tiles = (cols + kTile - 1) / kTile;
    if (row_tiles <= 0x7fffffff && col_tiles <= 65535) {
      StridedIndex outer;
      outer.dims = si.dims - 2;
      for (int d = 0; d < outer.dims; ++d) {
        outer.sizes[d] = si.sizes[d];
        outer.strides[d] = si.strides[d];
      }
      const std::int64_t planes = n / (rows * cols);
      const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(col_tiles),
                      static_cast<unsigned>(planes < 65535 ? planes : 65535));
      copy_transpose_kernel<D, S><<<grid, dim3(kTile, kTileRows), 0, stream()>>>(
          out, in, outer, planes, rows, cols, si.strides[si.dims - 1]);
      TF_CUDA_CHECK_LAUNCH("copy");
      return;
    }
  }
  const unsigned grid = grid_for(n);
  if (dst_contiguous && src_contiguous) {  // contiguous but not aligned for vector access
    copy_strided_kernel<D, S, true, true><<<grid, kBlock, 0, stream()>>>(out, di, in, si, n);
  } else if (dst_contiguous) {
    copy_strided_kernel<D, S, true, false><<<grid, kBlock, 0, stream()>>>(out, di, in, si, n);
  } else if (src_contiguous) {
    copy_strided_kernel<D, S, false, true><<<grid, kBlock, 0, stream()>>>(out, di, in, si, n);
  } else {
    copy_strided_kernel<D, S, false, false><<<grid, kBlock, 0, stream()>>>(out, di, in, si, n);
  }
  TF_CUDA_CHECK_LAUNCH("copy");
}

// --- arange ---

// out: [n] contiguous; out[i] = start + i * step in double, as one fused multiply-add (the CPU
// writes std::fma too, so both compute the same double).
template <typename T>
__global__ void arange_kernel(T* __restrict__ out, std::int64_t n, double start, double step) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = convert<T>(fma(static_cast<double>(i), step, start));
  }
}

void check_on_gpu(const Tensor& t, const char* op, const char* what) {
  TF_CHECK(t.defined(), op, ": expected a defined ", what, ", got an undefined Tensor");
  TF_CHECK(t.device().is_cuda(), op, ": the CUDA backend got ", what, " on ", t.device());
}

}  // namespace

// out: any shape and strides, any dtype.
void CudaBackend::fill(const Tensor& out, double value) {
  check_on_gpu(out, "fill", "tensor");
  const std::int64_t n = out.numel();
  if (n == 0) return;
  dispatch_all(out.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    const T v = convert<T>(value);
    T* o = device_data<T>(out);
    if (out.is_contiguous()) {
      // All-zero bits (0, false, +0.0): a memset, which the driver runs at full bandwidth.
      unsigned char bytes[sizeof(T)];
      std::memcpy(bytes, &v, sizeof(T));
      bool zero = true;
      for (unsigned char b : bytes) zero = zero && b == 0;
      if (zero) {
        TF_CUDA_CHECK("fill",
                      cudaMemsetAsync(o, 0, static_cast<std::size_t>(n) * sizeof(T), stream()));
        return;
      }
      fill_contiguous_kernel<T><<<grid_for(n), kBlock, 0, stream()>>>(o, n, v);
    } else {
      fill_strided_kernel<T>
          <<<grid_for(n), kBlock, 0, stream()>>>(o, strided_index(out, "fill"), n, v);
    }
    TF_CUDA_CHECK_LAUNCH("fill");
  });
}

// src, dst: same shape, any strides, any dtypes (float32, float64, bfloat16, int64, bool).
void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  check_on_gpu(src, "copy", "src");
  check_on_gpu(dst, "copy", "dst");
  TF_CHECK(src.shape() == dst.shape(), "copy: expected equal shapes, got ", shape_str(src.shape()),
           " into ", shape_str(dst.shape()));
  const std::int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.data_ptr() == dst.data_ptr()) return;
    TF_CUDA_CHECK("copy", cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(),
                                          static_cast<std::size_t>(n) * element_size(src.dtype()),
                                          cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  dispatch_all(src.dtype(), "copy", [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_all(dst.dtype(), "copy", [&](auto dst_tag) {
      using D = decltype(dst_tag);
      copy_typed<D, S>(src, dst, n);
    });
  });
}

// out: [n] contiguous; float32, float64, bfloat16 or int64.
void CudaBackend::arange(const Tensor& out, double start, double step) {
  check_on_gpu(out, "arange", "output");
  TF_CHECK(out.dim() == 1 && out.is_contiguous(), "arange: expected a contiguous 1-d output, got ",
           shape_str(out.shape()));
  const std::int64_t n = out.numel();
  if (n == 0) return;
  dispatch<float, double, std::int64_t, bf16>(out.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<grid_for(n), kBlock, 0, stream()>>>(device_data<T>(out), n, start, step);
    TF_CUDA_CHECK_LAUNCH("arange");
  });
}

}  // namespace tinyformer::cuda
