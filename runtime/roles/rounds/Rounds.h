#pragma once
// The local-rounds exchange (diloco): each worker trains alone from the global weights for
// a round of local steps (rank 0 deals them: the down message's shares), with --optimizer,
// whose state stays across rounds; then its pseudo-gradient (global - local weights) goes
// up, summed along the workers (RoundChain), and rank 0 steps the global weights with the
// outer optimizer (UpdateState::rule) on the mean and sends them, or the update toward
// them, back down. With overlapped rounds a worker trains on while the exchange travels,
// and moves its progress onto the new global weights as soon as they are in.
#include "runtime/roles/RoleArgs.h"

namespace pstrain::roles {

// Rank 0's part (RoundsServer.cpp) and every other rank's (RoundsWorker.cpp). Collective
// with each other; throw on any error.
void serveRounds(const RoleArgs& args);
void runRoundsWorker(const RoleArgs& args);

}  // namespace pstrain::roles
