#pragma once
// The optimizer update from a summed up message (StepProtocol.h), written once for the
// server of every mode and for every rank of the allreduce mode.
#include <cstdint>

#include "models/Registry.h"
#include "runtime/Errors.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/optim/Sgd.h"
#include "runtime/roles/Publisher.h"
#include "runtime/roles/StepMessages.h"

namespace pstrain::roles {

// messages.up holds the sum of up messages over `contributors` micro-batches (a worker's
// up message sums those of its virtual shards). Steps messages.weights with the gradient
// of the mean loss over trailer[kSamples] samples, and sets messages.serverBuffers (and
// `model`'s buffers) to the micro-batches' mean buffers.
// Returns false, changing nothing, when the loss or gradient is not finite and
// cfg.skipNonfinite; throws Error naming `step` when it is not finite otherwise.
bool applySummedUpdate(StepMessages& messages, optim::Sgd& sgd, double lr, int contributors, models::Net& model,
                       const config::TrainConfig& cfg, std::int64_t step);

// The error that stops the job at `step` when its update is not finite.
Error nonFiniteUpdate(std::int64_t step, const config::TrainConfig& cfg);

// The accounting in the trailer of messages.up, summed over `contributors` workers: loss
// and samples as sums, compute and data-wait times as the contributors' mean, and the
// slowest contributor's compute time.
StepStats summedStats(const StepMessages& messages, int contributors);

// Whether every value of a contiguous float tensor is finite. One pass, no temporary
// tensor (torch::isfinite(t).all() allocates two).
bool allFinite(const at::Tensor& values);

// The BatchNorm part alone: messages.serverBuffers and `model`'s buffers become the mean of
// the `contributors` micro-batches' buffers summed in messages.up.
void averageBuffers(StepMessages& messages, int contributors, models::Net& model);

}  // namespace pstrain::roles
