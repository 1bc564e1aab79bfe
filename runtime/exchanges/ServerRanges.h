#pragma once
// The run's key ranges, one per server (--servers; exchanges/Ranges.h cuts them). Each is
// updated by a roles::RangeUpdate; what the servers say to each other about it is in
// LeadMessages.h.
#include <cstdint>
#include <vector>

#include "models/Registry.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/Ranges.h"

namespace pstrain::exchanges {

// The run's key ranges of `model`'s parameters, one per server (Ranges.h): whole tensors
// where rangesKeepTensorsWhole(cfg).
std::vector<KeyRange> serverRanges(const models::Net& model, const config::TrainConfig& cfg);
// Whether the ranges keep tensors whole: a gradient or a weight codec's frames and scales are
// per tensor, and so stay one server's.
bool rangesKeepTensorsWhole(const config::TrainConfig& cfg);

}  // namespace pstrain::exchanges
