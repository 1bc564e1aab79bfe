// Which samples each virtual shard trains on (data/ShardSampler).
#include <gtest/gtest.h>

#include <set>

#include "data/ShardSampler.h"
#include "runtime/Errors.h"

using namespace pstrain;

TEST(ShardSampler, ShardsAreDisjointAndCoverEveryEpoch) {
  const std::int64_t n = 103;
  data::ShardSampler sampler(n, 3, 8, 42);
  EXPECT_EQ(sampler.shardSize(), 35);
  EXPECT_EQ(sampler.stepsPerEpoch(), 5);
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<std::int64_t> seen;
    for (int shard = 0; shard < 3; ++shard) {
      for (std::int64_t s = 0; s < sampler.stepsPerEpoch(); ++s) {
        auto batch = sampler.batch(shard, epoch * sampler.stepsPerEpoch() + s);
        EXPECT_EQ(static_cast<std::int64_t>(batch.size()), s + 1 < sampler.stepsPerEpoch() ? 8 : 3);
        EXPECT_EQ(sampler.batchSizeAt(epoch * sampler.stepsPerEpoch() + s), static_cast<std::int64_t>(batch.size()));
        seen.insert(batch.begin(), batch.end());
      }
    }
    for (std::int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << "sample " << i;
    EXPECT_EQ(seen.size(), 105u);  // 2 padding samples repeat the start of the permutation
  }
  EXPECT_NE(sampler.permutation(0), sampler.permutation(1)) << "no reshuffle per epoch";
  EXPECT_EQ(sampler.permutation(1), data::ShardSampler(n, 3, 8, 42).permutation(1));
  EXPECT_NE(sampler.permutation(0), data::ShardSampler(n, 3, 8, 43).permutation(0));
}

// Virtual shards: whatever the number of workers, every sample of an epoch is computed
// exactly once, by exactly one worker, and each worker gets ceil or floor of V / N shards.
TEST(ShardSampler, VirtualShardsCoverEveryEpochWhateverTheWorkers) {
  const int shards = 6;
  data::ShardSampler sampler(600, shards, 8, 3);
  for (int workers : {1, 2, 3, 4, 6}) {
    std::vector<int> owner(shards, -1);
    for (int w = 0; w < workers; ++w) {
      const auto mine = data::virtualShardsOf(w, workers, shards);
      EXPECT_TRUE(mine.size() == std::size_t(shards / workers) || mine.size() == std::size_t(shards / workers + 1));
      for (int v : mine) {
        EXPECT_EQ(owner[v], -1) << "shard " << v << " twice";
        owner[v] = w;
      }
    }
    for (int e = 0; e < 2; ++e) {
      std::vector<int> seen(600, 0);
      for (std::int64_t step = e * sampler.stepsPerEpoch(); step < (e + 1) * sampler.stepsPerEpoch(); ++step) {
        for (int v = 0; v < shards; ++v) {
          ASSERT_GE(owner[v], 0) << workers << " workers leave shard " << v;
          for (auto i : sampler.batch(v, step)) ++seen[i];
        }
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << workers << " workers";
    }
  }
  EXPECT_THROW(data::virtualShardsOf(0, 7, 6), ConfigError);
}
