#pragma once
// The optimizer update from summed up messages (protocol/StepProtocol.h), written once for
// the server of every mode, for every rank of the allreduce and gossip modes, and for the
// sync server that updates each gradient bucket as it arrives (--overlap).
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "models/Registry.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/roles/Admission.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/StepStats.h"

namespace pstrain::roles {

// Steps messages.weights (and `model`'s buffers) from messages.up, which holds the sum of the
// up messages of `contributors` micro-batches (a worker's up message sums those of its
// virtual shards), as `admission` admits it. All references must outlive the object; one
// object serves a whole run.
class SummedUpdate {
 public:
  SummedUpdate(Admission& admission, optim::Optimizer& optimizer, models::Net& model, protocol::StepMessages& messages);

  // Steps the weights with the gradient of the mean loss over trailer[kSamples] samples
  // (its L2 norm clipped to --clip-grad-norm first), and sets messages.serverBuffers (and
  // the model's buffers) to the micro-batches' mean buffers. Returns false, changing
  // nothing, when the admission skips it (Admission::divisor); throws Error naming `step`
  // when it is not finite otherwise. With loss scaling the workers divided their gradients
  // by the scale already.
  bool apply(double lr, int contributors, std::int64_t step);

  // The same in pieces, for a step whose sample count is known beforehand (`samples`): each
  // bucket's summed gradient `grad` (scratch, left unspecified) as soon as it is there, then
  // finish() once the rest of the up message is: it checks the sample count, sets the
  // admission's gradNorm and averages the buffers. A step over every bucket equals apply().
  // Not under --skip-nonfinite or --clip-grad-norm (which need the whole gradient first).
  void applyBucket(const protocol::Bucket& bucket, at::Tensor& grad, double lr, double samples, std::int64_t step);
  void finish(double samples, int contributors, std::int64_t step);

  // messages.serverBuffers and the model's buffers: the mean of the summed ones.
  void averageBuffers(int contributors);

 private:
  Admission& admission_;
  optim::Optimizer& optimizer_;
  double sumOfSquares_ = -1;  // of the averaged gradient over this update's buckets so far; -1: none begun
  models::Net& model_;
  protocol::StepMessages& messages_;
};

// The accounting in the trailer of messages.up, summed over `contributors` workers: loss
// and samples as sums, compute and data-wait times as the contributors' mean, and the
// slowest contributor's compute time.
StepStats summedStats(const protocol::StepMessages& messages, int contributors);

// Whether every value of a contiguous float tensor is finite. One pass, no temporary
// tensor (torch::isfinite(t).all() allocates two).
bool allFinite(const at::Tensor& values);

}  // namespace pstrain::roles
