// runtime/comm/Stall: whom a long wait names.
#include <gtest/gtest.h>

#include <chrono>

#include "runtime/comm/Stall.h"

using pstrain::comm::describeMissing;
using pstrain::comm::RankNews;
using pstrain::comm::stallLine;

namespace {
RankNews waiting(std::int64_t step) { return {step, false}; }
RankNews quiet(std::int64_t step) { return {step, true}; }
}  // namespace

TEST(Stall, NamesTheSilentRanksFirst) {
  const std::vector<std::string> hosts = {"ps", "mbp-1", "mbp-2", "mbp-3"};
  // Rank 2 stopped while its step's weights came down: the server (still in 813) and rank 1
  // (already in 814) both wait because of it, and both name it, not each other.
  const std::vector<RankNews> news = {waiting(813), waiting(814), quiet(813), waiting(814)};
  EXPECT_EQ(describeMissing(0, 813, news, hosts, -1), "rank 2 (mbp-2), last at step 813");
  EXPECT_EQ(describeMissing(1, 814, news, hosts, 0), "rank 2 (mbp-2), last at step 813");
  EXPECT_EQ(describeMissing(0, 0, {waiting(0), quiet(-1), quiet(-1)}, hosts, -1),
            "rank 1 (mbp-1), no step yet; rank 2 (mbp-2), no step yet");
}

TEST(Stall, ThenTheRanksBehindThenTheAwaited) {
  const std::vector<std::string> hosts = {"ps", "a", "b"};
  EXPECT_EQ(describeMissing(0, 814, {waiting(814), waiting(814), waiting(813)}, hosts, -1), "rank 2 (b), last at step 813");
  EXPECT_EQ(describeMissing(1, 5, {waiting(5), waiting(5), waiting(5)}, hosts, 0), "rank 0 (ps), last at step 5");
  EXPECT_EQ(describeMissing(0, 5, {waiting(5), waiting(5), waiting(5)}, hosts, -1),
            "rank 1 (a), last at step 5; rank 2 (b), last at step 5");
  EXPECT_EQ(describeMissing(0, 5, {waiting(5), waiting(5), waiting(6)}, {}, 2), "rank 2, last at step 6");  // no hosts yet
  EXPECT_EQ(describeMissing(0, 5, {waiting(5)}, hosts, -1), "the other ranks");
}

TEST(Stall, Line) {
  EXPECT_EQ(stallLine(814, 60.7, "rank 2 (mbp-1), last at step 813"),
            "pstrain: step 814: waiting 60 s for rank 2 (mbp-1), last at step 813");
  EXPECT_EQ(stallLine(-1, 10, "rank 1"), "pstrain: start-up: waiting 10 s for rank 1");
}

// A wait counts only the time its process ran: a gap of more than a second between two looks
// (SIGSTOP, a laptop asleep) is not waiting, so a rank stopped past --timeout neither gives
// up on the others nor names them once it runs again.
TEST(Stall, TimeAProcessDidNotRunIsNotWaiting) {
  using std::chrono::milliseconds;
  const auto start = pstrain::comm::WaitClock::Clock::now();
  pstrain::comm::WaitClock clock(start);
  auto t = start;
  for (int i = 0; i < 100; ++i) {
    t += milliseconds(16);
    clock.waited(t);
  }
  EXPECT_NEAR(clock.waited(t), 1.6, 1e-9);
  t += std::chrono::seconds(600);  // stopped for ten minutes
  EXPECT_NEAR(clock.waited(t), 1.6, 1e-9);
  t += milliseconds(900);
  EXPECT_NEAR(clock.waited(t), 2.5, 1e-9);
}
