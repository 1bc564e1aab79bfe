#pragma once
// Ranks 1..N of the server modes: receive weights, compute the gradient on this worker's
// next batch, send it back; until the server says stop. In sync mode the batch is the
// step's; in backup and async modes each worker walks its own shard at its own pace (and
// computes the same batch again when the server answers Retry).
#include <c10/core/Device.h>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::roles {

class Worker {
 public:
  // `model` must already be on `device`. The worker's shard is rank - 1 of size - 1.
  Worker(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
         const data::Dataset& train, c10::Device device);

  // Collective with ParameterServer::run() on rank 0.
  void run();

 private:
  comm::Communicator& comm_;
  const config::TrainConfig& cfg_;
  models::Net& model_;
  const data::Dataset& train_;
  c10::Device device_;
};

}  // namespace pstrain::roles
