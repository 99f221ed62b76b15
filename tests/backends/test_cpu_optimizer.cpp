// The CPU backend's fused Adam/AdamW step (adamw_step) against the reference backend's step in
// float64 (the formula of core/ops.def in double): both weight-decay modes, several steps, odd
// sizes and one large enough for the threaded path, float32 and float64, and its input checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/reference/reference_backend.h"
#include "core/backend.h"
#include "core/tensor.h"

namespace {

using namespace tinyformer;

Backend& cpu() {
  return backend(Device::cpu());
}

std::vector<double> random_values(std::int64_t n, unsigned seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

Tensor make(const std::vector<double>& values, DType dtype) {
  const Shape shape = {static_cast<std::int64_t>(values.size())};
  if (dtype == DType::float64) return from<double>(values, shape);
  return from<float>(std::vector<float>(values.begin(), values.end()), shape);
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = t.dtype() == DType::float64 ? t.data<double>()[i] : t.data<float>()[i];
  }
  return v;
}

struct Hyper {
  double lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = true;
};

// One step of the reference backend, in double, on the vectors p, m and v.
void reference_step(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                    std::vector<double>& v, const Hyper& h, int step) {
  const Tensor tp = make(p, DType::float64), tm = make(m, DType::float64),
               tv = make(v, DType::float64);
  reference_backend().adamw_step(tp, make(g, DType::float64), tm, tv, h.lr, h.beta1, h.beta2, h.eps,
                                 h.weight_decay, h.decoupled, 1.0 - std::pow(h.beta1, step),
                                 1.0 - std::pow(h.beta2, step));
  p = values(tp);
  m = values(tm);
  v = values(tv);
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))) {
      FAIL_CHECK(what << ", element " << i << ": got " << got[i] << ", want " << want[i]);
      return;
    }
  }
}

void step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Hyper& h,
          int t) {
  cpu().adamw_step(p, g, m, v, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.decoupled,
                   1.0 - std::pow(h.beta1, t), 1.0 - std::pow(h.beta2, t));
}

}  // namespace

TEST_CASE("adamw_step: Adam and AdamW against the reference in double, several steps") {
  for (DType dtype : {DType::float64, DType::float32}) {
    const double tol = dtype == DType::float64 ? 1e-13 : 2e-6;
    for (std::int64_t n : {1, 7, 33, 40001}) {
      for (bool decoupled : {true, false}) {
        for (double weight_decay : {0.0, 0.1}) {
          INFO(dtype, " n=", n, decoupled ? " AdamW" : " Adam", " weight_decay=", weight_decay);
          const Hyper h{.lr = 0.05, .weight_decay = weight_decay, .decoupled = decoupled};
          std::vector<double> p = random_values(n, 1, -1.0, 1.0), m(p.size(), 0.0),
                              v(p.size(), 0.0);
          // The tensors start from the same values the reference holds (rounded to float32 for
          // float32, so the reference follows the rounded start).
          Tensor tp = make(p, dtype), tm = make(m, dtype), tv = make(v, dtype);
          p = values(tp);
          for (int t = 1; t <= 4; ++t) {
            const Tensor tg = make(random_values(n, 100 + t, -2.0, 2.0), dtype);
            step(tp, tg, tm, tv, h, t);
            reference_step(p, values(tg), m, v, h, t);
          }
          check_close(values(tp), p, tol, "param");
          check_close(values(tm), m, tol, "exp_avg");
          check_close(values(tv), v, tol, "exp_avg_sq");
        }
      }
    }
  }
}

TEST_CASE("adamw_step: a zero gradient only decays, an empty tensor is a no-op") {
  const Tensor p = from<double>({1.0, -2.0, 4.0}, {3});
  const Tensor g = zeros({3}, {.dtype = kFloat64});
  const Tensor m = zeros({3}, {.dtype = kFloat64}), v = zeros({3}, {.dtype = kFloat64});
  // With g = 0 the moments stay 0 and the Adam term is 0 / eps = 0: only the decay acts.
  cpu().adamw_step(p, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.5, true, 0.1, 0.001);
  const double decay = 1.0 - 0.1 * 0.5;
  CHECK(p.to_vector<double>() == std::vector<double>{decay, -2.0 * decay, 4.0 * decay});
  CHECK(m.to_vector<double>() == std::vector<double>{0.0, 0.0, 0.0});
  const Tensor e = empty({0}, {.dtype = kFloat64});
  const Tensor e2 = empty({0}, {.dtype = kFloat64}), e3 = empty({0}, {.dtype = kFloat64}),
               e4 = empty({0}, {.dtype = kFloat64});
  cpu().adamw_step(e, e2, e3, e4, 0.1, 0.9, 0.999, 1e-8, 0.0, true, 0.1, 0.001);
}

TEST_CASE("adamw_step: bad input throws Error naming the op") {
  auto z = [](const Shape& s, DType d = kFloat32) { return zeros(s, {.dtype = d}); };
  const Tensor p = z({2, 3}), g = z({2, 3}), m = z({2, 3}), v = z({2, 3});
  auto fails = [](auto&& call, const std::string& part) {
    try {
      call();
      FAIL("expected an Error mentioning \"" << part << "\"");
    } catch (const Error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find("adamw_step") != std::string::npos, msg);
      CHECK_MESSAGE(msg.find(part) != std::string::npos, msg);
    }
  };
  auto run = [&](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d,
                 double lr = 0.1, double beta1 = 0.9, double bc1 = 0.1) {
    return [=] { cpu().adamw_step(a, b, c, d, lr, beta1, 0.999, 1e-8, 0.0, true, bc1, 0.001); };
  };
  fails(run(p, z({3, 2}), m, v), "grad");
  fails(run(p, g, z({2, 3}, kFloat64), v), "exp_avg");
  fails(run(z({2, 3}, kInt64), z({2, 3}, kInt64), z({2, 3}, kInt64), z({2, 3}, kInt64)),
        "float32 or float64");
  fails(run(p, g, m, z({3, 2}).transpose(0, 1)), "contiguous");
  fails(run(p, g, m, Tensor()), "undefined");
  fails(run(p, g, m, m), "share memory");
  fails(run(p, g, m, v, -1.0), "lr");
  fails(run(p, g, m, v, 0.1, 1.0), "beta1");
  fails(run(p, g, m, v, 0.1, 0.9, 0.0), "bias_correction1");
  fails(run(p, g, m, v, std::numeric_limits<double>::quiet_NaN()), "lr");
}
