#pragma once
// Rank 0 of the server modes: owns the authoritative weights and the optimizer, drives the
// step protocol (protocol/StepProtocol.h) and leaves the run's files through a Publisher.
// Two loops, one per exchange of Mode.h:
//   collective (sync):        one broadcast of the weights, one sum-reduce of the gradients
//                             per step (with --overlap, bucket by bucket);
//   point to point (backup,   each worker pushes its gradient and gets weights back; an
//   async):                   update takes the mode's quorum of gradients, and a stale one
//                             is dropped (backup) or recomputed (async, Control::Retry).
#include <cstdint>

#include "models/Registry.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::roles {

// `model` holds the initial weights (they are broadcast at the first step) and must stay on
// the CPU; `trainSamples` is the workers' training-set size (from the handshake).
// `resumeFrom`, when not null, is the checkpoint whose weights `model` already holds: the
// run continues at its step with its optimizer state. Runs every step (or until
// --max-seconds or a stop request), then tells the workers to stop and writes the final
// files; on return the model holds the final weights. Collective: every worker must be in
// runWorker().
void runServer(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
               std::int64_t trainSamples, const checkpoint::Checkpoint* resumeFrom);

}  // namespace pstrain::roles
