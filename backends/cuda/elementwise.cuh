// map(): the elementwise loop of the CUDA backend (out = f(in...) over tensors of one shape and
// any strides), shared by unary.cu and binary.cu, plus the argument checks of their entry points.
//
// Two kernels cover every layout:
//  - contiguous: every operand is contiguous, so element i of the view is element i of memory.
//    Each thread moves V elements per step as one aligned vector access per operand (16 bytes of
//    the widest operand: float4, 2 doubles, 8 bfloat16), which halves the instructions of a
//    memory-bound loop; the n % V tail goes one element per thread.
//  - strided: any views (transposed, sliced, broadcast with stride 0). Each operand maps the
//    row-major index i of the view to its own memory offset through its StridedIndex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>

#include "backends/cuda/strided.cuh"
#include "core/op_checks.h"

namespace tinyformer::cuda {

// --- argument checks of the elementwise and reduction entry points ---

// Throws unless every tensor is defined, lives on the GPU and has `out`'s shape.
inline void require_same_shape(const char* op, const Tensor& out,
                               std::initializer_list<Tensor> inputs) {
  check_same_shape(op, out, inputs, instance());
}

// --- strided addressing inside kernels ---

// The memory offset of row-major element i of a view. The outermost dim needs no division
// (i is below its size once the inner dims are divided out), so a 1-dim view costs a multiply.
// `narrow` says every index of the launch fits in 32 bits: 32-bit division is several times
// cheaper than 64-bit division on the GPU. It is the same for every thread, so the branch never
// diverges.
__device__ inline std::int64_t offset_of(const StridedIndex& index, std::int64_t i, bool narrow) {
  if (index.dims <= 1) return index.dims == 0 ? 0 : i * index.strides[0];
  std::int64_t off = 0;
  if (narrow) {
    auto j = static_cast<std::uint32_t>(i);
    for (int d = index.dims - 1; d > 0; --d) {
      const auto size = static_cast<std::uint32_t>(index.sizes[d]);
      const std::uint32_t q = j / size;
      off += static_cast<std::int64_t>(j - q * size) * index.strides[d];
      j = q;
    }
    return off + static_cast<std::int64_t>(j) * index.strides[0];
  }
  for (int d = index.dims - 1; d > 0; --d) {
    const std::int64_t q = i / index.sizes[d];
    off += (i - q * index.sizes[d]) * index.strides[d];
    i = q;
  }
  return off + i * index.strides[0];
}

// True when row-major indices below n fit the 32-bit path of offset_of.
inline bool fits_32_bits(std::int64_t n) {
  return n <= static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max());
}

// --- the elementwise kernels ---

// V elements of T read or written as one aligned access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// How many elements a thread moves per vector access: 16 bytes of the widest operand.
template <typename Out, typename... In>
constexpr int vector_width() {
  std::size_t widest = sizeof(Out);
  ((widest = sizeof(In) > widest ? sizeof(In) : widest), ...);
  return static_cast<int>(16 / widest);
}

template <int V, typename T>
bool is_aligned(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * V) == 0;
}

// The inputs arrive by value: each is copied out of memory as one vector load.
template <int V, typename F, typename Out, typename... In>
__device__ inline void apply_vector(const F& f, Vec<Out, V>* out, const Vec<In, V>... in) {
  Vec<Out, V> r;
#pragma unroll
  for (int k = 0; k < V; ++k) r.v[k] = f(in.v[k]...);
  *out = r;
}

// out[i] = f(in[i]...), i < n, every operand contiguous and (for V > 1) aligned to V elements.
template <int V, typename F, typename Out, typename... In>
__global__ void map_contiguous_kernel(F f, std::int64_t n, Out* out, const In*... in) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t vectors = n / V;
  for (std::int64_t v = first; v < vectors; v += step) {
    apply_vector<V>(f, reinterpret_cast<Vec<Out, V>*>(out) + v,
                    reinterpret_cast<const Vec<In, V>*>(in)[v]...);
  }
  for (std::int64_t i = vectors * V + first; i < n; i += step) out[i] = f(in[i]...);
}

// An input of the strided kernel: its element pointer and its addressing.
template <typename T>
struct Operand {
  const T* data;
  StridedIndex index;
};

// out[offset_out(i)] = f(in[offset_in(i)]...), i < n: views of any strides.
template <typename F, typename Out, typename... In>
__global__ void map_strided_kernel(F f, std::int64_t n, bool narrow, Out* out,
                                   StridedIndex out_index, Operand<In>... in) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    out[offset_of(out_index, i, narrow)] = f(in.data[offset_of(in.index, i, narrow)]...);
  }
}

template <typename Out, typename... In, typename F, std::size_t... I>
void map_impl(const char* op, const F& f, const Tensor& out,
              const std::array<Tensor, sizeof...(In)>& in, std::index_sequence<I...>) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  Out* o = device_data<Out>(out);
  const bool contiguous = out.is_contiguous() && (in[I].is_contiguous() && ...);
  if (contiguous) {
    constexpr int V = vector_width<Out, In...>();
    const bool aligned = is_aligned<V>(o) && (is_aligned<V>(device_data<const In>(in[I])) && ...);
    if (aligned) {
      map_contiguous_kernel<V><<<grid_for((n + V - 1) / V), kBlock, 0, stream()>>>(
          f, n, o, device_data<const In>(in[I])...);
    } else {
      map_contiguous_kernel<1>
          <<<grid_for(n), kBlock, 0, stream()>>>(f, n, o, device_data<const In>(in[I])...);
    }
  } else {
    map_strided_kernel<<<grid_for(n), kBlock, 0, stream()>>>(
        f, n, fits_32_bits(n), o, strided_index(out, op),
        Operand<In>{device_data<const In>(in[I]), strided_index(in[I], op)}...);
  }
  TF_CUDA_CHECK_LAUNCH(op);
}

// out = f(in[0][i], in[1][i], ...) for every element i, on stream(). The element types are
// given explicitly and must be the tensors' device types (the caller dispatches first):
//   map<float, float, float>("add", Add{}, out, {a, b});
// Every tensor has out's shape (broadcast inputs arrive as stride-0 views). f is a functor with
// a __device__ call operator (passed to the kernel by value).
template <typename Out, typename... In, typename F>
void map(const char* op, const F& f, const Tensor& out,
         const std::array<Tensor, sizeof...(In)>& in) {
  map_impl<Out, In...>(op, f, out, in, std::index_sequence_for<In...>{});
}

// Wraps an arithmetic functor so that it sees bfloat16 values as float (float32 and float64
// pass unchanged) and its result is rounded to Out.
template <typename Out, typename Fn>
struct Widened {
  Fn fn;
  template <typename... Ts>
  __device__ Out operator()(Ts... v) const {
    return from_acc<Out>(fn(to_acc(v)...));
  }
};

}  // namespace tinyformer::cuda
