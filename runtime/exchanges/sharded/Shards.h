#pragma once
// The sharded exchange's servers (Sharded.h), private to its folder: ranks 0..K-1, server 0
// also doing what sync's rank 0 does. Its workers are RangesWorker.h's, in lockstep.
#include "runtime/roles/RoleArgs.h"

namespace pstrain::exchanges::sharded {

void serve(const roles::RoleArgs& args);

}  // namespace pstrain::exchanges::sharded
