// The cost model of pstrain --probe (runtime/probe/CostModel.h): its arithmetic on
// measurements whose answers can be worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/Errors.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/probe/CostModel.h"

using namespace pstrain::probe;
using pstrain::config::Mode;

namespace {

// Two or more workers, 100 ms per batch of 32, 1 ms latency, 1 MB/s-scale links; a 1 MB
// model; "half" halves the bytes at no cost; "tiny" sends 1% of them.
ProbeMeasurements measurements(int workers, double bytesPerSecond) {
  ProbeMeasurements m;
  m.batchSamples = 32;
  m.computeSeconds.assign(static_cast<std::size_t>(workers), 0.1);
  m.latencySeconds.assign(static_cast<std::size_t>(workers), 0.001);
  m.bytesPerSecond.assign(static_cast<std::size_t>(workers), bytesPerSecond);
  m.updateSeconds = 0.002;
  m.gradientCodecs["none"] = {1e6, 0, 0};
  m.gradientCodecs["tiny"] = {1e4, 0.004, 0.001};
  m.weightCodecs["none"] = {1e6, 0, 0};
  m.weightCodecs["half"] = {5e5, 0.001, 0.001};
  return m;
}

const Prediction& find(const std::vector<Prediction>& all, Mode mode, const std::string& grad,
                       const std::string& weights, int workers) {
  for (const auto& p : all) {
    if (p.mode == mode && p.gradientCodec == grad && p.weightCodec == weights && p.workers == workers) return p;
  }
  throw std::runtime_error("no such prediction");
}

}  // namespace

TEST(CostModel, SyncIsTheSlowestBatchPlusTreeExchangeAndUpdate) {
  const auto all = predict(measurements(3, 1e8));
  // 3 workers + server: ceil(log2 4) = 2 rounds each way, each 1 ms + 1e6 / 1e8 s = 11 ms.
  const Prediction& p = find(all, Mode::Sync, "none", "none", 3);
  EXPECT_NEAR(p.stepSeconds, 0.1 + 2 * 0.011 + 0.002 + 2 * 0.011, 1e-12);
  EXPECT_NEAR(p.samplesPerSecond, 96 / p.stepSeconds, 1e-9);
  EXPECT_NEAR(p.efficiency, p.samplesPerSecond / (3 * 320.0), 1e-12);
  // One worker: one round each way.
  EXPECT_NEAR(find(all, Mode::Sync, "none", "none", 1).stepSeconds, 0.1 + 0.011 + 0.002 + 0.011, 1e-12);
  // A gradient codec gathers: 3 payloads through the server's link, each decoded there.
  const Prediction& c = find(all, Mode::Sync, "tiny", "half", 3);
  EXPECT_NEAR(c.stepSeconds, 0.1 + 0.004 + 3 * (0.001 + 1e-4) + 3 * 0.001 + 0.002 + 0.001 + 2 * (0.001 + 5e-3) + 0.001,
              1e-12);
}

TEST(CostModel, BackupWaitsForTheFastestKAndAllreduceRingsTheGradient) {
  ProbeMeasurements m = measurements(4, 1e8);
  m.computeSeconds = {0.1, 0.1, 0.1, 1.0};  // one straggler
  const auto all = predict(m);
  // Backup: k = 3 of 4, the 3rd fastest batch (0.1), 3 messages each way through the server.
  const Prediction& b = find(all, Mode::Backup, "none", "none", 4);
  EXPECT_NEAR(b.stepSeconds, 0.1 + 3 * 0.011 + 0.002 + 3 * 0.011, 1e-12);
  EXPECT_NEAR(b.samplesPerSecond, 96 / b.stepSeconds, 1e-9);
  // Sync waits for the straggler.
  EXPECT_GT(find(all, Mode::Sync, "none", "none", 4).stepSeconds, 1.0);
  // Allreduce, 4 ranks: 2 x log2(4) latencies + 2 x 3/4 of the gradient over the link.
  const Prediction& a = find(all, Mode::Allreduce, "none", "-", 4);
  EXPECT_NEAR(a.stepSeconds, 1.0 + 4 * 0.001 + 1.5 * 0.01 + 0.002, 1e-12);
  // Async: every worker at its own pace; the server keeps up here.
  const Prediction& async = find(all, Mode::Async, "none", "none", 4);
  const double fast = 32 / (0.1 + 2 * 0.011 + 0.002), slow = 32 / (1.0 + 2 * 0.011 + 0.002);
  EXPECT_NEAR(async.samplesPerSecond, 3 * fast + slow, 1e-6);
  // The straggler makes a mode that tolerates it the fastest.
  const Prediction& top = best(all, 4);
  EXPECT_TRUE(top.mode == Mode::Backup || top.mode == Mode::Async) << pstrain::config::nameOf(top.mode);
  EXPECT_NE(recommendation(top, m).find(std::string(pstrain::config::nameOf(top.mode)) + " with 4 workers"), std::string::npos);
}

