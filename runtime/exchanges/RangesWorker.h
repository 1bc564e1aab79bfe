#pragma once
// A worker of the K servers' exchanges (Wire.h): every range of the weights in, the gradient
// on this worker's next batch, every range of it out; until server 0 says stop.
#include "runtime/roles/RoleArgs.h"

namespace pstrain::exchanges {

// How its batches follow the servers: in lockstep (sync: a batch is the step's, and the tail
// goes after the gradient, streamed where the run streams), or at its own pace (point to
// point: it counts its own batches, computes the same one again when server 0 answers
// Retry, and its tail goes first).
enum class Pace { Lockstep, Own };

void runRangesWorker(const roles::RoleArgs& args, Pace pace);

}  // namespace pstrain::exchanges
