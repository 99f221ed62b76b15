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
//
// flash_attention and its backward are the same math with dropout on the probabilities
// (keep[i, j] from AttentionDropout::keep, c = 1 / (1 - p)):
//   out[i, e] = sum_j p[i, j] keep[i, j] c v[j, e],   lse[i] = max_j s + log sum_j exp(s - max)
//   dp[i, j] = keep[i, j] c sum_e g[i, e] v[j, e],     ds as above,
//   grad_value[j, e] = sum_i p[i, j] keep[i, j] c g[i, e]
// Here the whole [n, m] matrix is kept, and the backward computes p again from the scores by the
// same softmax rather than from lse.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/reference/element.h"
#include "backends/reference/reference_backend.h"
#include "core/op_checks.h"

namespace tinyformer::reference {

namespace {
// The three gradients of one matrix from dS and the probabilities pd that multiplied v:
// grad_query = scale dS k, grad_key = scale dS^T q, grad_value = pd^T g; written at the offsets.
void write_gradients(const Matrix& ds, const Matrix& pd, const Matrix& q, const Matrix& k,
                     const Matrix& g, double scale, const AttentionShape& s,
                     const Tensor& grad_query, std::int64_t gq_at, const Tensor& grad_key,
                     std::int64_t gk_at, const Tensor& grad_value, std::int64_t gv_at) {
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
      for (std::int64_t i = 0; i < s.n; ++i) acc += pd(i, j) * g(i, e);
      gv(j, e) = acc;
    }
  }
  write_matrix(grad_query, gq_at, gq);
  write_matrix(grad_key, gk_at, gk);
  write_matrix(grad_value, gv_at, gv);
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
    write_gradients(ds, p, q, k, g, scale, s, grad_query, of(gqo), grad_key, of(gko), grad_value,
                    of(gvo));
  }
}

namespace {
// The softmax of matrix b's masked, scaled scores ([n, m]), each row's log-sum-exp (NaN for a row
// with every key excluded) and the dropout factor keep * c of each element.
struct FlashMatrices {
  Matrix p, factor;
  std::vector<double> lse;
};

FlashMatrices flash_probabilities(const Matrix& q, const Matrix& k, const Matrix& mask, bool masked,
                                  bool causal, double scale, const AttentionDropout& dropout,
                                  std::int64_t b, const AttentionShape& s) {
  const double minus_inf = -std::numeric_limits<double>::infinity();
  FlashMatrices f{Matrix(s.n, s.m), Matrix(s.n, s.m),
                  std::vector<double>(static_cast<std::size_t>(s.n))};
  for (std::int64_t i = 0; i < s.n; ++i) {
    double max = minus_inf;
    for (std::int64_t j = 0; j < s.m; ++j) {
      double dot = 0.0;
      for (std::int64_t c = 0; c < s.d; ++c) dot += q(i, c) * k(j, c);
      const bool excluded = (causal && j > i) || (masked && mask(i, j) != 0.0);
      f.p(i, j) = excluded ? minus_inf : scale * dot;
      max = std::fmax(max, f.p(i, j));
    }
    double sum = 0.0;
    for (std::int64_t j = 0; j < s.m; ++j) sum += std::exp(f.p(i, j) - max);
    f.lse[static_cast<std::size_t>(i)] =
        max == minus_inf ? std::numeric_limits<double>::quiet_NaN() : max + std::log(sum);
    for (std::int64_t j = 0; j < s.m; ++j) {
      f.p(i, j) = std::exp(f.p(i, j) - max) / sum;
      const std::uint64_t g = static_cast<std::uint64_t>((b * s.n + i) * s.m + j);
      f.factor(i, j) = !dropout.active() ? 1.0 : dropout.keep(g) ? dropout.scale : 0.0;
    }
  }
  return f;
}
}  // namespace

