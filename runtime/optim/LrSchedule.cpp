#include "runtime/optim/LrSchedule.h"

#include <cmath>

namespace pstrain::optim {

double learningRate(const config::TrainConfig& cfg, int workers, std::int64_t step,
                    std::int64_t totalSteps) {
  const double target = cfg.linearLrScaling() ? cfg.lr * workers : cfg.lr;
  if (step < cfg.warmupSteps) {
    return target * static_cast<double>(step + 1) / static_cast<double>(cfg.warmupSteps);
  }
  if (cfg.cosineLrDecay() && totalSteps > cfg.warmupSteps) {
    const double progress =
        static_cast<double>(step - cfg.warmupSteps) / static_cast<double>(totalSteps - cfg.warmupSteps);
    return target * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return target;
}

}  // namespace pstrain::optim
