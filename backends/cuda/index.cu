// Row gather and scatter-add on the GPU: index_select reads embedding rows, index_add adds
// gradient rows back into a table.
//
// Both ops synchronise with the device once: the indices are checked on the GPU first and the
// host waits for the verdict, so that a bad index throws an Error naming its position (as on the
// CPU) before any kernel reads or writes through it.
//
// index_add is deterministic. Float atomics would add colliding rows (repeated tokens) in
// whatever order threads arrive, so an embedding's gradient, and all training after it, would
// change from run to run. Instead the positions are sorted by destination row (a stable radix
// sort) and one thread sums each destination element over its run, in increasing position: the
// CPU's order, so float32 and float64 results equal the CPU's bit for bit.
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/strided.cuh"
#include "core/op_checks.h"

namespace tinyformer::cuda {

namespace {

// Records in *first_bad the smallest position whose index lies outside [0, rows). *first_bad
// starts at the largest unsigned value (no bad position).
// idx: [N] int64 with stride `is`
__global__ void find_bad_index_kernel(const std::int64_t* idx, std::int64_t is, std::int64_t n,
                                      std::int64_t rows, unsigned long long* first_bad) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t v = idx[i * is];
    if (v < 0 || v >= rows) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// --- index_select ---

// out[i, :] = table[idx[i], :] for rows whose elements are adjacent in memory, moved as units U
// of 1 to 16 bytes (uint4: one 16-byte load and store per thread). Strides count units.
// table: [V, width] (row stride ts); idx: [N] (stride is); out: [N, width] (row stride os)
template <typename U>
__global__ void gather_rows_kernel(const U* table, std::int64_t ts, const std::int64_t* idx,
                                   std::int64_t is, U* out, std::int64_t os, std::int64_t n,
                                   std::int64_t width) {
  const std::int64_t total = n * width;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / width, u = e - i * width;
    out[i * os + u] = table[idx[i * is] * ts + u];
  }
}

// The same for any strides, element by element; E is an unsigned integer of the element's size
// (a gather copies bytes, whatever the dtype).
// table: [V, D] (strides ts0, ts1); idx: [N] (stride is); out: [N, D] (strides os0, os1)
template <typename E>
__global__ void gather_strided_kernel(const E* table, std::int64_t ts0, std::int64_t ts1,
                                      const std::int64_t* idx, std::int64_t is, E* out,
                                      std::int64_t os0, std::int64_t os1, std::int64_t n,
                                      std::int64_t d) {
  const std::int64_t total = n * d;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / d, j = e - i * d;
    out[i * os0 + j * os1] = table[idx[i * is] * ts0 + j * ts1];
  }
}

// Calls f(U{}) with U an unsigned type of `bytes` bytes (1, 2, 4, 8 or 16).
template <typename F>
void with_unit(std::int64_t bytes, F&& f) {
  switch (bytes) {
    case 16:
      f(uint4{});
      break;
    case 8:
      f(std::uint64_t{});
      break;
    case 4:
      f(std::uint32_t{});
      break;
    case 2:
      f(std::uint16_t{});
      break;
    default:
      f(std::uint8_t{});
      break;
  }
}

// --- index_add ---

// The sort's input: keys[i] = idx[i] (checked to be in range, so non-negative), positions[i] = i.
__global__ void sort_input_kernel(const std::int64_t* idx, std::int64_t is, std::int64_t n,
                                  unsigned long long* keys, std::int64_t* positions) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    keys[i] = static_cast<unsigned long long>(idx[i * is]);
    positions[i] = i;
  }
}

// After the sort, equal keys form runs. run_end[row] = one past the last sorted position whose
// key is `row` (written by that position alone; rows no index names are never read).
// keys: [N] sorted; run_end: [V]
__global__ void mark_run_ends_kernel(const unsigned long long* keys, std::int64_t n,
                                     std::int64_t* run_end) {
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (j == n - 1 || keys[j + 1] != keys[j]) run_end[keys[j]] = j + 1;
  }
}

// out[row, c] += src[positions[j], c] for every j of row's run, in increasing j (the stable
// sort kept positions increasing within a run). Element (j, c) works only when j starts a run:
// one thread per destination element, so no two threads write the same place. bfloat16 sums in
// float32 and rounds once.
// src: [N, D] (strides ss0, ss1); keys, positions: [N] sorted; run_end: [V]; out: [V, D]
template <typename T>
__global__ void add_runs_kernel(const T* src, std::int64_t ss0, std::int64_t ss1,
                                const unsigned long long* keys, const std::int64_t* positions,
                                const std::int64_t* run_end, T* out, std::int64_t n,
                                std::int64_t d) {
  using A = acc_t<T>;
  const std::int64_t total = n * d;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t j = e / d, c = e - j * d;
    if (j > 0 && keys[j - 1] == keys[j]) continue;
    const auto row = static_cast<std::int64_t>(keys[j]);
    const std::int64_t end = run_end[row];
    T* dst = out + row * d + c;
    A acc = to_acc(*dst);
    // The bound is known up front, so the unrolled loads of a long run (a padding token) are in
    // flight together.
#pragma unroll 4
    for (std::int64_t k = j; k < end; ++k) acc += to_acc(src[positions[k] * ss0 + c * ss1]);
    *dst = from_acc<T>(acc);
  }
}

// --- checks ---

