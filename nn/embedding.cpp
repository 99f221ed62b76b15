// Embeddings and position encodings.
#include "nn/embedding.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/checked.h"
#include "nn/init.h"

namespace tinyformer::nn {

void validate(const InitConfig& init, const char* op) {
  TF_CHECK(std::isfinite(init.token_std) && init.token_std >= 0, op,
           ": expected a finite, non-negative token_std, got ", init.token_std);
  TF_CHECK(std::isfinite(init.position_std) && init.position_std >= 0, op,
           ": expected a finite, non-negative position_std, got ", init.position_std);
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim) {
  TF_CHECK(num_embeddings > 0 && dim > 0, "Embedding: expected positive sizes, got ",
           num_embeddings, " x ", dim);
  shape_numel({num_embeddings, dim}, "Embedding");
  weight = register_parameter("weight", randn({num_embeddings, dim}));
}

Tensor Embedding::forward(const Tensor& indices) const {
  return embedding(weight, indices);
}

std::string Embedding::extra_repr() const {
  return std::to_string(weight.size(0)) + ", " + std::to_string(weight.size(1));
}

namespace {
// x: [B, n, d] (or [n, d]) with n <= max_len rows of a [max_len, d] table.
Tensor add_positions(const Tensor& x, const Tensor& table, const char* op) {
  TF_CHECK(x.defined() && x.dim() >= 2 && x.size(-1) == table.size(1), op,
           ": expected input [..., n, ", table.size(1), "], got ",
           x.defined() ? shape_str(x.shape()) : "an undefined Tensor");
  const std::int64_t n = x.size(-2);
  TF_CHECK(n <= table.size(0), op, ": the sequence has ", n, " positions, the encoding holds ",
           table.size(0), " (max_len)");
  return add(x, table.narrow(0, 0, n));
}
}  // namespace

LearnedPositionalEncoding::LearnedPositionalEncoding(std::int64_t max_len, std::int64_t dim,
                                                     double std) {
  TF_CHECK(max_len > 0 && dim > 0, "LearnedPositionalEncoding: expected positive sizes");
  TF_CHECK(std::isfinite(std) && std >= 0,
           "LearnedPositionalEncoding: expected a finite, non-negative std, got ", std);
  shape_numel({max_len, dim}, "LearnedPositionalEncoding");
  weight = register_parameter("weight", empty({max_len, dim}));
  init::normal_(weight, 0.0, std);
}

Tensor LearnedPositionalEncoding::forward(const Tensor& x) const {
  return add_positions(x, weight, "LearnedPositionalEncoding");
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(std::int64_t max_len, std::int64_t dim) {
  TF_CHECK(max_len > 0 && dim > 0, "SinusoidalPositionalEncoding: expected positive sizes");
  // The table is built in a host vector first, so its size is checked before that vector is.
  storage_bytes({max_len, dim}, DType::float32, "SinusoidalPositionalEncoding");
  std::vector<float> values(static_cast<std::size_t>(max_len * dim));
  for (std::int64_t p = 0; p < max_len; ++p) {
    for (std::int64_t i = 0; i < dim; ++i) {
      const double freq =
          std::pow(10000.0, -static_cast<double>(i - i % 2) / static_cast<double>(dim));
      values[static_cast<std::size_t>(p * dim + i)] =
          static_cast<float>(i % 2 == 0 ? std::sin(p * freq) : std::cos(p * freq));
    }
  }
  table = register_buffer("table", from(values, {max_len, dim}));
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x) const {
  const Tensor t = x.dtype() == table.dtype() ? table : table.to(x.dtype());
  return add_positions(x, t.device() == x.device() ? t : t.to(x.device()),
                       "SinusoidalPositionalEncoding");
}

}  // namespace tinyformer::nn
