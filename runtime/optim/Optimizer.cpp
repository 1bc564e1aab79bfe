#include "runtime/optim/Optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/Errors.h"
#include "runtime/optim/Adam.h"
#include "runtime/optim/Sgd.h"

namespace pstrain::optim {

std::unique_ptr<Optimizer> makeOptimizer(const config::TrainConfig& cfg) {
  if (cfg.optimizer == "sgd") return std::make_unique<Sgd>(SgdOptions{cfg.momentum, cfg.weightDecay, cfg.nesterov});
  if (cfg.optimizer == "adam" || cfg.optimizer == "adamw") {
    const auto [beta1, beta2] = cfg.adamBetas();
    return std::make_unique<Adam>(AdamOptions{beta1, beta2, cfg.eps, cfg.weightDecay, cfg.optimizer == "adamw"});
  }
  throw ConfigError("--optimizer '" + cfg.optimizer + "' is not one of: sgd, adam, adamw");
}

double clipFactor(double norm, double maxNorm) {
  if (maxNorm <= 0) return 1;
  return std::min(1.0, maxNorm / (norm + 1e-6));
}

double sumOfSquares(const at::Tensor& values) {
  const float* p = values.data_ptr<float>();
  double sum = 0;
  for (std::int64_t i = 0, n = values.numel(); i < n; ++i) sum += static_cast<double>(p[i]) * p[i];
  return sum;
}

}  // namespace pstrain::optim
