#include "runtime/optim/LossScale.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

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
  // As the float the step header carries it in: a double below a float's range would travel
  // as 0 (a "garbled" header), one between 0 and kSmallestScale as a scale that the backoff
  // could never have reached (its advice, lower --lr, then wrong).
  const float carried = static_cast<float>(scale);
  if (!(std::isfinite(carried) && carried >= kSmallestScale) || goodSteps < 0 || goodSteps >= growthInterval_) {
    throw ConfigError(fmt::format("the checkpoint's loss scale {} after {} good steps is not one that dynamic loss "
                                  "scaling reaches (a float in [{:g}, {:g}], fewer good steps than --loss-scale-window "
                                  "{}): a damaged or edited checkpoint; resume from another, or start afresh",
                                  scale, goodSteps, kSmallestScale, std::numeric_limits<float>::max(), growthInterval_));
  }
  scale_ = scale;
  goodSteps_ = goodSteps;
}

}  // namespace pstrain::optim
