#pragma once
// The start-up's refusals of a run that cannot go as configured, each the same on every rank
// (CollectiveConfigError), and its warning. Torch-free.
#include <cstdint>

#include "runtime/config/RunPlan.h"
#include "runtime/training/Facts.h"

namespace pstrain::training {

// Refuses a world that cfg's mode cannot run in, the same on every rank.
void checkWorld(const config::TrainConfig& cfg, int size);
// Refuses (the same on every rank, after the handshake) servers placed so that two share one
// host's link while another host has none, unless --stack-servers: each server's traffic is
// what sharding spreads.
void checkServerHosts(const config::TrainConfig& cfg, const RankFacts& facts);
// Refuses a batch that a virtual shard cannot fill without taking a sample twice, the same
// on every rank (after the handshake: the training set's size and the shards are agreed).
// A token stream's windows start anywhere: any batch is fine.
void checkBatchFitsShards(const config::RunPlan& run, std::int64_t trainSamples);
// Rank 0's one warning when a rank that computes on the CPU runs on the reference BLAS.
void warnOfReferenceBlas(const config::TrainConfig& cfg, const RankFacts& facts);

}  // namespace pstrain::training
