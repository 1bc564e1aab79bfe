#include "runtime/roles/SummedUpdate.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "runtime/Errors.h"
#include "runtime/roles/FlatParameters.h"

namespace pstrain::roles {

bool allFinite(const at::Tensor& values) {
  const float* p = values.data_ptr<float>();
  const std::int64_t n = values.numel();
  // Inf and NaN are the floats whose exponent bits are all ones; integer max vectorises.
  constexpr std::uint32_t kExponent = 0x7f800000u;
  std::uint32_t largest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    largest = std::max(largest, bits & kExponent);
  }
  return largest != kExponent;
}

bool applySummedUpdate(StepMessages& messages, optim::Sgd& sgd, double lr, int contributors, models::Net& model,
                       const config::TrainConfig& cfg, std::int64_t step) {
  const float* trailer = messages.trailer;
  const double samples = trailer[kSamples];
  if (!(std::isfinite(samples) && samples > 0)) throw Error(fmt::format("step {}: the workers sent {} samples", step, samples));
  // Workers stop the job themselves on a non-finite loss unless --skip-nonfinite; an
  // overflow can still appear only in the sum. Skipping needs the check before the update;
  // otherwise the update's own pass is the check (the job stops on a failed one).
  const bool finiteLoss = trailer[kNonFinite] == 0 && std::isfinite(trailer[kLossSum]);
  if (cfg.skipNonfinite && !(finiteLoss && allFinite(messages.grad))) {
    std::cout << fmt::format("pstrain: step {}: non-finite loss or gradient ({} worker(s) reported one); "
                             "update skipped (--skip-nonfinite)", step, trailer[kNonFinite])
              << std::endl;
    return false;
  }
  if (!finiteLoss || !sgd.step(messages.weights, messages.grad, lr, samples)) throw nonFiniteUpdate(step, cfg);
  averageBuffers(messages, contributors, model);
  return true;
}

Error nonFiniteUpdate(std::int64_t step, const config::TrainConfig& cfg) {
  return Error(fmt::format("step {}: the summed gradient of the workers is not finite{}; lower --lr{} "
                           "(the last good checkpoint is kept)",
                           step, cfg.skipNonfinite ? " (the weights overflowed)" : "",
                           cfg.skipNonfinite ? "" : ", or --skip-nonfinite to drop such steps"));
}

StepStats summedStats(const StepMessages& messages, int contributors) {
  const float* trailer = messages.trailer;
  StepStats s;
  s.lossSum = trailer[kLossSum];
  s.samples = trailer[kSamples];
  const float* computeSeconds = trailer + kComputeSeconds;
  for (int rank = 0; rank < messages.ranks; ++rank) {
    s.computeSeconds += computeSeconds[rank] / contributors;
    s.slowestComputeSeconds = std::max<double>(s.slowestComputeSeconds, computeSeconds[rank]);
  }
  s.dataWaitSeconds = trailer[kDataWaitSeconds] / contributors;
  s.codecSeconds = trailer[kCodecSeconds] / contributors;
  return s;
}

void averageBuffers(StepMessages& messages, int contributors, models::Net& model) {
  if (messages.serverBuffers.numel() == 0) return;
  messages.serverBuffers.copy_(messages.workerBuffers).div_(contributors);
  writeBuffers(model, messages.serverBuffers);
}

}  // namespace pstrain::roles
