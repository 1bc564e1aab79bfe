#pragma once
// Ranks 1..N of the step exchanges (exchanges/collective, exchanges/point_to_point): receive
// weights, compute the gradient on this worker's next batch, send it back; until the server
// says stop. The exchange says how the messages travel and whose count a batch follows.
#include <string>

#include "runtime/protocol/StepLink.h"
#include "runtime/roles/RoleArgs.h"

namespace pstrain::roles {

// How a worker's messages travel in one exchange: the weights down, the gradient up, and
// whether its batches are the server's steps (lockstep: the collective exchange) or its own
// count (each worker walks its own shard at its own pace, and computes the same batch again
// when the server answers Retry).
struct WorkerExchange {
  void (protocol::StepLink::*down)(const std::string& context);
  void (protocol::StepLink::*up)(const std::string& context);
  bool lockstep;
};

// args.model must already be on args.device; the worker's virtual shards are those of
// worker rank - 1 of size - 1. Collective with the exchange's server loop on rank 0.
void runWorker(const RoleArgs& args, const WorkerExchange& exchange);

}  // namespace pstrain::roles
