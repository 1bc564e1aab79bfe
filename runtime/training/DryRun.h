#pragma once
// Rank 0's account of a dry run (--dry-run): who does what, and what a real run would move
// and write.
#include <cstdint>
#include <string>

#include "models/Registry.h"
#include "runtime/config/RunPlan.h"
#include "runtime/training/Facts.h"

namespace pstrain::training {

// Prints the plan of `cfg` (resolved) over the ranks of `facts`: the world, each rank, the
// exchange and its codecs, the schedule, the checkpoints, `trainDirState`, and `memory`
// (MemoryPlan's lines).
void printPlan(const config::RunPlan& cfg, const RankFacts& facts, std::int64_t trainSamples,
               const models::Net& model, const std::string& trainDirState, const std::string& memory);

}  // namespace pstrain::training
