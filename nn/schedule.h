// Learning-rate schedules: the learning rate as a function of the step. The training loop
// applies one before each update:
//
//   nn::optim::WarmupCosine schedule(3e-4, /*warmup_steps=*/100, /*total_steps=*/5000, 3e-5);
//   for (std::int64_t step = 0; step < 5000; ++step) {
//     optimizer.set_lr(schedule.lr_at(step));
//     ...
//     optimizer.step();
//   }
#pragma once

#include <cstdint>

namespace tinyformer::nn::optim {

// `step` counts the updates already taken: lr_at(0) is the learning rate of the first update.
class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual double lr_at(std::int64_t step) const = 0;
};

class ConstantLR : public Schedule {
 public:
  explicit ConstantLR(double lr);
  double lr_at(std::int64_t step) const override;

 private:
  double lr_;
};

// Linear warm-up over `warmup_steps` updates to peak_lr, then a decay to final_lr at
// total_steps, and final_lr from then on:
//   step < warmup:          peak_lr * (step + 1) / warmup_steps
//   warmup <= step < total: final_lr + (peak_lr - final_lr) * shape((step - warmup) / (total -
//   warmup)) step >= total:          final_lr
// with shape(x) = 1 - x (WarmupLinear) or (1 + cos(pi x)) / 2 (WarmupCosine). The warm-up
// counts from step + 1 so the first update already moves the parameters; the decay starts
// from exactly peak_lr at step == warmup_steps.
class WarmupDecay : public Schedule {
 public:
  double lr_at(std::int64_t step) const override;
  double peak_lr() const { return peak_lr_; }
  double final_lr() const { return final_lr_; }
  std::int64_t warmup_steps() const { return warmup_steps_; }
  std::int64_t total_steps() const { return total_steps_; }

 protected:
  WarmupDecay(const char* name, double peak_lr, std::int64_t warmup_steps, std::int64_t total_steps,
              double final_lr);
  // The fraction of (peak_lr - final_lr) left at decay progress x in [0, 1).
  virtual double decay_shape(double x) const = 0;

 private:
  const char* name_;
  double peak_lr_;
  std::int64_t warmup_steps_;
  std::int64_t total_steps_;
  double final_lr_;
};

class WarmupLinear : public WarmupDecay {
 public:
  WarmupLinear(double peak_lr, std::int64_t warmup_steps, std::int64_t total_steps,
               double final_lr = 0.0);

 protected:
  double decay_shape(double x) const override;
};

class WarmupCosine : public WarmupDecay {
 public:
  WarmupCosine(double peak_lr, std::int64_t warmup_steps, std::int64_t total_steps,
               double final_lr = 0.0);

 protected:
  double decay_shape(double x) const override;
};

}  // namespace tinyformer::nn::optim
