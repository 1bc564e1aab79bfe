#pragma once
// --probe's advice on the network (NetworkMap.h's map against what MPI measured): each
// worker's subnets with rank 0, the workers that have a faster path than MPI took, and the
// mpirun option that gives MPI the fastest subnet, with the run's predicted throughput then.
#include <string>
#include <vector>

#include "runtime/config/TrainConfig.h"
#include "runtime/probe/CostModel.h"
#include "runtime/probe/NetworkMap.h"

namespace pstrain::probe {

// What the network map says, printed (`text`) and for probe.json's "network" (`json`).
struct NetworkAdvice {
  std::string text;
  std::string json;
};

// Each worker's subnets with rank 0, a line per worker that has a faster path than MPI's,
// and, when one subnet is faster for all of them, the mpirun option that gives MPI that
// subnet alone and the run's predicted throughput with it (`predictions`: with MPI's rates).
NetworkAdvice adviseNetwork(const config::TrainConfig& cfg, const std::vector<int>& computing, const ProbeMeasurements& m,
                            const std::vector<Prediction>& predictions, const std::vector<WorkerNetwork>& network);

}  // namespace pstrain::probe
