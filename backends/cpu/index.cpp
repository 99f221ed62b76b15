// Row gather and scatter-add on the CPU: index_select reads embedding rows, index_add adds
// gradient rows back into a table. Indices are checked before any thread starts, so a bad one
// throws an Error instead of reading or writing outside the table.
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"

namespace tinyformer::cpu {

// table: [V, D], indices: [N] int64, out: [N, D]; out[i, :] = table[indices[i], :].
void CpuBackend::index_select(const Tensor& table, const Tensor& indices, const Tensor& out) {
  check_index_select_args(table, indices, out, *this);
  check_index_values_in_host_memory("index_select", indices, table.size(0));
  const std::int64_t n = indices.size(0), d = table.size(1);
  dispatch<float, double, std::int64_t, bool>(table.dtype(), "index_select", [&](auto tag) {
    using T = decltype(tag);
    const T* src = table.data<T>();
    T* dst = out.data<T>();
    const std::int64_t* idx = indices.data<std::int64_t>();
    const std::int64_t ts0 = table.stride(0), ts1 = table.stride(1);
    const std::int64_t os0 = out.stride(0), os1 = out.stride(1), is0 = indices.stride(0);
    parallel_for(
        n,
        [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) {
            const T* row = src + idx[i * is0] * ts0;
            T* o = dst + i * os0;
            if (ts1 == 1 && os1 == 1) {
              std::copy(row, row + d, o);
            } else {
              for (std::int64_t j = 0; j < d; ++j) o[j * os1] = row[j * ts1];
            }
          }
        },
        std::max<std::int64_t>(d, 1));
  });
}

// src: [N, D], indices: [N] int64, out: [V, D] contiguous; out[indices[i], :] += src[i, :].
//
// Repeated indices make rows of src collide, so threads never split the rows of src. Instead
// each task owns a block of columns and a range of destination rows, scans all N indices and
// adds the rows that land in its range. Every destination element thus receives its additions
// in increasing i on any number of threads: no races, and the same result bit for bit. Wide
// tables split by columns (blocks of >= 16 elements, whole cache lines), narrow ones by rows.
void CpuBackend::index_add(const Tensor& src, const Tensor& indices, const Tensor& out) {
  check_index_add_args(src, indices, out, *this);
  check_index_values_in_host_memory("index_add", indices, out.size(0));
  const std::int64_t n = indices.size(0), v = out.size(0), d = out.size(1);
  if (n == 0 || d == 0) return;
  dispatch_floating(src.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    const T* s = src.data<T>();
    T* o = out.data<T>();
    const std::int64_t* idx = indices.data<std::int64_t>();
    const std::int64_t ss0 = src.stride(0), ss1 = src.stride(1), is0 = indices.stride(0);

    const std::int64_t threads = pass_threads(n * d);
    const std::int64_t col_tasks = std::min(threads, (d + 15) / 16);
    const std::int64_t row_tasks = (threads + col_tasks - 1) / col_tasks;
    const std::int64_t cols = ((d + col_tasks - 1) / col_tasks + 15) / 16 * 16;
    const std::int64_t rows = (v + row_tasks - 1) / row_tasks;
    parallel_for(
        col_tasks * row_tasks,
        [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t task = begin; task < end; ++task) {
            const std::int64_t c0 = task % col_tasks * cols, c1 = std::min(d, c0 + cols);
            const std::int64_t r0 = task / col_tasks * rows, r1 = std::min(v, r0 + rows);
            for (std::int64_t i = 0; i < n; ++i) {
              const std::int64_t target = idx[i * is0];
              if (target < r0 || target >= r1) continue;
              T* dst = o + target * d;
              const T* row = s + i * ss0;
              if (ss1 == 1) {
                for (std::int64_t j = c0; j < c1; ++j) dst[j] += row[j];
              } else {
                for (std::int64_t j = c0; j < c1; ++j) dst[j] += row[j * ss1];
              }
            }
          }
        },
        2);
  });
}

}  // namespace tinyformer::cpu
