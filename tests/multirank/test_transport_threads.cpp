// The in-process communicator the multi-rank tests run on (comm/InProcessComm): point to
// point, windows, all-reduce, as MPI does them.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/comm/InProcessComm.h"
#include "tests/common/Ranks.h"

using namespace pstrain;
using testsupport::runRanks;

TEST(Transport, PointToPointKeepsOrderPerSenderAndNamesTheSource) {
  comm::InProcessWorld world(3);
  auto errors = runRanks(world, [&](int r) {
    auto& comm = world.rank(r);
    if (r > 0) {
      for (int i = 0; i < 3; ++i) {
        int value = r * 100 + i;
        comm.send(&value, sizeof value, 0, "test");
      }
      return;
    }
    std::vector<int> next = {0, 100, 200};
    for (int i = 0; i < 6; ++i) {
      int value = -1;
      auto got = comm.receive(&value, sizeof value, comm::Communicator::kAnySource, "test");
      ASSERT_EQ(got.bytes, sizeof value);
      EXPECT_EQ(value, next[got.source]++) << "from rank " << got.source;
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(Transport, AMessageLargerThanTheBufferIsAnError) {
  comm::InProcessWorld world(2);
  auto errors = runRanks(world, [&](int r) {
    auto& comm = world.rank(r);
    double big[2] = {1, 2};
    if (r == 1) {
      comm.send(big, sizeof big, 0, "test");
    } else {
      float small = 0;
      comm.receive(&small, sizeof small, 1, "step 3");
    }
  });
  EXPECT_NE(errors[0].find("receive at step 3: a message of 16 bytes from rank 1, expected at most 4"),
            std::string::npos) << errors[0];
}

TEST(Transport, WindowsAreReadWithoutTheOwner) {
  comm::InProcessWorld world(2);
  auto errors = runRanks(world, [&](int r) {
    auto& comm = world.rank(r);
    auto window = comm.exposeWindow(3, "test");
    float mine[3] = {float(r), float(r) + 0.5f, 7};
    window->publish(mine);
    comm.barrier("published");
    float theirs[3] = {};
    window->read(1 - r, theirs, "test");
    EXPECT_EQ(theirs[0], float(1 - r));
    EXPECT_EQ(theirs[1], float(1 - r) + 0.5f);
    window->close("test");
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(Transport, AllReduceGivesEveryRankTheSum) {
  comm::InProcessWorld world(3);
  auto errors = runRanks(world, [&](int r) {
    std::vector<float> values = {float(r), 1};
    world.rank(r).allReduceSum(values.data(), values.size(), "test");
    EXPECT_EQ(values[0], 3.0f);
    EXPECT_EQ(values[1], 3.0f);
    auto gathered = world.rank(r).gather(std::string(r + 1, 'x'), 0, "test");
    if (r == 0) {
      ASSERT_EQ(gathered.size(), 3u);
      EXPECT_EQ(gathered[2], "xxx");
    } else {
      EXPECT_TRUE(gathered.empty());
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}
