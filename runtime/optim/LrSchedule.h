#pragma once
#include <cstdint>

#include "runtime/config/TrainConfig.h"

namespace pstrain::optim {

// The learning rate of optimizer step `step` (0-based) of a run of `totalSteps` steps: the
// target is the base lr, times the number of workers under --lr-scaling linear (the Linear
// Scaling Rule of Goyal et al. 2017); it is ramped linearly as target x (step+1)/warmupSteps
// during the first warmupSteps steps, then constant (--lr-decay none) or following a half
// cosine from the target down to 0 at the end of the run (--lr-decay cosine).
double learningRate(const config::TrainConfig& cfg, int workers, std::int64_t step,
                    std::int64_t totalSteps);

}  // namespace pstrain::optim
