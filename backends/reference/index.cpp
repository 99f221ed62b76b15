// Row gathers and scatters.
//   index_select: out[i, :] = table[indices[i], :]         table: [V, D], out: [N, D]
//   index_add:    out[indices[i], :] += src[i, :]          src: [N, D], out: [V, D]
// indices: [N] int64; an index outside [0, V) throws, naming its position. A repeated index
// adds every one of its rows.
#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

namespace {

void check_indices(const char* op, const Tensor& indices, std::int64_t rows) {
  check_dtype(op, "indices", indices, DType::int64);
  TF_CHECK(indices.dim() == 1, op, ": expected 1-d indices, got shape ",
           shape_str(indices.shape()));
  for (std::int64_t i = 0; i < indices.size(0); ++i) {
    const std::int64_t v = get_int(indices, i);
    TF_CHECK(v >= 0 && v < rows, op, ": index ", v, " at position ", i, " is out of range for ",
             rows, " rows (expected 0 <= index < ", rows, ")");
  }
}

void check_matrix(const char* op, const char* what, const Tensor& t) {
  TF_CHECK(t.defined() && t.dim() == 2, op, ": expected ", what, " to be a 2-d tensor, got ",
           t.defined() ? shape_str(t.shape()) : "an undefined Tensor");
}

}  // namespace

void ReferenceBackend::index_select(const Tensor& table, const Tensor& indices, const Tensor& out) {
  check_matrix("index_select", "the table", table);
  check_matrix("index_select", "the output", out);
  check_indices("index_select", indices, table.size(0));
  const std::int64_t n = indices.size(0), d = table.size(1);
  TF_CHECK(out.size(0) == n && out.size(1) == d, "index_select: expected an output of shape [", n,
           ", ", d, "], got ", shape_str(out.shape()));
  check_dtype("index_select", "the output", out, table.dtype());
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
  check_matrix("index_add", "the source", src);
  check_matrix("index_add", "the output", out);
  check_indices("index_add", indices, out.size(0));
  const std::int64_t n = indices.size(0), d = out.size(1);
  TF_CHECK(src.size(0) == n && src.size(1) == d, "index_add: expected a source of shape [", n, ", ",
           d, "], got ", shape_str(src.shape()));
  check_dtype("index_add", "the output", out, src.dtype());
  TF_CHECK(is_floating(src.dtype()), "index_add: unsupported dtype ", src.dtype());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = get_int(indices, i);
    for (std::int64_t j = 0; j < d; ++j) set_at(out, {row, j}, at(out, {row, j}) + at(src, {i, j}));
  }
}

}  // namespace tinyformer::reference
