#pragma once
// Which samples each virtual shard trains on at each step: a pure function of (dataset
// size, number of shards, batch size, seed, step), so every worker computes its shards'
// batches without talking to anyone and a run can resume at any step, with any number of
// workers (a step deals its global batch to the shards, whoever computes them).
//
// Every epoch the whole index range is permuted from (seed, epoch) and dealt round-robin
// to the shards, as torch's DistributedSampler does: shards are disjoint, equal in size
// (ceil(n / shards); the few missing slots repeat the start of the permutation) and
// together cover the whole set. The last batch of an epoch may be smaller than the others.
// The permutation uses its own integer arithmetic, so Macs and Linux boxes agree.
//
// A token stream (windowLength L > 0) is dealt by random draws instead: its samples are the
// windows starting at offsets [0, datasetSize), and sample j of shard s at step t is the
// offset windowDraw(seed, t, s, j) (below), the same whoever computes it. Every batch is
// full, and an epoch is the stream's tokens / (L x the global batch) steps (at least one).
#include <cstdint>
#include <vector>

namespace pstrain::data {

// The virtual shards that worker `worker` of `workers` computes when a step's global batch
// is dealt to `shards` virtual shards (elastic runs fix `shards` and let the workers come
// and go): a contiguous block, ceil or floor of shards / workers of them. Throws
// ConfigError when there are more workers than shards.
std::vector<int> virtualShardsOf(int worker, int workers, int shards);

// A token stream's window offset: sample j of virtual shard `shard` at step `step`, in
// [0, offsets). With mix64 splitmix64's finaliser and G = 0x9E3779B97F4A7C15, all modulo
// 2^64:  h = mix64(seed + G); h = mix64(h ^ (step + G)); h = mix64(h ^ (shard + G));
// h = mix64(h ^ (j + G)); the offset is h mod offsets. (tools/ scripts redo it in Python.)
std::int64_t windowDraw(std::uint64_t seed, std::int64_t step, int shard, std::int64_t j, std::int64_t offsets);

class ShardSampler {
 public:
  ShardSampler(std::int64_t datasetSize, int shards, std::int64_t batchSize, std::uint64_t seed,
               std::int64_t windowLength = 0);

  // Samples per shard and epoch (a token stream's: its windows per epoch / shards).
  std::int64_t shardSize() const { return shardSize_; }
  std::int64_t stepsPerEpoch() const { return stepsPerEpoch_; }
  std::int64_t epochOf(std::int64_t step) const { return step / stepsPerEpoch_; }

  // How many samples every shard's batch has at global step `step` (shards are equal in
  // size): batch(shard, step).size() without computing the epoch's permutation.
  std::int64_t batchSizeAt(std::int64_t step) const;

  // Dataset indices of shard `shard` (0-based) at global step `step`.
  std::vector<std::int64_t> batch(int shard, std::int64_t step) const;

  // The permutation of [0, datasetSize) used in `epoch`.
  std::vector<std::int64_t> permutation(std::int64_t epoch) const;

 private:
  std::int64_t size_;
  std::int64_t windowLength_;
  int shards_;
  std::int64_t batchSize_;
  std::uint64_t seed_;
  std::int64_t shardSize_;
  std::int64_t stepsPerEpoch_;
  mutable std::int64_t cachedEpoch_ = -1;
  mutable std::vector<std::int64_t> cached_;
};

}  // namespace pstrain::data
