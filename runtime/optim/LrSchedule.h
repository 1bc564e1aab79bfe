#pragma once
#include <cstdint>

#include "runtime/config/TrainConfig.h"

namespace pstrain::optim {

// The learning rate of optimizer step `step` (0-based): the base lr, times the number of
// workers under --lr-scaling linear (the Linear Scaling Rule of Goyal et al. 2017), ramped
// linearly as target x (step+1)/warmupSteps during the first warmupSteps steps.
double learningRate(const config::TrainConfig& cfg, int workers, std::int64_t step);

}  // namespace pstrain::optim
