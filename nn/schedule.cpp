// Learning-rate schedules: constant, and linear warm-up followed by linear or cosine decay.
#include "nn/schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tinyformer::nn::optim {

namespace {
void check_step(const char* name, std::int64_t step) {
  TF_CHECK(step >= 0, name, "::lr_at: expected step >= 0, got ", step);
}
}  // namespace

ConstantLR::ConstantLR(double lr) : lr_(lr) {
  TF_CHECK(std::isfinite(lr) && lr >= 0.0, "ConstantLR: expected lr >= 0, got ", lr);
}

double ConstantLR::lr_at(std::int64_t step) const {
  check_step("ConstantLR", step);
  return lr_;
}

WarmupDecay::WarmupDecay(const char* name, double peak_lr, std::int64_t warmup_steps,
                         std::int64_t total_steps, double final_lr)
    : name_(name),
      peak_lr_(peak_lr),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      final_lr_(final_lr) {
  TF_CHECK(std::isfinite(peak_lr) && peak_lr >= 0.0, name, ": expected peak_lr >= 0, got ",
           peak_lr);
  TF_CHECK(std::isfinite(final_lr) && final_lr >= 0.0 && final_lr <= peak_lr, name,
           ": expected 0 <= final_lr <= peak_lr (", peak_lr, "), got ", final_lr);
  TF_CHECK(warmup_steps >= 0, name, ": expected warmup_steps >= 0, got ", warmup_steps);
  TF_CHECK(total_steps >= warmup_steps && total_steps > 0, name,
           ": expected total_steps > 0 and >= warmup_steps (", warmup_steps, "), got ",
           total_steps);
}

double WarmupDecay::lr_at(std::int64_t step) const {
  check_step(name_, step);
  if (step < warmup_steps_) {
    return peak_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
  }
  if (step >= total_steps_) return final_lr_;
  // Here warmup_steps <= step < total_steps, so the denominator is at least 1.
  const double progress =
      static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  return final_lr_ + (peak_lr_ - final_lr_) * decay_shape(progress);
}

WarmupLinear::WarmupLinear(double peak_lr, std::int64_t warmup_steps, std::int64_t total_steps,
                           double final_lr)
    : WarmupDecay("WarmupLinear", peak_lr, warmup_steps, total_steps, final_lr) {}

double WarmupLinear::decay_shape(double x) const {
  return 1.0 - x;
}

WarmupCosine::WarmupCosine(double peak_lr, std::int64_t warmup_steps, std::int64_t total_steps,
                           double final_lr)
    : WarmupDecay("WarmupCosine", peak_lr, warmup_steps, total_steps, final_lr) {}

double WarmupCosine::decay_shape(double x) const {
  return 0.5 * (1.0 + std::cos(std::numbers::pi * x));
}

}  // namespace tinyformer::nn::optim
