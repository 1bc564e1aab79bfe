#include "runtime/optim/LossScale.h"

#include <fmt/format.h>

#include <cmath>

#include "runtime/Errors.h"

namespace pstrain::optim {

void LossScale::record(bool finite, std::int64_t step) {
  if (finite) {
    if (++goodSteps_ == growthInterval_) {
      // As GradScaler's float32 scale: it grows only to what a float holds (the step header's).
      if (std::isfinite(static_cast<float>(scale_ * kGrowthFactor))) scale_ *= kGrowthFactor;
      goodSteps_ = 0;
    }
    return;
  }
  scale_ *= kBackoffFactor;
  goodSteps_ = 0;
  if (scale_ < kSmallestScale) {
    throw Error(fmt::format("step {}: the gradient overflowed at every loss scale down to {:g}: the loss or the "
                            "gradient is not finite whatever the scale; lower --lr (the last good checkpoint is kept)",
                            step, scale_ / kBackoffFactor));
  }
}

void LossScale::restore(double scale, std::int64_t goodSteps) {
  if (!(std::isfinite(static_cast<float>(scale)) && scale > 0) || goodSteps < 0 || goodSteps >= growthInterval_) {
    throw CheckpointError(fmt::format("the checkpoint's loss scale {} after {} good steps does not fit "
                                      "--loss-scale-window {}", scale, goodSteps, growthInterval_));
  }
  scale_ = scale;
  goodSteps_ = goodSteps;
}

}  // namespace pstrain::optim
