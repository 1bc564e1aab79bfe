#include "runtime/roles/SummedUpdate.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "runtime/protocol/StepProtocol.h"

namespace pstrain::roles {

using namespace protocol;

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

SummedUpdate::SummedUpdate(const config::TrainConfig& cfg, optim::Optimizer& optimizer, models::Net& model,
                           protocol::StepMessages& messages)
    : cfg_(cfg), optimizer_(optimizer), model_(model), messages_(messages) {
  if (cfg.lossScaling()) lossScale_.emplace(cfg.lossScaleWindow);
}

bool SummedUpdate::apply(double lr, int contributors, std::int64_t step) {
  // Skipping needs the finite check before the update; otherwise the update's own pass is the
  // check (the job stops on a failed one).
  const double by = divisor(step, [&] { return allFinite(messages_.grad); },
                            [&] { return optim::sumOfSquares(messages_.grad); });
  if (by == 0) return false;
  if (!optimizer_.step(messages_.weights, messages_.grad, lr, by)) throw nonFinite(step);
  averageBuffers(contributors);
  return true;
}

double SummedUpdate::divisor(std::int64_t step, const std::function<bool()>& finiteGradient,
                             const std::function<double()>& sumOfSquares) {
  const float* trailer = messages_.trailer;
  const double samples = trailer[kSamples];
  if (!(std::isfinite(samples) && samples > 0)) throw Error(fmt::format("step {}: the workers sent {} samples", step, samples));
  // Workers stop the job themselves on a non-finite loss unless --skip-nonfinite or loss
  // scaling; an overflow can still appear only in the sum.
  const bool finiteLoss = trailer[kNonFinite] == 0 && std::isfinite(trailer[kLossSum]);
  if (!admits(step, finiteLoss, finiteGradient)) return 0;
  if (!finiteLoss) throw nonFinite(step);
  // clip_grad_norm_'s factor scales the averaged gradient: the divisor grows by its inverse.
  gradNorm_ = std::sqrt(sumOfSquares()) / samples;
  return samples / optim::clipFactor(gradNorm_, cfg_.clipGradNorm);
}

bool SummedUpdate::admits(std::int64_t step, bool finiteLoss, const std::function<bool()>& finiteGradient) {
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
                             "update skipped (--skip-nonfinite)", step, messages_.trailer[kNonFinite])
              << std::endl;
    return false;
  }
  return true;
}

void SummedUpdate::applyBucket(const Bucket& bucket, at::Tensor& grad, double lr, double samples, std::int64_t step) {
  const std::int64_t n = messages_.weights.numel();
  if (sumOfSquares_ < 0) {  // the update's first bucket
    optimizer_.beginUpdate();
    sumOfSquares_ = 0;
  }
  sumOfSquares_ += optim::sumOfSquares(grad) / (samples * samples);
  if (!optimizer_.stepSlice(messages_.weights.narrow(0, bucket.begin, bucket.end - bucket.begin), grad, lr,
                            bucket.begin, n, samples)) {
    throw nonFinite(step);
  }
}

void SummedUpdate::finish(double samples, int contributors, std::int64_t step) {
  gradNorm_ = std::sqrt(sumOfSquares_);
  sumOfSquares_ = -1;  // the next bucket starts a new update
  expectSamples(samples, step);
  averageBuffers(contributors);
}

void SummedUpdate::expectSamples(double samples, std::int64_t step) const {
  if (!sameCount(messages_.trailer[kSamples], samples)) {
    throw Error(fmt::format("step {}: the workers sent {} samples, their shards hold {}", step,
                            messages_.trailer[kSamples], samples));
  }
}

void SummedUpdate::averageBuffers(int contributors) {
  if (messages_.serverBuffers.numel() == 0) return;
  messages_.serverBuffers.copy_(messages_.workerBuffers).div_(contributors);
  writeBuffers(model_, messages_.serverBuffers);
}

Error SummedUpdate::nonFinite(std::int64_t step) const {
  return Error(fmt::format("step {}: the summed gradient of the workers is not finite{}; lower --lr{} "
                           "(the last good checkpoint is kept)",
                           step, cfg_.skipNonfinite ? " (the weights overflowed)" : "",
                           cfg_.skipNonfinite ? "" : ", or --skip-nonfinite to drop such steps"));
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

}  // namespace pstrain::roles
