#pragma once
// --balance (sync): each step's virtual shards dealt to the workers in proportion to their
// measured speed, so that a slow host gets fewer, a fast one more, and every worker's part
// of a step takes about as long. The weights do not depend on who computes which shard
// (up to summation order): only the step's time does. The counts travel in the down
// message's shares, one float per rank, in rank order; a worker's shards are the
// contiguous block after those of the ranks before it.
#include <vector>

namespace pstrain::roles {

class ShareBalancer {
 public:
  // Ranks firstWorker..firstWorker+workers-1 are the workers of `shards` virtual shards
  // (the ranks before them serve: 1, or --servers K; diloco's shards are a round's local
  // steps, each worker's counted up from the others'); without `enabled` the counts stay
  // those of data::virtualShardsOf. New counts are considered every `rebalanceEvery`
  // measurements: sync's steps are short and noisy, a diloco round is many steps long.
  ShareBalancer(int firstWorker, int workers, int shards, bool enabled, int rebalanceEvery = 5);

  // A step's per-rank compute seconds (the trailer's kComputeSeconds slots) for the counts
  // last written: smoothed seconds per shard, and every few steps new counts.
  void record(const float* computeSeconds);
  // The counts, one float per rank (the servers': 0).
  void write(float* shares) const;
  const std::vector<int>& counts() const { return counts_; }

  // `shards` dealt in proportion to `speed` (shards per second, one per worker), at least
  // one each, so that the slowest worker's part of a step is as short as it can be.
  static std::vector<int> proportional(const std::vector<double>& speed, int shards);

 private:
  int firstWorker_;
  int shards_;
  bool enabled_;
  std::vector<int> counts_;               // by worker (rank - firstWorker)
  std::vector<double> secondsPerShard_;   // by worker, smoothed; 0 until measured
  int rebalanceEvery_;
  int steps_ = 0;
};

// The virtual shards of `rank` given the step's `shares` (one float per rank).
std::vector<int> shardsOfRank(const float* shares, int ranks, int rank);

}  // namespace pstrain::roles