TEST(CostModel, SlowLinksMakeTheSparseCodecWinAndTheServerLinkCapsAsync) {
  const ProbeMeasurements m = measurements(2, 1e6);  // 1 MB/s: a 1 MB message takes a second
  const auto all = predict(m);
  EXPECT_EQ(best(all, 2).gradientCodec, "tiny");
  // The parameter server's best: the smaller messages both ways.
  const Prediction* sync = nullptr;
  for (const auto& p : all) {
    if (p.mode == Mode::Sync && p.servers == 1 && p.workers == 2 && (!sync || p.samplesPerSecond > sync->samplesPerSecond)) {
      sync = &p;
    }
  }
  EXPECT_NE(recommendation(*sync, m).find("sync with 2 workers, half weights + tiny gradients"), std::string::npos)
      << recommendation(*sync, m);
  // Async, uncompressed: each gradient costs the server 2 MB of its link, about 2 s.
  const Prediction& async = find(all, Mode::Async, "none", "none", 2);
  EXPECT_NEAR(async.samplesPerSecond, 32 / (2e6 / 1e6 + 0.002), 1e-9);
}

TEST(CostModel, KServersTakeTheLongerOfAWorkersLinkAndAServersShare) {
  ProbeMeasurements m = measurements(4, 1e8);
  m.gradientCodecs.erase("tiny");  // uncompressed only: what sharding changes
  m.weightCodecs.erase("half");
  const auto all = predict(m);
  auto kServers = [&](int servers) {
    for (const auto& p : all) {
      if (p.mode == Mode::Sync && p.servers == servers && p.gradientCodec == "none" && p.weightCodec == "none" && p.workers == 4) return p;
    }
    throw std::runtime_error("no such prediction");
  };
  // 4 servers: each way, max(a worker's 1 MB: 11 ms, 4 ranges of 250 kB through a server's
  // link: 4 x 3.5 ms); a quarter of the update.
  EXPECT_NEAR(kServers(4).stepSeconds, 0.1 + 0.014 + 0.002 / 4 + 0.014, 1e-12);
  // 2 servers: 4 x 6 ms through each server's link.
  EXPECT_NEAR(kServers(2).stepSeconds, 0.1 + 0.024 + 0.002 / 2 + 0.024, 1e-12);
  // One server's tree: 3 rounds of 11 ms each way; 4 servers beat it. The ring still wins
  // here: 1.5 MB per link each way against a worker's whole 1 MB each way.
  EXPECT_GT(find(all, Mode::Sync, "none", "none", 4).stepSeconds, kServers(4).stepSeconds);
  EXPECT_EQ(best(all, 4).mode, Mode::Allreduce);
  EXPECT_NE(recommendation(kServers(4), m).find("sync with 4 workers and 4 servers (--servers 4"), std::string::npos)
      << recommendation(kServers(4), m);
}

