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
  std::string yieldWhenIdle = "default";  // Open MPI's mpi_yield_when_idle, and who set it
};

// The start-up checks (world size, handshake), then the roles of cfg.mode: ParameterServer
// on rank 0 and Worker on the others, or runPeers on every rank. `train` is null on a
// server rank, which never reads data (needsTrainingData); `model` is freshly initialised
// from cfg.seed on every rank and lives on `device` (the CPU on a server).
// Collective over every rank of `comm`; throws on any error.
// Whether `rank` computes gradients (and so reads the training set) in cfg.mode.
bool computesGradients(const config::TrainConfig& cfg, int rank);

void runTraining(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
                 const data::Dataset* train, c10::Device device, const RunInfo& info);

}  // namespace pstrain::roles
