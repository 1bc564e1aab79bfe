#pragma once
// What --probe measures, on every rank at once: each computing rank's batches, one worker's
// codecs, rank 0's update, and each worker's link to rank 0 (messages of the model's size);
// gathered to rank 0 and made the cost model's input (CostModel.h).
#include <c10/core/Device.h>

#include <type_traits>
#include <vector>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/Codecs.h"
#include "runtime/config/RunPlan.h"
#include "runtime/probe/CostModel.h"

namespace pstrain::probe {

// What one rank measured, gathered to rank 0 as these bytes (a trivially copyable struct:
// every rank runs the same build). Codec costs are measured on the first computing rank.
struct Measured {
  double computeSeconds = 0;  // a computing rank's median batch
  double latencySeconds = 0;  // a worker's link to rank 0
  double bytesPerSecond = 0;
  double updateSeconds = 0;   // rank 0's update of the whole model
  CodecCost gradientCodecs[config::kCodecCount];  // by row of config::kCodecs; zeros where not probed
  CodecCost weightCodecs[config::kCodecCount];
};
static_assert(std::is_trivially_copyable_v<Measured>, "gathered as bytes");

// The computing ranks, as the real run would have them.
std::vector<int> computingRanks(const config::TrainConfig& cfg, int size);

// This rank's part, in order: batches (every computing rank at once; `train` is null where
// the rank does not compute), the codecs (the first computing rank, with a real gradient and
// the weights), rank 0's update, then each worker's link to rank 0, one at a time (messages
// of the model's size). Collective.
Measured measure(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
                 const data::Dataset* train, c10::Device device);

// Every rank's Measured, on rank 0 (empty elsewhere). Collective.
std::vector<Measured> gather(comm::Communicator& comm, const Measured& mine);

// The cost model's input from every rank's measurements. A computing rank 0 (peer modes) has
// no link of its own to rank 0: it gets the worst of its peers' (none alone).
ProbeMeasurements costInputs(const config::TrainConfig& cfg, const std::vector<int>& computing,
                             const std::vector<Measured>& all);

}  // namespace pstrain::probe
