#pragma once
// One rank's part of a training job, as main() and the multi-rank tests run it: the
// start-up checks on every rank, then the dry run's plan or the roles of the mode (Mode.h).
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/Blas.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/RunPlan.h"
#include "runtime/training/MemoryPlan.h"
#include "runtime/rundir/TrainDir.h"

namespace pstrain::training {

struct RunInfo {
  std::string mpiLibrary = "none";  // recorded in run.json
  std::string commandLine;
  std::string yieldWhenIdle = "default";  // Open MPI's mpi_yield_when_idle, and who set it
  BlasInfo blas;  // this rank's (run.json, the dry run, the reference-BLAS warning)
};

// What the start-up decided, the same on every rank: the run's configuration (its virtual
// shards resolved by rank 0), every rank's facts (host, pid, device, threads, start-up
// phases...) and the training set's size; on rank 0 also its hold on the train dir and
// the checkpoint to resume from.
struct StartedRun {
  config::RunPlan run;
  std::vector<std::map<std::string, std::string>> facts;
  std::int64_t trainSamples = 0;
  std::unique_ptr<rundir::TrainDir> trainDir;    // rank 0
  std::optional<checkpoint::Checkpoint> resume;  // rank 0, with --resume and a valid checkpoint
  training::MemoryChoices memory;                // every host's --memory (run.memory: this rank's host's)
};

// The start-up on every rank of `comm`: the world's size for the mode, rank 0's train dir
// and resume point (whose weights `model` then holds), a model of the user's against its
// data, then the handshake (every rank's configuration and facts compared). `train` is null
// on a rank that does not compute (config::Layout::computes); `model` is freshly
// initialised from cfg.seed on every rank and lives on `device` (the CPU on a server).
// Collective; throws CollectiveConfigError (the same on every rank) or another error.
StartedRun startRun(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
                    const data::Dataset* train, c10::Device device, const RunInfo& info);

// What rank `rank` uses of its initial model (models::makeModel's `needed`): a server of
// K > 1 its part (exchanges/Exchange.h's serverWeights), so that it reads no more of a model
// file; every other rank, or a probe, all of it. `cfg` must outlive the function.
models::WeightsNeeded weightsNeeded(const config::TrainConfig& cfg, int rank);

// startRun, then with --dry-run rank 0 prints the plan; otherwise this rank's role in
// cfg's mode (training/Exchanges.h). Collective over every rank of `comm`; throws on any error.
void runTraining(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
                 const data::Dataset* train, c10::Device device, const RunInfo& info);

}  // namespace pstrain::training
