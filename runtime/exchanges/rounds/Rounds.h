#pragma once
// The local-rounds exchange (diloco, localsgd): each worker trains alone from the global
// weights for a round of local steps (rank 0 deals them: the down message's shares), with
// --optimizer, whose state stays across rounds; then its pseudo-gradient (global - local
// weights) goes up, summed along the workers (RoundChain), and rank 0 steps the global
// weights with the outer optimizer (UpdateState::rule) on the mean and sends them, or the
// update toward them, back down. With overlapped rounds a worker trains on while the
// exchange travels, and moves its progress onto the new global weights as soon as they are
// in. What the rounds are (H, overlap, codecs): RoundsPlan.h. With --servers K, ranks
// 0..K-1 each hold a range of the global weights and of the outer state (OuterRanges.h).
#include "runtime/exchanges/Exchange.h"

namespace pstrain::exchanges {

extern const Exchange kLocalRounds;

// Seconds of one round's exchange with n workers (the probe's choice of H): the
// pseudo-gradients summed up the chain (each hop decodes, adds and encodes again), the outer
// update, the update (or the weights) down the chain.
double roundExchangeSeconds(const CodecCost& grad, const CodecCost& weights, const ProbeMeasurements& m, int n);

}  // namespace pstrain::exchanges

namespace pstrain::exchanges::rounds {

// Rank 0's part (RoundsServer.cpp), every other rank's (RoundsServer.cpp: servers 1..K-1
// follow, OuterRanges.h), and a worker's (RoundsWorker.cpp).
void serveRounds(const roles::RoleArgs& args);
void runRoundsOthers(const roles::RoleArgs& args);
void runRoundsWorker(const roles::RoleArgs& args);

}  // namespace pstrain::exchanges::rounds
