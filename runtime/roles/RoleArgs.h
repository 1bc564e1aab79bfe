#pragma once
// What every role of a run is started with (training/Exchanges.h picks the role).
#include <c10/core/Device.h>

#include <cstdint>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/RunPlan.h"

namespace pstrain::roles {

struct RoleArgs {
  comm::Communicator& comm;
  const config::RunPlan& cfg;  // the run: its flags and what start-up resolved (training::startRun)
  // Initialised from cfg.seed on every rank, on `device`; rank 0's holds the resumed
  // checkpoint's weights. A server's stays on the CPU.
  models::Net& model;
  const data::Dataset* train;      // on the ranks that compute; null elsewhere
  std::int64_t trainSamples;       // the training set's size (the workers', from the handshake)
  c10::Device device;
  const checkpoint::Checkpoint* resume;  // rank 0, with --resume and a valid checkpoint; else null
};

}  // namespace pstrain::roles