// backup and async over K servers (exchanges/point_to_point): each message crosses a
// server's link as K ranges, and each server makes 1/K of the update.
TEST(CostModel, PointToPointServersShareTheServersLink) {
  auto withServers = [](const std::vector<Prediction>& all, Mode mode, int servers, int workers) {
    for (const auto& p : all) {
      if (p.mode == mode && p.servers == servers && p.gradientCodec == "none" && p.weightCodec == "none" &&
          p.workers == workers) {
        return p;
      }
    }
    throw std::runtime_error("no such prediction");
  };
  ProbeMeasurements m = measurements(4, 1e8);
  m.computeSeconds = {0.1, 0.1, 0.1, 1.0};
  // Backup, 3 of 4: each of the 3 messages each way a 500 kB range through each of 2 links.
  EXPECT_NEAR(withServers(predict(m), Mode::Backup, 2, 4).stepSeconds, 0.1 + 3 * 0.006 + 0.002 / 2 + 3 * 0.006, 1e-12);
  // Async on 1 MB/s links: one server's link capped it at 32 / 2.002 s; with 2 the workers'
  // own cycles bound it (a whole message each way over their links, half the update).
  const auto slow = predict(measurements(2, 1e6));
  EXPECT_NEAR(withServers(slow, Mode::Async, 1, 2).samplesPerSecond, 32 / (2e6 / 1e6 + 0.002), 1e-9);
  EXPECT_NEAR(withServers(slow, Mode::Async, 2, 2).samplesPerSecond, 2 * 32 / (0.1 + 1.001 + 0.001 + 1.001), 1e-9);
  EXPECT_NE(recommendation(withServers(slow, Mode::Async, 2, 2), measurements(2, 1e6)).find("--servers 2"),
            std::string::npos);
}

TEST(CostModel, RejectsIncompleteMeasurements) {
  ProbeMeasurements m = measurements(2, 1e8);
  m.latencySeconds.pop_back();
  EXPECT_THROW(predict(m), std::invalid_argument);
  EXPECT_THROW(predict(ProbeMeasurements{}), std::invalid_argument);
}

// diloco (issues 40, 52): a round is H slowest batches + the round's exchange along the
// chain of workers (exchanges/rounds/RoundChain.h) + the update, so a step costs the batch + the
// exchange / H; the modes' recommendation never is diloco (it trains otherwise).
TEST(CostModel, DilocoSpreadsOneChainedExchangeOverItsLocalSteps) {
  ProbeMeasurements m = measurements(2, 1e6);  // a slow link: 1 MB at 1 MB/s, 1 s each way
  m.localSteps = 10;
  const auto all = predict(m);
  // 250000 values: 4 chunks of 64 Ki. Each way: the whole message over one link (1 ms + 1 s),
  // a quarter of it over the second (1 ms + 0.25 s); the update between.
  const double exchange = 2 * (0.001 + 1.0 + 0.001 + 0.25) + 0.002;
  EXPECT_NEAR(find(all, Mode::Diloco, "none", "none", 2).stepSeconds, 0.1 + exchange / 10, 1e-12);
  EXPECT_NEAR(roundExchangeSeconds(m, 2, "none", "none"), exchange, 1e-12);
  EXPECT_THROW(roundExchangeSeconds(m, 2, "int4", "none"), std::invalid_argument);
  EXPECT_NEAR(slowestBatchSeconds(m, 2), 0.1, 1e-12);
  const double syncExchange = 2 * 2 * (0.001 + 1.0) + 0.002;  // 2 tree rounds each way, the update
  EXPECT_NEAR(find(all, Mode::Sync, "none", "none", 2).stepSeconds - 0.1, syncExchange, 1e-12);
  EXPECT_NE(best(all, 2).mode, Mode::Diloco);
  const auto byH = predictLocalSteps(m, 2, {1, 10, 100, 1000});
  ASSERT_EQ(byH.size(), 4u);
  for (std::size_t i = 1; i < byH.size(); ++i) {
    EXPECT_GT(byH[i].prediction.samplesPerSecond, byH[i - 1].prediction.samplesPerSecond);
    EXPECT_LT(byH[i].commShare, byH[i - 1].commShare);
  }
  // Its fastest codecs: "tiny" pseudo-gradients (2 x (4 + 1) ms coded on each worker, 1 + 10
  // ms + 1 + 2.5 ms along the chain), the update (2 ms), "half" updates (1 ms, 1 + 500 ms +
  // 1 + 125 ms, 1 ms): 0.6555 s a round; at H = 100 that is 6.555 ms of a 106.555 ms step,
  // 6.2%.
  EXPECT_EQ(byH[2].prediction.gradientCodec, "tiny");
  EXPECT_EQ(byH[2].prediction.weightCodec, "half");
  EXPECT_NEAR(byH[2].commShare, 0.006555 / 0.106555, 1e-9);
}

