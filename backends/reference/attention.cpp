// Scaled dot-product attention and its backward, for each matrix of the leading (batch) dims:
//   s[i, j] = scale * sum_c q[i, c] k[j, c],   -inf where excluded (mask, or causal and j > i)
//   p[i, j] = exp(s[i, j] - max_j s) / sum_j exp(s[i, j] - max_j s)
//   out[i, e] = sum_j p[i, j] v[j, e]
// backward, with g the gradient of out:
//   dp[i, j] = sum_e g[i, e] v[j, e]
//   ds[i, j] = p[i, j] (dp[i, j] - sum_l p[i, l] dp[i, l])
//   grad_query[i, c] = scale sum_j ds[i, j] k[j, c]
//   grad_key[j, c] = scale sum_i ds[i, j] q[i, c]
//   grad_value[j, e] = sum_i p[i, j] g[i, e]
// A row with every key excluded has max -inf, and exp(-inf - -inf) is NaN: the row is NaN.
#include <cmath>
#include <limits>
#include <vector>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

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
  for (std::int64_t b = 0; b < s.batches; ++b) {
    const auto of = [b](const std::vector<std::int64_t>& offsets) {
      return offsets[static_cast<std::size_t>(b)];
    };
    const Matrix q = read_matrix(query, of(qo)), k = read_matrix(key, of(ko)),
                 v = read_matrix(value, of(vo));
    const Matrix mask = excluded_mask.defined() ? read_matrix(excluded_mask, of(mo)) : Matrix{};
    Matrix p(s.n, s.m), o(s.n, s.dv);
    for (std::int64_t i = 0; i < s.n; ++i) {
      double max = minus_inf;
      for (std::int64_t j = 0; j < s.m; ++j) {
        double dot = 0.0;
        for (std::int64_t c = 0; c < s.d; ++c) dot += q(i, c) * k(j, c);
        const bool excluded = (causal && j > i) || (excluded_mask.defined() && mask(i, j) != 0.0);
        p(i, j) = excluded ? minus_inf : scale * dot;
        max = std::fmax(max, p(i, j));
      }
      double sum = 0.0;
      for (std::int64_t j = 0; j < s.m; ++j) sum += std::exp(p(i, j) - max);
      for (std::int64_t j = 0; j < s.m; ++j) p(i, j) = std::exp(p(i, j) - max) / sum;
      for (std::int64_t e = 0; e < s.dv; ++e) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < s.m; ++j) acc += p(i, j) * v(j, e);
        o(i, e) = acc;
      }
    }
    write_matrix(probs, of(po), p);
    write_matrix(out, of(oo), o);
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
    const auto of = [b](const std::vector<std::int64_t>& offsets) {
      return offsets[static_cast<std::size_t>(b)];
    };
    const Matrix g = read_matrix(grad, of(go)), q = read_matrix(query, of(qo)),
                 k = read_matrix(key, of(ko)), v = read_matrix(value, of(vo)),
                 p = read_matrix(probs, of(po));
    // ds for the whole matrix: grad_key sums it over the queries.
    Matrix ds(s.n, s.m);
    for (std::int64_t i = 0; i < s.n; ++i) {
      double dot = 0.0;  // sum_l p[i, l] dp[i, l]
      for (std::int64_t j = 0; j < s.m; ++j) {
        double dp = 0.0;
        for (std::int64_t e = 0; e < s.dv; ++e) dp += g(i, e) * v(j, e);
        ds(i, j) = dp;
        dot += p(i, j) * dp;
      }
      for (std::int64_t j = 0; j < s.m; ++j) ds(i, j) = p(i, j) * (ds(i, j) - dot);
    }
    Matrix gq(s.n, s.d), gk(s.m, s.d), gv(s.m, s.dv);
    for (std::int64_t i = 0; i < s.n; ++i) {
      for (std::int64_t c = 0; c < s.d; ++c) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < s.m; ++j) acc += ds(i, j) * k(j, c);
        gq(i, c) = scale * acc;
      }
    }
    for (std::int64_t j = 0; j < s.m; ++j) {
      for (std::int64_t c = 0; c < s.d; ++c) {
        double acc = 0.0;
        for (std::int64_t i = 0; i < s.n; ++i) acc += ds(i, j) * q(i, c);
        gk(j, c) = scale * acc;
      }
      for (std::int64_t e = 0; e < s.dv; ++e) {
        double acc = 0.0;
        for (std::int64_t i = 0; i < s.n; ++i) acc += p(i, j) * g(i, e);
        gv(j, e) = acc;
      }
    }
    write_matrix(grad_query, of(gqo), gq);
    write_matrix(grad_key, of(gko), gk);
    write_matrix(grad_value, of(gvo), gv);
  }
}

}  // namespace tinyformer::reference
