// Adam and AdamW run one fused adamw_step per parameter: they match the same update written as a
// composition of tensor ops (float32 and float64, both weight-decay modes), step strided
// parameters and gradients, and hand out state dicts that later steps leave alone.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
namespace optim = tinyformer::nn::optim;

namespace {

// The Adam/AdamW update as tensor ops (the formula of nn/optim.h), for comparison.
struct CompositeAdam {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  Tensor m, v;
  int t = 0;

  void step(const Tensor& param, const Tensor& grad) {
    NoGradGuard no_grad;
    if (!m.defined()) m = zeros_like(param);
    if (!v.defined()) v = zeros_like(param);
    ++t;
    Tensor p = param, g = grad;
    if (decoupled) {
      p = param * (1.0 - lr * weight_decay);
    } else {
      g = grad + param * weight_decay;
    }
    m = m * beta1 + g * (1.0 - beta1);
    v = v * beta2 + g * g * (1.0 - beta2);
    const double bc1 = 1.0 - std::pow(beta1, t), bc2 = 1.0 - std::pow(beta2, t);
    raw::copy(p - m / (sqrt(v) / std::sqrt(bc2) + eps) * (lr / bc1), param);
  }
};

void check_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  const auto g = to(got, kFloat64).contiguous().to_vector<double>();
  const auto w = to(want, kFloat64).contiguous().to_vector<double>();
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= tol * (1.0 + std::abs(w[i])))) {
      FAIL_CHECK(what << ", element " << i << ": got " << g[i] << ", want " << w[i]);
      return;
    }
  }
}

}  // namespace

TEST_CASE("Adam and AdamW: the fused step equals the composite update") {
  for (DType dtype : {kFloat64, kFloat32}) {
    const double tol = dtype == kFloat64 ? 1e-14 : 1e-6;
    for (bool decoupled : {true, false}) {
      INFO(dtype, decoupled ? " AdamW" : " Adam");
      const double lr = 0.03, wd = 0.2, eps = 1e-8;
      const std::pair<double, double> betas = {0.8, 0.99};
      Tensor w = randn({5, 3}, {.dtype = dtype}).requires_grad_();
      Tensor expected = w.detach().clone();
      std::unique_ptr<optim::Optimizer> opt;
      if (decoupled) {
        opt = std::make_unique<optim::AdamW>(
            std::vector<Tensor>{w},
            optim::AdamWOptions{.lr = lr, .betas = betas, .eps = eps, .weight_decay = wd});
      } else {
        opt = std::make_unique<optim::Adam>(
            std::vector<Tensor>{w},
            optim::AdamOptions{.lr = lr, .betas = betas, .eps = eps, .weight_decay = wd});
      }
      CompositeAdam reference{lr, betas.first, betas.second, eps, wd, decoupled, {}, {}};
      for (int step = 0; step < 4; ++step) {
        const Tensor g = randn({5, 3}, {.dtype = dtype});
        w.set_grad(g.clone());
        opt->step();
        reference.step(expected, g);
        check_close(w, expected, tol, "param after step " + std::to_string(step + 1));
      }
      const nn::StateDict state = opt->state_dict();
      for (const auto& [name, t] : state) {
        if (name == "state.0.exp_avg") check_close(t, reference.m, tol, name);
        if (name == "state.0.exp_avg_sq") check_close(t, reference.v, tol, name);
      }
    }
  }
}

TEST_CASE("Adam: a transposed parameter and a strided gradient are stepped in place") {
  // A leaf whose memory is column-major, and a gradient given as a transposed view.
  Tensor w = randn({3, 4}, {.dtype = kFloat64}).transpose(0, 1).requires_grad_();
  REQUIRE(!w.is_contiguous());
  const Tensor before = w.detach().contiguous();
  optim::Adam opt({w}, {.lr = 0.1, .weight_decay = 0.05});
  CompositeAdam reference{0.1, 0.9, 0.999, 1e-8, 0.05, false, {}, {}};
  Tensor expected = before.clone();
  for (int step = 0; step < 3; ++step) {
    const Tensor g = randn({3, 4}, {.dtype = kFloat64}).transpose(0, 1);
    w.set_grad(g);
    opt.step();
    reference.step(expected, g.contiguous());
  }
  CHECK(!w.is_contiguous());  // still the same strided leaf
  check_close(w, expected, 1e-14, "param");
}

TEST_CASE("AdamW: state_dict is a snapshot that later steps leave alone") {
  Tensor w = ones({4}, {.dtype = kFloat64}).requires_grad_();
  optim::AdamW opt({w}, {.lr = 0.1});
  w.set_grad(full({4}, 0.5, {.dtype = kFloat64}));
  opt.step();
  const nn::StateDict snapshot = opt.state_dict();
  std::vector<std::vector<double>> saved;
  for (const auto& [name, t] : snapshot) saved.push_back(t.to_vector<double>());
  opt.step();
  opt.step();
  for (std::size_t i = 0; i < snapshot.size(); ++i) {
    INFO(snapshot[i].first);
    CHECK(snapshot[i].second.to_vector<double>() == saved[i]);
  }
  // The live state did move on.
  for (const auto& [name, t] : opt.state_dict()) {
    if (name == "state.0.step") CHECK(t.item<std::int64_t>() == 3);
  }
}

TEST_CASE("Adam: a parameter dtype the fused step does not take is a clear Error") {
  Tensor w = ones({3}, {.dtype = kBFloat16}).requires_grad_();
  optim::Adam opt({w}, {.lr = 0.1});
  w.set_grad(ones({3}, {.dtype = kBFloat16}));
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("adamw_step"), Error);
  // The failed step left no state behind (a state dict with buffers but no step would not load).
  CHECK(opt.step_count(0) == 0);
  CHECK(opt.state_dict().size() == 3);  // the group's lr, weight_decay and params only
}
