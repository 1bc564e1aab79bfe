#pragma once
// What a synchronous run must equal: one process training with torch::optim::SGD on the
// union of the samples that the workers see at each step.
#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::testsupport {

// Trains `model` for `steps` steps; at step t the batch is the concatenation of every
// virtual shard's ShardSampler batch (cfg.virtualShards of them, or `workers`), and the lr
// is optim::learningRate(cfg, shards, t).
void trainReference(models::Net& model, const data::Dataset& train, const config::TrainConfig& cfg,
                    int workers, std::int64_t steps);

// Largest |a - b| over tensors with the same key; throws if the key sets differ.
double maxAbsDiff(const checkpoint::TensorList& a, const checkpoint::TensorList& b);

// Deep copy, so later training does not change it.
checkpoint::TensorList cloneState(const checkpoint::TensorList& state);

// A small, fast configuration on the synthetic dataset for equivalence tests.
config::TrainConfig smallSyntheticConfig(const std::string& trainDir);

}  // namespace pstrain::testsupport
