#include "runtime/optim/LrSchedule.h"

namespace pstrain::optim {

double learningRate(const config::TrainConfig& cfg, int workers, std::int64_t step) {
  double target = cfg.lrScaling == "linear" ? cfg.lr * workers : cfg.lr;
  if (step < cfg.warmupSteps) {
    return target * static_cast<double>(step + 1) / static_cast<double>(cfg.warmupSteps);
  }
  return target;
}

}  // namespace pstrain::optim