// --local-steps auto and --overlap-rounds auto (exchanges/rounds/RoundsPlan.h): the H and
// overlap of the shortest predicted time to a loss, on the links tools/bench-lowcomm measures
// (a step of 0.022 s; the round's exchange 1.2 s at 2 Mbit/s, 0.25 s at 10, 0.005 on the
// loopback).
TEST(RoundsDecision, OverlapsWhereTheExchangeWouldSlowShortRoundsAndNotOnAFastLink) {
  using namespace pstrain::exchanges::rounds;
  const RoundsPlan automatic;  // H auto, overlap auto
  const RoundsDecision slow = chooseRounds(automatic, 0.022, 1.2);
  EXPECT_TRUE(slow.overlap);
  EXPECT_EQ(slow.localSteps, 82);  // the fewest whose compute (1.80 s) is 1.5 exchanges
  EXPECT_GT(slow.otherLocalSteps, 100);  // not overlapped, it would need long rounds
  EXPECT_LT(slow.predicted, slow.otherPredicted);
  const RoundsDecision medium = chooseRounds(automatic, 0.022, 0.25);
  EXPECT_TRUE(medium.overlap);
  EXPECT_EQ(medium.localSteps, kMinOverlappedLocalSteps);  // 18 would hide 0.25 s, but no round under 20 does
  const RoundsDecision fast = chooseRounds(automatic, 0.022, 0.005);
  EXPECT_FALSE(fast.overlap);  // nothing to hide: a fresh start each round is worth more
  EXPECT_GE(fast.localSteps, kMinAutoLocalSteps);
  EXPECT_LE(fast.localSteps, static_cast<std::int64_t>(kFreeLocalSteps));
  // Longer rounds cost steps, overlap a little; a hidden exchange costs no time.
  EXPECT_LT(roundsSteps(25, false), roundsSteps(100, false));
  EXPECT_LT(roundsSteps(100, false), roundsSteps(100, true));
  EXPECT_DOUBLE_EQ(roundsStepSeconds(100, true, 0.022, 1.2), 0.022);
  EXPECT_DOUBLE_EQ(roundsStepSeconds(100, false, 0.022, 1.2), 0.022 + 0.012);
}

TEST(RoundsDecision, FixedSettingsAreKeptAndAFixedHStillChoosesItsOverlap) {
  using namespace pstrain::exchanges::rounds;
  RoundsPlan plan;
  plan.localSteps = 50;
  EXPECT_TRUE(chooseRounds(plan, 0.022, 1.2).overlap);    // 50 steps do not hide 1.2 s, but half of it
  EXPECT_FALSE(chooseRounds(plan, 0.022, 0.005).overlap);
  EXPECT_EQ(chooseRounds(plan, 0.022, 1.2).localSteps, 50);
  plan.overlap = pstrain::config::Switch::Off;
  const RoundsDecision apart = chooseRounds(plan, 0.022, 1.2);
  EXPECT_FALSE(apart.overlap);
  EXPECT_EQ(apart.localSteps, 50);
  plan.localSteps = 0;
  const RoundsDecision best = chooseRounds(plan, 0.022, 1.2);  // H auto, never overlapped
  EXPECT_FALSE(best.overlap);
  for (std::int64_t h : {kMinAutoLocalSteps, std::int64_t(50), kMaxAutoLocalSteps}) {
    EXPECT_LE(roundsSteps(best.localSteps, false) * roundsStepSeconds(best.localSteps, false, 0.022, 1.2),
              roundsSteps(h, false) * roundsStepSeconds(h, false, 0.022, 1.2));
  }
  EXPECT_EQ(whyRounds(best).find("against"), std::string::npos);  // nothing compared
  EXPECT_NE(whyRounds(chooseRounds(RoundsPlan(), 0.022, 1.2)).find("against"), std::string::npos);
}