void ReferenceBackend::flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const Tensor& excluded_mask, bool causal, double scale,
                                       const AttentionDropout& dropout, const Tensor& out,
                                       const Tensor& lse) {
  const AttentionShape s =
      check_flash_attention_args(query, key, value, excluded_mask, scale, dropout, out, lse, *this);
  const auto qo = batch_offsets(query, s.batch), ko = batch_offsets(key, s.batch),
             vo = batch_offsets(value, s.batch), oo = batch_offsets(out, s.batch);
  const bool masked = excluded_mask.defined();
  const auto mo = masked ? batch_offsets(excluded_mask, s.batch) : std::vector<std::int64_t>{};
  const Tensor lse_rows = lse.view({s.batches, s.n});
  for (std::int64_t b = 0; b < s.batches; ++b) {
    const auto of = [b](const std::vector<std::int64_t>& offsets) {
      return offsets[static_cast<std::size_t>(b)];
    };
    const Matrix q = read_matrix(query, of(qo)), k = read_matrix(key, of(ko)),
                 v = read_matrix(value, of(vo));
    const Matrix mask = masked ? read_matrix(excluded_mask, of(mo)) : Matrix{};
    const FlashMatrices f = flash_probabilities(q, k, mask, masked, causal, scale, dropout, b, s);
    Matrix o(s.n, s.dv), l(1, s.n);
    for (std::int64_t i = 0; i < s.n; ++i) {
      for (std::int64_t e = 0; e < s.dv; ++e) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < s.m; ++j) acc += f.p(i, j) * f.factor(i, j) * v(j, e);
        o(i, e) = acc;
      }
      l(0, i) = f.lse[static_cast<std::size_t>(i)];
    }
    write_matrix(out, of(oo), o);
    write_matrix(lse_rows, b * s.n, l);
  }
}

void ReferenceBackend::flash_attention_backward(const Tensor& grad, const Tensor& query,
                                                const Tensor& key, const Tensor& value,
                                                const Tensor& out, const Tensor& lse,
                                                const Tensor& excluded_mask, bool causal,
                                                double scale, const AttentionDropout& dropout,
                                                const Tensor& grad_query, const Tensor& grad_key,
                                                const Tensor& grad_value) {
  const AttentionShape s =
      check_flash_attention_backward_args(grad, query, key, value, out, lse, excluded_mask, scale,
                                          dropout, grad_query, grad_key, grad_value, *this);
  const auto go = batch_offsets(grad, s.batch), qo = batch_offsets(query, s.batch),
             ko = batch_offsets(key, s.batch), vo = batch_offsets(value, s.batch),
             gqo = batch_offsets(grad_query, s.batch), gko = batch_offsets(grad_key, s.batch),
             gvo = batch_offsets(grad_value, s.batch);
  const bool masked = excluded_mask.defined();
  const auto mo = masked ? batch_offsets(excluded_mask, s.batch) : std::vector<std::int64_t>{};
  for (std::int64_t b = 0; b < s.batches; ++b) {
    const auto of = [b](const std::vector<std::int64_t>& offsets) {
      return offsets[static_cast<std::size_t>(b)];
    };
    const Matrix g = read_matrix(grad, of(go)), q = read_matrix(query, of(qo)),
                 k = read_matrix(key, of(ko)), v = read_matrix(value, of(vo));
    const Matrix mask = masked ? read_matrix(excluded_mask, of(mo)) : Matrix{};
    const FlashMatrices f = flash_probabilities(q, k, mask, masked, causal, scale, dropout, b, s);
    Matrix ds(s.n, s.m);
    for (std::int64_t i = 0; i < s.n; ++i) {
      double dot = 0.0;
      for (std::int64_t j = 0; j < s.m; ++j) {
        double dp = 0.0;
        for (std::int64_t e = 0; e < s.dv; ++e) dp += g(i, e) * v(j, e);
        ds(i, j) = f.factor(i, j) * dp;
        dot += f.p(i, j) * ds(i, j);
      }
      for (std::int64_t j = 0; j < s.m; ++j) ds(i, j) = f.p(i, j) * (ds(i, j) - dot);
    }
    Matrix pd(s.n, s.m);  // the probabilities as the product with v saw them
    for (std::int64_t i = 0; i < s.n; ++i) {
      for (std::int64_t j = 0; j < s.m; ++j) pd(i, j) = f.p(i, j) * f.factor(i, j);
    }
    write_gradients(ds, pd, q, k, g, scale, s, grad_query, of(gqo), grad_key, of(gko), grad_value,
                    of(gvo));
  }
}

}  // namespace tinyformer::reference