// Throws unless every index lies in [0, rows), naming the first bad one. Waits for the device
// (see the top of the file).
void check_index_range(const char* op, const Tensor& indices, std::int64_t rows) {
  const std::int64_t n = indices.size(0);
  if (n == 0) return;
  const Tensor flag = empty({1}, {.dtype = DType::int64, .device = indices.device()});
  auto* first_bad = static_cast<unsigned long long*>(flag.data_ptr());
  TF_CUDA_CHECK(op, cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), stream()));
  const std::int64_t* idx = device_data<std::int64_t>(indices);
  const std::int64_t is = indices.stride(0);
  find_bad_index_kernel<<<grid_for(n), kBlock, 0, stream()>>>(idx, is, n, rows, first_bad);
  TF_CUDA_CHECK_LAUNCH(op);
  unsigned long long position = 0;
  TF_CUDA_CHECK(op, cudaMemcpyAsync(&position, first_bad, sizeof(position), cudaMemcpyDeviceToHost,
                                    stream()));
  TF_CUDA_CHECK(op, cudaStreamSynchronize(stream()));
  if (position == ~0ull) return;
  const auto i = static_cast<std::int64_t>(position);
  std::int64_t v = 0;
  TF_CUDA_CHECK(op, cudaMemcpyAsync(&v, idx + i * is, sizeof(v), cudaMemcpyDeviceToHost, stream()));
  TF_CUDA_CHECK(op, cudaStreamSynchronize(stream()));
  fail_index_out_of_range(op, v, i, rows);
}

}  // namespace

// table: [V, D], indices: [N] int64, out: [N, D]; out[i, :] = table[indices[i], :].
void CudaBackend::index_select(const Tensor& table, const Tensor& indices, const Tensor& out) {
  const char* op = "index_select";
  check_index_select_args(table, indices, out, *this);
  const std::int64_t n = indices.size(0), d = table.size(1);
  check_index_range(op, indices, table.size(0));
  if (n == 0 || d == 0) return;
  const auto esize = static_cast<std::int64_t>(element_size(table.dtype()));
  const std::int64_t* idx = device_data<std::int64_t>(indices);
  const std::int64_t is = indices.stride(0);
  if (d == 1 || (table.stride(1) == 1 && out.stride(1) == 1)) {
    // Rows are runs of d * esize bytes: move them in the widest unit that divides both
    // addresses, the row length and both row strides.
    const auto bits = reinterpret_cast<std::uintptr_t>(table.data_ptr()) |
                      reinterpret_cast<std::uintptr_t>(out.data_ptr()) |
                      static_cast<std::uintptr_t>(d * esize) |
                      static_cast<std::uintptr_t>(table.stride(0) * esize) |
                      static_cast<std::uintptr_t>(out.stride(0) * esize);
    std::int64_t unit = 16;
    while (unit > 1 && bits % static_cast<std::uintptr_t>(unit) != 0) unit /= 2;
    with_unit(unit, [&](auto tag) {
      using U = decltype(tag);
      gather_rows_kernel<U><<<grid_for(n * (d * esize / unit)), kBlock, 0, stream()>>>(
          static_cast<const U*>(table.data_ptr()), table.stride(0) * esize / unit, idx, is,
          static_cast<U*>(out.data_ptr()), out.stride(0) * esize / unit, n, d * esize / unit);
    });
  } else {
    with_unit(esize, [&](auto tag) {
      using E = decltype(tag);
      gather_strided_kernel<E><<<grid_for(n * d), kBlock, 0, stream()>>>(
          static_cast<const E*>(table.data_ptr()), table.stride(0), table.stride(1), idx, is,
          static_cast<E*>(out.data_ptr()), out.stride(0), out.stride(1), n, d);
    });
  }
  TF_CUDA_CHECK_LAUNCH(op);
}

// src: [N, D], indices: [N] int64, out: [V, D] contiguous; out[indices[i], :] += src[i, :].
void CudaBackend::index_add(const Tensor& src, const Tensor& indices, const Tensor& out) {
  const char* op = "index_add";
  check_index_add_args(src, indices, out, *this);
  const std::int64_t n = indices.size(0), v = out.size(0), d = out.size(1);
  check_index_range(op, indices, v);
  if (n == 0 || d == 0) return;
  const TensorOptions longs{.dtype = DType::int64, .device = out.device()};
  const Tensor keys_in = empty({n}, longs), keys = empty({n}, longs);
  const Tensor positions_in = empty({n}, longs), positions = empty({n}, longs);
  const Tensor run_end = empty({v}, longs);
  auto* ki = static_cast<unsigned long long*>(keys_in.data_ptr());
  auto* ko = static_cast<unsigned long long*>(keys.data_ptr());
  auto* pi = device_data<std::int64_t>(positions_in);
  auto* po = device_data<std::int64_t>(positions);
  sort_input_kernel<<<grid_for(n), kBlock, 0, stream()>>>(device_data<std::int64_t>(indices),
                                                          indices.stride(0), n, ki, pi);
  TF_CUDA_CHECK_LAUNCH(op);

  // Keys lie in [0, v): sorting only their low bits saves radix passes.
  int key_bits = 1;
  while (key_bits < 64 && ((v - 1) >> key_bits) != 0) ++key_bits;
  std::size_t temp_bytes = 0;
  TF_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ki, ko, pi, po, n, 0,
                                                    key_bits, stream()));
  // The scratch bytes as int64s, at least one: a null pointer would make the call a size query.
  const Tensor temp = empty({static_cast<std::int64_t>(temp_bytes / 8 + 1)}, longs);
  TF_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, ki, ko, pi, po, n,
                                                    0, key_bits, stream()));

  mark_run_ends_kernel<<<grid_for(n), kBlock, 0, stream()>>>(ko, n,
                                                             device_data<std::int64_t>(run_end));
  TF_CUDA_CHECK_LAUNCH(op);
  dispatch_floating(src.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    add_runs_kernel<T><<<grid_for(n * d), kBlock, 0, stream()>>>(
        device_data<T>(src), src.stride(0), src.stride(1), ko, po,
        device_data<std::int64_t>(run_end), device_data<T>(out), n, d);
    TF_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace tinyformer::cuda
