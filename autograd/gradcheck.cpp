// gradcheck: backward() against central finite differences in double precision.
#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

namespace {
// <r, f(inputs)> for the fixed projection r.
double projected(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                 const std::vector<Tensor>& inputs, const Tensor& r) {
  NoGradGuard no_grad;
  return sum(mul(f(inputs).to(DType::float64), r)).item<double>();
}
}  // namespace

bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
               const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    TF_CHECK(t.dtype() == DType::float64 && t.device().is_cpu() && t.is_contiguous() && t.is_leaf(),
             "gradcheck: input ", i, " must be a contiguous float64 CPU leaf, got ",
             shape_str(t.shape()), " ", t.dtype(), " on ", t.device());
    t.zero_grad();
  }
  Tensor out = f(inputs);
  TF_CHECK(out.defined() && out.requires_grad(),
           "gradcheck: the function's output does not require grad");
  // A fixed projection with values in [0.5, 1.5), so no output element is weighted by ~0.
  Generator gen(1234);
  const auto [seed, offset] = gen.reserve(static_cast<std::uint64_t>(out.numel()));
  Tensor r = empty(out.shape(), {.dtype = DType::float64});
  if (r.numel() > 0) backend(r.device()).random(r, RandomKind::uniform, seed, offset, 0.5, 1.5);
  sum(mul(out.to(DType::float64), r)).backward();

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    const Tensor analytic_t = t.grad().defined() ? t.grad() : zeros_like(t);
    const std::vector<double> analytic = analytic_t.to_vector<double>();
    double* x = t.data<double>();
    for (std::int64_t j = 0; j < t.numel(); ++j) {
      const double original = x[j];
      x[j] = original + options.eps;
      const double plus = projected(f, inputs, r);
      x[j] = original - options.eps;
      const double minus = projected(f, inputs, r);
      x[j] = original;
      const double numeric = (plus - minus) / (2 * options.eps);
      TF_CHECK(std::abs(analytic[j] - numeric) <= options.atol + options.rtol * std::abs(numeric),
               "gradcheck: input ", i, " ", shape_str(t.shape()), ", element ", j,
               ": backward gives ", analytic[j], ", finite differences give ", numeric);
    }
  }
  return true;
}

}  // namespace tinyformer
