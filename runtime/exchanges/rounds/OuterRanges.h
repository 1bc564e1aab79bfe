#pragma once
// The outer step over K servers (--servers with diloco or localsgd), private to this folder:
// server k holds range k of the global weights (and of the copy the workers hold, under a
// lossy down codec) and of the outer optimizer's state, takes its range of the summed
// pseudo-gradient from the chain (RoundChain.h) and sends its range down; server 0 runs the
// rounds (RoundsServer.cpp) and decides for every server as every exchange's server 0 does
// (exchanges/ServerZero.h, its range 0 moved by the chain).
#include "runtime/roles/RoleArgs.h"

namespace pstrain::exchanges::rounds {

// Servers 1..K-1: their range, round by round as server 0 says.
void followRounds(const roles::RoleArgs& args);

}  // namespace pstrain::exchanges::rounds
