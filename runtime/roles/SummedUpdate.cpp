#include "runtime/roles/SummedUpdate.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>

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

SummedUpdate::SummedUpdate(Admission& admission, optim::Optimizer& optimizer, models::Net& model,
                           protocol::StepMessages& messages)
    : admission_(admission), optimizer_(optimizer), model_(model), messages_(messages) {}

bool SummedUpdate::apply(double lr, int contributors, std::int64_t step) {
  // Skipping needs the finite check before the update; otherwise the update's own pass is the
  // check (the job stops on a failed one).
  const double by = admission_.divisor(messages_.trailer, step, [&] { return allFinite(messages_.grad); },
                                       [&] { return optim::sumOfSquares(messages_.grad); });
  if (by == 0) return false;
  if (!optimizer_.step(messages_.weights, messages_.grad, lr, by)) throw admission_.nonFinite(step);
  averageBuffers(contributors);
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
    throw admission_.nonFinite(step);
  }
}

void SummedUpdate::finish(double samples, int contributors, std::int64_t step) {
  admission_.setGradNorm(std::sqrt(sumOfSquares_));
  sumOfSquares_ = -1;  // the next bucket starts a new update
  admission_.expectSamples(messages_.trailer, samples, step);
  averageBuffers(contributors);
}

void SummedUpdate::averageBuffers(int contributors) {
  if (messages_.serverBuffers.numel() == 0) return;
  messages_.serverBuffers.copy_(messages_.workerBuffers).div_(contributors);
  writeBuffers(model_, messages_.serverBuffers);
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
