#pragma once
// The range servers' exchange's servers (RangeServers.h), private to its folder: ranks 0..K-1, server 0
// also doing what sync's rank 0 does. Its workers are RangesWorker.h's, in lockstep.
#include "runtime/roles/RoleArgs.h"

namespace pstrain::exchanges::range_servers {

void serve(const roles::RoleArgs& args);

}  // namespace pstrain::exchanges::range_servers
