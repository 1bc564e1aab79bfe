// --balance's deal of virtual shards by speed (roles/Balance).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "runtime/roles/Balance.h"

using namespace pstrain;

// --balance: shards in proportion to speed, one each at least, all of them dealt; a
// worker's shards follow those of the ranks before it.
TEST(Balance, SharesFollowSpeedAndCoverEveryShard) {
  EXPECT_EQ(roles::ShareBalancer::proportional({1, 1, 0.5}, 12), (std::vector<int>{5, 5, 2}));
  EXPECT_EQ(roles::ShareBalancer::proportional({1, 1, 1}, 3), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(roles::ShareBalancer::proportional({100, 1}, 6), (std::vector<int>{5, 1}));
  const float shares[] = {0, 5, 5, 2};
  EXPECT_EQ(roles::shardsOfRank(shares, 4, 2), (std::vector<int>{5, 6, 7, 8, 9}));
  EXPECT_EQ(roles::shardsOfRank(shares, 4, 3), (std::vector<int>{10, 11}));
  // A worker three times slower per shard gets fewer after a few steps; the others more.
  roles::ShareBalancer balancer(1, 3, 12, true);
  EXPECT_EQ(balancer.counts(), (std::vector<int>{4, 4, 4}));
  for (int step = 0; step < 10; ++step) {
    const auto& c = balancer.counts();
    const float compute[] = {0, 0.01f * c[0], 0.01f * c[1], 0.03f * c[2]};
    balancer.record(compute);
  }
  EXPECT_EQ(balancer.counts(), (std::vector<int>{5, 5, 2}));
  // With K = 2 servers the workers are ranks 2 on: the servers' shares are 0.
  roles::ShareBalancer sharded(2, 3, 12, false);
  float written[] = {9, 9, 9, 9, 9};
  sharded.write(written);
  EXPECT_EQ(std::vector<float>(written, written + 5), (std::vector<float>{0, 0, 4, 4, 4}));
}
