#pragma once
// Ranks 1..N of the server modes: receive weights, compute the gradient on this worker's
// next batch, send it back; until the server says stop. In the collective exchange (sync)
// the batch is the step's; point to point (backup, async) each worker walks its own shard at
// its own pace, and computes the same batch again when the server answers Retry.
#include <c10/core/Device.h>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::roles {

// `model` must already be on `device`; the worker's virtual shards are those of worker
// rank - 1 of size - 1. Collective with runServer() on rank 0.
void runWorker(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
               const data::Dataset& train, c10::Device device);

}  // namespace pstrain::roles
