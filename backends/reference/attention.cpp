// Scaled dot-product attention and its backward, for each matrix of the leading (batch) dims:
//   s[i, j] = scale * sum_c q[i, c] k[j, c],   -inf where excluded (mask, or causal and j > i)
//   p[i, j] = exp(s[i, j] - max_j s) / sum_j exp(s[i, j] - max_j s)
//   out[i, e] = sum_j p[i, j] v[j, e]
// backward, with g the gradient of out:
//   dp[i, j] = sum_e g[i, e] v[j, e]
//   ds[i, j] = p[i, j] (dp[i, j] - sum_l p[i, l] dp[i, l])
//   grad_query[i, c] = scale sum_j ds[i, j] k[j, c],   grad_key[j, c] = scale sum_i ds[i, j] q[i,
//   c] grad_value[j, e] = sum_i p[i, j] g[i, e]
// A row with every key excluded has max -inf, and exp(-inf - -inf) is NaN: the row is NaN.
#include <cmath>
#include <limits>
#include <vector>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

namespace {

// Element [r, c] of batch matrix `b` of t, whose matrices start at `offsets`.
double matrix_at(const Tensor& t, const std::vector<std::int64_t>& offsets, std::int64_t b,
                 std::int64_t r, std::int64_t c) {
  return load(t, offsets[static_cast<std::size_t>(b)] + r * t.stride(-2) + c * t.stride(-1));
}
void matrix_set(const Tensor& t, const std::vector<std::int64_t>& offsets, std::int64_t b,
                std::int64_t r, std::int64_t c, double v) {
  store(t, offsets[static_cast<std::size_t>(b)] + r * t.stride(-2) + c * t.stride(-1), v);
}

}  // namespace

void ReferenceBackend::attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                 const Tensor& excluded_mask, bool causal, double scale,
                                 const Tensor& probs, const Tensor& out) {
  const AttentionShape s =
      check_attention_args(query, key, value, excluded_mask, causal, scale, probs, out, *this);
  const auto qo = batch_offsets(query, s.batch), ko = batch_offsets(key, s.batch),
             vo = batch_offsets(value, s.batch), po = batch_offsets(probs, s.batch),
             oo = batch_offsets(out, s.batch);
  const auto mo =
      excluded_mask.defined() ? batch_offsets(excluded_mask, s.batch) : std::vector<std::int64_t>{};
  const double minus_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> row(static_cast<std::size_t>(s.m));
  for (std::int64_t b = 0; b < s.batches; ++b) {
    for (std::int64_t i = 0; i < s.n; ++i) {
      double max = minus_inf;
      for (std::int64_t j = 0; j < s.m; ++j) {
        double dot = 0.0;
        for (std::int64_t c = 0; c < s.d; ++c) {
          dot += matrix_at(query, qo, b, i, c) * matrix_at(key, ko, b, j, c);
        }
        const bool excluded =
            (causal && j > i) || (excluded_mask.defined() && matrix_at(excluded_mask, mo, b, i, j));
        row[static_cast<std::size_t>(j)] = excluded ? minus_inf : scale * dot;
        max = std::fmax(max, row[static_cast<std::size_t>(j)]);
      }
      double sum = 0.0;
      for (double x : row) sum += std::exp(x - max);
      for (std::int64_t j = 0; j < s.m; ++j) {
        double& p = row[static_cast<std::size_t>(j)];
        p = std::exp(p - max) / sum;
        matrix_set(probs, po, b, i, j, p);
      }
      for (std::int64_t e = 0; e < s.dv; ++e) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < s.m; ++j) {
          acc += row[static_cast<std::size_t>(j)] * matrix_at(value, vo, b, j, e);
        }
        matrix_set(out, oo, b, i, e, acc);
      }
    }
  }
}

void ReferenceBackend::attention_backward(const Tensor& grad, const Tensor& query,
                                          const Tensor& key, const Tensor& value,
                                          const Tensor& probs, bool causal, double scale,
                                          const Tensor& grad_query, const Tensor& grad_key,
                                          const Tensor& grad_value) {
  // causal only tells that probs is 0 after the diagonal; the loops below read it as it is.
  (void)causal;
  const AttentionShape s = check_attention_backward_args(grad, query, key, value, probs, scale,
                                                         grad_query, grad_key, grad_value, *this);
  const auto go = batch_offsets(grad, s.batch), qo = batch_offsets(query, s.batch),
             ko = batch_offsets(key, s.batch), vo = batch_offsets(value, s.batch),
             po = batch_offsets(probs, s.batch), gqo = batch_offsets(grad_query, s.batch),
             gko = batch_offsets(grad_key, s.batch), gvo = batch_offsets(grad_value, s.batch);
  for (std::int64_t b = 0; b < s.batches; ++b) {
    // ds for the whole matrix: grad_key sums it over the queries.
    std::vector<double> ds(static_cast<std::size_t>(s.n * s.m));
    for (std::int64_t i = 0; i < s.n; ++i) {
      double dot = 0.0;  // sum_l p[i, l] dp[i, l]
      for (std::int64_t j = 0; j < s.m; ++j) {
        double dp = 0.0;
        for (std::int64_t e = 0; e < s.dv; ++e) {
          dp += matrix_at(grad, go, b, i, e) * matrix_at(value, vo, b, j, e);
        }
        ds[static_cast<std::size_t>(i * s.m + j)] = dp;
        dot += matrix_at(probs, po, b, i, j) * dp;
      }
      for (std::int64_t j = 0; j < s.m; ++j) {
        double& x = ds[static_cast<std::size_t>(i * s.m + j)];
        x = matrix_at(probs, po, b, i, j) * (x - dot);
      }
    }
    for (std::int64_t i = 0; i < s.n; ++i) {
      for (std::int64_t c = 0; c < s.d; ++c) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < s.m; ++j) {
          acc += ds[static_cast<std::size_t>(i * s.m + j)] * matrix_at(key, ko, b, j, c);
        }
        matrix_set(grad_query, gqo, b, i, c, scale * acc);
      }
    }
    for (std::int64_t j = 0; j < s.m; ++j) {
      for (std::int64_t c = 0; c < s.d; ++c) {
        double acc = 0.0;
        for (std::int64_t i = 0; i < s.n; ++i) {
          acc += ds[static_cast<std::size_t>(i * s.m + j)] * matrix_at(query, qo, b, i, c);
        }
        matrix_set(grad_key, gko, b, j, c, scale * acc);
      }
      for (std::int64_t e = 0; e < s.dv; ++e) {
        double acc = 0.0;
        for (std::int64_t i = 0; i < s.n; ++i) {
          acc += matrix_at(probs, po, b, i, j) * matrix_at(grad, go, b, i, e);
        }
        matrix_set(grad_value, gvo, b, j, e, acc);
      }
    }
  }
}

}  // namespace tinyformer::reference
