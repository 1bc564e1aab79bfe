#include "runtime/roles/SummedStep.h"

#include <torch/torch.h>

#include <algorithm>

#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepProtocol.h"

namespace pstrain::roles {

using namespace protocol;

bool applySummed(Admission& admission, RangeUpdate& update, StepMessages& messages, models::Net& model, double lr,
                 int contributors, std::int64_t step) {
  // Skipping needs the finite check before the update; otherwise the update's own pass is the
  // check (the job stops on a failed one).
  const double by = admission.divisor(messages.trailer, step, [&] { return update.finite(); },
                                      [&] { return update.sumOfSquares(); });
  if (by == 0) return false;
  if (!update.step(lr, by)) throw admission.nonFinite(step);
  averageBuffers(messages, model, contributors);
  return true;
}

bool applySummedPart(Admission& admission, RangeUpdate& update, StepMessages& messages, models::Net& model, double lr,
                     int contributors, std::int64_t step, std::int64_t begin, std::int64_t count) {
  const at::Tensor sum = messages.grad.narrow(0, begin, count);
  const double by = admission.divisor(messages.trailer, step, [&] { return allFinite(sum); },
                                      [&] { return optim::sumOfSquares(sum); });
  if (by == 0) return false;
  update.beginParts();
  if (!update.stepPart(sum.data_ptr<float>(), begin, count, lr, by)) throw admission.nonFinite(step);
  averageBuffers(messages, model, contributors);
  return true;
}

void averageBuffers(StepMessages& messages, models::Net& model, int contributors) {
  if (messages.serverBuffers.numel() == 0) return;
  messages.serverBuffers.copy_(messages.workerBuffers).div_(contributors);
  writeBuffers(model, messages.serverBuffers);
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
