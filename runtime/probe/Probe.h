#pragma once
// pstrain --probe: under the same mpirun and flags as a real run, every computing rank
// times a few training steps of the configured model, batch and device (after warm-up,
// all at once, as they would train), rank 0 times its update, each worker's link to rank 0
// is timed with messages of the model's size, and one worker times the codecs. Rank 0 then
// prints the cost model's predictions (CostModel.h) for 1..N workers, each mode and codec,
// and a recommendation, and writes probe.json into the train dir. Trains nothing.
#include <c10/core/Device.h>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/RunPlan.h"
#include "runtime/training/Training.h"

namespace pstrain::probe {

// The real run's start-up checks (training::startRun), then the probe. Collective over every
// rank of `comm`; `train` is null where the rank does not compute.
void runProbe(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
              const data::Dataset* train, c10::Device device, const training::RunInfo& info);

}  // namespace pstrain::probe
