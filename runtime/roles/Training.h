#pragma once
// One rank's part of a training job, as main() and the multi-rank tests run it.
#include <c10/core/Device.h>

#include <string>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::roles {

struct RunInfo {
  std::string mpiLibrary = "none";  // recorded in run.json
  std::string commandLine;
};

// The start-up checks (world size, handshake), then ParameterServer on rank 0 or Worker on
// the others. `train` is null on rank 0, which never reads data; `model` is freshly
// initialised from cfg.seed on every rank and lives on `device` (the CPU on rank 0).
// Collective over every rank of `comm`; throws on any error.
void runTraining(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
                 const data::Dataset* train, c10::Device device, const RunInfo& info);

}  // namespace pstrain::roles
