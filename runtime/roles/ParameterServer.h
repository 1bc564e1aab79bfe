#pragma once
// Rank 0 of the server modes: owns the authoritative weights and the optimizer, drives the
// step protocol (protocol/StepProtocol.h) and leaves the run's files through a Publisher.
// One loop per exchange of Mode.h (roles/Exchanges.cpp picks it; diloco's rounds are in
// rounds/):
//   collective (sync):        one broadcast of the weights, one sum-reduce of the gradients
//                             per step (with --overlap, bucket by bucket);
//   point to point (backup,   each worker pushes its gradient and gets weights back; an
//   async):                   update takes the mode's quorum of gradients, and a stale one
//                             is dropped (backup) or recomputed (async, Control::Retry).
#include "runtime/roles/RoleArgs.h"

namespace pstrain::roles {

// Rank 0's part: args.model holds the initial weights (broadcast at the first step; with
// args.resume, the checkpoint's, and the run continues at its step with its optimizer
// state). Runs every step (or until --max-seconds or a stop request), then tells the
// workers to stop and writes the final files; on return the model holds the final weights.
// Collective with the worker of the same exchange (Worker.h) on every other rank.
void serveCollective(const RoleArgs& args);
void servePointToPoint(const RoleArgs& args);

}  // namespace pstrain::roles
