// Matrix products.
//   matmul: out[b, i, j] = sum_k a[b, i, k] * b[b, k, j]
//           a: [B, M, K], b: [B, K, N] (either may be broadcast in B, a batch of 1, or have any
//           strides), out: [B, M, N] (row-major matrices at any strides that do not overlap);
//           with two batch dims, one product per entry of the first
// The sum runs in double whatever the dtype, so the only rounding is the final write.
#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/gemm.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

void ReferenceBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_matmul_args(a, b, out, *this);
  if (out.dim() == 4) {
    for (std::int64_t i = 0; i < out.size(0); ++i) {
      matmul(matmul_entry(a, i), matmul_entry(b, i), matmul_entry(out, i));
    }
    return;
  }
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  for (std::int64_t p = 0; p < batch; ++p) {
    // A batch of one in a or b is used for every batch of out.
    const std::int64_t pa = a.size(0) == 1 ? 0 : p, pb = b.size(0) == 1 ? 0 : p;
    const Matrix x = read_matrix(a, pa * a.stride(0)), y = read_matrix(b, pb * b.stride(0));
    Matrix z(m, n);
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (std::int64_t q = 0; q < k; ++q) sum += x(i, q) * y(q, j);
        z(i, j) = sum;
      }
    }
    write_matrix(out, p * out.stride(0), z);
  }
}

}  // namespace tinyformer::reference
