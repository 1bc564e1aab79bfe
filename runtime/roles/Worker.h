#pragma once
// Ranks 1..N of the server modes: receive weights, compute the gradient on this worker's
// next batch, send it back; until the server says stop. In the collective exchange (sync)
// the batch is the step's; point to point (backup, async) each worker walks its own shard at
// its own pace, and computes the same batch again when the server answers Retry.
#include "runtime/roles/RoleArgs.h"

namespace pstrain::roles {

// args.model must already be on args.device; the worker's virtual shards are those of
// worker rank - 1 of size - 1. Collective with the server's loop of the same exchange on
// rank 0 (ParameterServer.h).
void runCollectiveWorker(const RoleArgs& args);
void runPointToPointWorker(const RoleArgs& args);

}  // namespace pstrain::roles
