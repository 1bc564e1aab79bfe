#include "runtime/roles/Admission.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/StepProtocol.h"

namespace pstrain::roles {

using namespace protocol;

Admission::Admission(const config::TrainConfig& cfg) : cfg_(cfg) {
  if (cfg.lossScaling()) lossScale_.emplace(cfg.lossScaleWindow);
}

double Admission::divisor(const float* trailer, std::int64_t step, const std::function<bool()>& finiteGradient,
                          const std::function<double()>& sumOfSquares) {
  const double samples = trailer[kSamples];
  if (!(std::isfinite(samples) && samples > 0)) throw Error(fmt::format("step {}: the workers sent {} samples", step, samples));
  // Workers stop the job themselves on a non-finite loss unless --skip-nonfinite or loss
  // scaling; an overflow can still appear only in the sum.
  const bool finiteLoss = trailer[kNonFinite] == 0 && std::isfinite(trailer[kLossSum]);
  if (!admits(trailer, step, finiteLoss, finiteGradient)) return 0;
  if (!finiteLoss) throw nonFinite(step);
  // clip_grad_norm_'s factor scales the averaged gradient: the divisor grows by its inverse.
  gradNorm_ = std::sqrt(sumOfSquares()) / samples;
  return samples / optim::clipFactor(gradNorm_, cfg_.clipGradNorm);
}

bool Admission::admits(const float* trailer, std::int64_t step, bool finiteLoss,
                       const std::function<bool()>& finiteGradient) {
  if (lossScale_) {
    const double scale = lossScale_->scale();
    const bool finite = finiteLoss && finiteGradient();
    lossScale_->record(finite, step);
    if (!finite) {
      std::cout << fmt::format("pstrain: step {}: the gradient overflowed at loss scale {:g}; update skipped, the "
                               "scale is now {:g}", step, scale, lossScale_->scale())
                << std::endl;
      return false;
    }
  } else if (cfg_.skipNonfinite && !(finiteLoss && finiteGradient())) {
    std::cout << fmt::format("pstrain: step {}: non-finite loss or gradient ({} worker(s) reported one); "
                             "update skipped (--skip-nonfinite)", step, trailer[kNonFinite])
              << std::endl;
    return false;
  }
  return true;
}

void Admission::expectSamples(const float* trailer, double samples, std::int64_t step) const {
  if (!sameCount(trailer[kSamples], samples)) {
    throw Error(fmt::format("step {}: the workers sent {} samples, their shards hold {}", step, trailer[kSamples],
                            samples));
  }
}

Error Admission::nonFinite(std::int64_t step) const {
  return Error(fmt::format("step {}: the summed gradient of the workers is not finite{}; lower --lr{} "
                           "(the last good checkpoint is kept)",
                           step, cfg_.skipNonfinite ? " (the weights overflowed)" : "",
                           cfg_.skipNonfinite ? "" : ", or --skip-nonfinite to drop such steps"));
}

}  // namespace pstrain::roles
