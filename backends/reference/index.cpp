// Row gathers and scatters.
//   index_select: out[i, :] = table[indices[i], :]         table: [V, D], out: [N, D]
//   index_add:    out[indices[i], :] += src[i, :]          src: [N, D], out: [V, D]
// indices: [N] int64; an index outside [0, V) throws, naming its position. A repeated index
// adds every one of its rows.
#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::index_select(const Tensor& table, const Tensor& indices, const Tensor& out) {
  check_index_select_args(table, indices, out, *this);
  check_index_values_in_host_memory("index_select", indices, table.size(0));
  const std::int64_t n = indices.size(0), d = table.size(1);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = get_int(indices, i);
    for (std::int64_t j = 0; j < d; ++j) {
      if (table.dtype() == DType::int64) {
        store_int(out, position(out, {i, j}), load_int(table, position(table, {row, j})));
      } else {
        set_at(out, {i, j}, at(table, {row, j}));
      }
    }
  }
}

void ReferenceBackend::index_add(const Tensor& src, const Tensor& indices, const Tensor& out) {
  check_index_add_args(src, indices, out, *this);
  check_index_values_in_host_memory("index_add", indices, out.size(0));
  const std::int64_t n = indices.size(0), d = out.size(1);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = get_int(indices, i);
    for (std::int64_t j = 0; j < d; ++j) set_at(out, {row, j}, at(out, {row, j}) + at(src, {i, j}));
  }
}

}  // namespace tinyformer::reference
