#pragma once
// Whether a summed gradient updates the weights, and divided by what: the admission rules,
// written once for every mode and any number of servers (SummedStep.h's applySummed, the K servers'
// decide() in exchanges/LeadMessages.h, the rounds' inner and outer steps). From the summed
// trailer (samples, loss, the workers' non-finite count) and, asked only where they matter,
// the summed gradient's finiteness and sum of squares: the sample count checked,
// --skip-nonfinite, dynamic loss scaling (its scale and state), --clip-grad-norm's factor.
#include <cstdint>
#include <functional>
#include <optional>

#include "runtime/Errors.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/optim/LossScale.h"

namespace pstrain::roles {

class Admission {
 public:
  explicit Admission(const config::TrainConfig& cfg);

  // The divisor of the update (the samples over the clip factor; it sets gradNorm()), or 0
  // when the update is skipped (--skip-nonfinite, or an overflow under loss scaling, which
  // is recorded and said). Throws Error naming `step` for a sample count that is not a
  // positive number, or a non-finite loss that is not skipped; a non-finite gradient that
  // is not skipped is left to the caller (throw nonFinite()).
  double divisor(const float* trailer, std::int64_t step, const std::function<bool()>& finiteGradient,
                 const std::function<double()>& sumOfSquares);
  Error nonFinite(std::int64_t step) const;
  // Throws Error naming `step` unless the summed trailer counts `samples` samples (the count
  // an update made on arrival divided by).
  void expectSamples(const float* trailer, double samples, std::int64_t step) const;

  // The L2 norm of the last admitted update's averaged gradient, before clipping (an update
  // made on arrival, part by part, sets it when done).
  double gradNorm() const { return gradNorm_; }
  void setGradNorm(double norm) { gradNorm_ = norm; }

  // What the next gradients' losses are to be multiplied by: the loss scale (1 without
  // cfg.lossScaling()), and its state (null without).
  double lossScale() const { return lossScale_ ? lossScale_->scale() : 1.0; }
  optim::LossScale* lossScaling() { return lossScale_ ? &*lossScale_ : nullptr; }
  const optim::LossScale* lossScaling() const { return lossScale_ ? &*lossScale_ : nullptr; }

 private:
  bool admits(const float* trailer, std::int64_t step, bool finiteLoss, const std::function<bool()>& finiteGradient);

  const config::TrainConfig& cfg_;
  double gradNorm_ = 0;
  std::optional<optim::LossScale> lossScale_;  // with cfg.lossScaling()
};

}  // namespace pstrain::roles