// --fragments P (streaming rounds): an overlapped round lasts H / P steps and exchanges one
// fragment, in turn on every rank; a round not overlapped, or the run's last, the whole model.
TEST(RoundsDecision, StreamedRoundsLastAPthOfHAndTakeTheFragmentsInTurn) {
  using namespace pstrain::exchanges::rounds;
  RoundsPlan plan;
  plan.fragments = 4;
  const RoundsDecision slow = chooseRounds(plan, 0.022, 1.2);  // overlapped H 82, as without fragments
  EXPECT_TRUE(slow.overlap);
  EXPECT_EQ(slow.fragments, 4);
  EXPECT_EQ(slow.localSteps, 21);  // ceil(82 / 4)
  EXPECT_NE(whyRounds(slow).find("one of 4 fragments (each fragment every 84 steps)"), std::string::npos);
  const RoundsDecision fast = chooseRounds(plan, 0.022, 0.005);  // not overlapped: the whole model each round
  EXPECT_FALSE(fast.overlap);
  EXPECT_EQ(fast.fragments, 1);
  plan.localSteps = 50;
  plan.overlap = pstrain::config::Switch::On;
  EXPECT_EQ(chooseRounds(plan, 0.022, 1.2).localSteps, 13);  // a fixed H: rounds of ceil(50 / 4)

  float wire[kDecisionFloats];
  writeDecision(slow, wire);
  const RoundsDecision read = readDecision(wire);
  EXPECT_EQ(read.localSteps, 21);
  EXPECT_EQ(read.fragments, 4);
  wire[1] = 0;  // streamed, not overlapped: no server sends that
  EXPECT_THROW(readDecision(wire), pstrain::CommError);

  LaneSchedule schedule(4);
  std::vector<std::size_t> lanes;
  for (int r = 0; r < 6; ++r) lanes.push_back(schedule.next(slow, /*endsRun=*/false));
  EXPECT_EQ(lanes, (std::vector<std::size_t>{1, 2, 3, 4, 1, 2}));
  EXPECT_EQ(schedule.next(slow, /*endsRun=*/true), 0u);  // the last round: the whole model
  EXPECT_EQ(schedule.next(fast, /*endsRun=*/false), 0u);
  EXPECT_EQ(schedule.next(slow, /*endsRun=*/false), 3u);  // the turn goes on
  LaneSchedule other(2);
  EXPECT_THROW(other.next(slow, false), pstrain::CommError);  // 4 streamed, 2 made
}

TEST(RoundsDecision, AnOverlappedHThatDoesNotHideItsExchangeGrowsAndNeverShrinks) {
  using namespace pstrain::exchanges::rounds;
  EXPECT_EQ(raisedLocalSteps(10, 0.29, 0.25), 15);   // 16% waited: 1.25 x 10 x 0.29 / 0.25 = 14.5, up
  EXPECT_EQ(raisedLocalSteps(10, 0.27, 0.25), 10);   // 8%: hidden enough
  EXPECT_EQ(raisedLocalSteps(10, 0.10, 0.25), 10);   // quicker than the compute: never shrinks
  EXPECT_EQ(raisedLocalSteps(400, 10.0, 1.0), kMaxAutoLocalSteps);
  EXPECT_EQ(raisedLocalSteps(kMaxAutoLocalSteps, 10.0, 1.0), kMaxAutoLocalSteps);
  EXPECT_EQ(raisedLocalSteps(10, 1.0, 0.0), 10);     // nothing measured
  EXPECT_EQ(raisedLocalSteps(10, 0.2751, 0.25), 14);  // just over 10%: ceil(13.755), at least H + 1
}
