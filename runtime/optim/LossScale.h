#pragma once
// Dynamic loss scaling, as torch.cuda.amp.GradScaler does it (--loss-scale): the loss is
// multiplied by the scale before backward, so that float16's small gradients do not flush
// to zero, and the gradient is divided by it again before the update. An update whose
// gradient is not finite (the scaled backward overflowed) is skipped and the scale halved;
// after `growthInterval` finite updates in a row it doubles. Torch-free.
#include <cstdint>

namespace pstrain::optim {

class LossScale {
 public:
  // GradScaler's defaults (init_scale, growth_factor, backoff_factor).
  static constexpr double kInitialScale = 65536.0;
  static constexpr double kGrowthFactor = 2.0;
  static constexpr double kBackoffFactor = 0.5;
  // Below it no float16 gradient survives the division: the loss or the gradient is not
  // finite whatever the scale.
  static constexpr double kSmallestScale = 1.0 / (1 << 24);

  explicit LossScale(std::int64_t growthInterval) : growthInterval_(growthInterval) {}

  double scale() const { return scale_; }
  std::int64_t growthInterval() const { return growthInterval_; }
  // Finite updates since the last change of the scale (GradScaler's _growth_tracker).
  std::int64_t goodSteps() const { return goodSteps_; }

  // After update `step`: `finite` says whether its gradient was. The scale grows only to
  // what a float holds. Throws Error naming `step` when the halved scale falls below
  // kSmallestScale.
  void record(bool finite, std::int64_t step);

  // A checkpoint's state; throws CheckpointError unless scale is finite and positive and
  // goodSteps in [0, growthInterval).
  void restore(double scale, std::int64_t goodSteps);

 private:
  std::int64_t growthInterval_;
  double scale_ = kInitialScale;
  std::int64_t goodSteps_ = 0;
};

}  // namespace pstrain::optim
