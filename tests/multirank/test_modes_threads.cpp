// The peer modes and the transport they need, with ranks as threads.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <iostream>

#include "models/StateDict.h"
#include "runtime/Errors.h"
#include "runtime/comm/InProcessComm.h"
#include "runtime/training/Training.h"
#include "tests/common/Ranks.h"
#include "tests/common/Reference.h"
#include "tests/common/ScratchDir.h"
#include "tests/common/TrainOnThreads.h"

using namespace pstrain;
using testsupport::runRanks;
using testsupport::trainOnThreads;

namespace {


}  // namespace

TEST(ModesThreads, AllreduceEqualsSyncOnTheSameSamples) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("allreduce");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str() + "/sync");
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  auto sync = trainOnThreads(cfg, 3, train);  // server + 2 workers
  cfg.mode = config::Mode::Allreduce;
  cfg.trainDir = scratch.str() + "/allreduce";
  auto allreduce = trainOnThreads(cfg, 2, train);  // 2 peers on the same 2 shards
  const double diff = testsupport::maxAbsDiff(sync, allreduce);
  std::cout << "allreduce (2 ranks) vs sync (2 workers): max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-6);
  EXPECT_EQ(rundir::listPublished(cfg.trainDir + "/ckpt").size(), 2u);
}

TEST(ModesThreads, OverlappedBucketsGiveTheWeightsOfOneExchange) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("overlap");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str() + "/off");
  cfg.overlap = config::OnOff::Off;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  auto whole = trainOnThreads(cfg, 3, train);
  cfg.overlap = config::OnOff::On;
  cfg.bucketKb = 16;  // lenet: 106 buckets; fc1's weight spans 99 of them
  cfg.trainDir = scratch.str() + "/on";
  auto buckets = trainOnThreads(cfg, 3, train);
  const double diff = testsupport::maxAbsDiff(whole, buckets);
  std::cout << "sync, buckets reduced and applied one by one vs one exchange: max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-6);
}

TEST(ModesThreads, AllreduceOnOneRankIsSingleProcessTraining) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("allreduce1");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.mode = config::Mode::Allreduce;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  auto trained = trainOnThreads(cfg, 1, train);
  torch::manual_seed(cfg.seed);
  auto reference = models::makeModel(cfg.model);
  testsupport::trainReference(*reference, train, cfg, 1, cfg.steps);
  EXPECT_LE(testsupport::maxAbsDiff(models::stateDict(*reference), trained), 1e-5);
}

TEST(ModesThreads, GossipTrainsEveryRankAndPublishesRankZeros) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("gossip");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.mode = config::Mode::Gossip;
  cfg.fetchProbability = 1;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  auto trained = trainOnThreads(cfg, 3, train);
  EXPECT_FALSE(trained.empty());
  EXPECT_EQ(rundir::listPublished(cfg.trainDir + "/ckpt").back().step, cfg.steps);
}

TEST(ModesThreads, BackupWithMoreGradientsThanWorkersIsAClearError) {
  testsupport::ScratchDir scratch("aggregate");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.mode = config::Mode::Backup;
  cfg.aggregate = 3;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  std::vector<std::shared_ptr<models::Net>> nets;
  for (int r = 0; r < 3; ++r) nets.push_back(models::makeModel(cfg.model));
  comm::InProcessWorld world(3);
  auto errors = runRanks(world, [&](int r) {
    training::runTraining(world.rank(r), config::RunPlan(cfg), *nets[r], r ? &train : nullptr, c10::Device(c10::kCPU), {});
  });
  for (int r = 0; r < 3; ++r) EXPECT_NE(errors[r].find("--aggregate 3 is more than the 2 worker(s)"), std::string::npos) << errors[r];
}

// diloco (issue 40) with one local step of plain SGD, outer lr 1 and no outer momentum:
// the pseudo-gradient is lr x the worker's gradient, so the run is sync's, to float rounding.
TEST(ModesThreads, DilocoWithOneLocalSgdStepAndAPlainOuterStepIsSync) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("diloco-exact");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str() + "/sync");
  cfg.lrScaling = "none";  // diloco's inner steps see one worker's batch: no scaling there
  cfg.momentum = 0;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  auto sync = trainOnThreads(cfg, 3, train);
  cfg.mode = config::Mode::Diloco;
  cfg.localStepsFlag = "1";
  cfg.compress = config::kRawCodec;  // exact: raw floats both ways, no overlap
  cfg.overlapRoundsFlag = config::Switch::Off;
  cfg.balanceFlag = config::Switch::Off;
  cfg.outerLr = 1;
  cfg.outerMomentum = 0;
  cfg.trainDir = scratch.str() + "/diloco";
  auto diloco = trainOnThreads(cfg, 3, train);
  const double diff = testsupport::maxAbsDiff(sync, diloco);
  std::cout << "diloco (H = 1, sgd, outer lr 1, momentum 0) vs sync: max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
  EXPECT_EQ(rundir::listPublished(cfg.trainDir + "/ckpt").size(), 2u);
}

// --mode localsgd: every round the global weights become the mean of the workers'. With one
// local SGD step a round that is sync (the mean of the workers' steps is the step of the
// mean gradient), to float rounding; --outer-lr does not apply to it and is refused.
TEST(ModesThreads, LocalSgdWithOneLocalSgdStepIsSync) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("localsgd-exact");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str() + "/sync");
  cfg.lrScaling = "none";
  cfg.momentum = 0;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  auto sync = trainOnThreads(cfg, 3, train);
  cfg.mode = config::Mode::LocalSgd;
  cfg.localStepsFlag = "1";
  cfg.compress = config::kRawCodec;
  cfg.overlapRoundsFlag = config::Switch::Off;
  cfg.balanceFlag = config::Switch::Off;
  cfg.trainDir = scratch.str() + "/localsgd";
  cfg.validate();
  auto averaged = trainOnThreads(cfg, 3, train);
  const double diff = testsupport::maxAbsDiff(sync, averaged);
  std::cout << "localsgd (H = 1, sgd) vs sync: max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
  cfg.outerLr = 0.5;
  EXPECT_THROW(cfg.validate(), ConfigError);
}

// `cfg` (diloco, one worker, a plain outer step) on a server and one worker, against the
// worker training alone from the same seed: the largest difference of their weights.
static double diffFromTheWorkerAlone(const config::TrainConfig& cfg) {
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  auto diloco = trainOnThreads(cfg, 2, train);
  torch::manual_seed(cfg.seed);
  auto reference = models::makeModel(cfg.model);
  testsupport::trainReference(*reference, train, cfg, 1, cfg.steps);
  return testsupport::maxAbsDiff(models::stateDict(*reference), diloco);
}

// One worker, outer lr 1 and no outer momentum: every round's global weights are the
// worker's, so diloco is the worker training alone, its inner momentum carried across
// rounds (DiLoCo keeps the inner state); rounds of 3 that do not divide the 20 steps or
// the checkpoints (every 10) still publish steps 10 and 20 (checkpoints at round ends: 12, 20).
TEST(ModesThreads, DilocoOnOneWorkerKeepsItsInnerStateAcrossRounds) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("diloco-one");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.mode = config::Mode::Diloco;
  cfg.localStepsFlag = "3";
  cfg.compress = config::kRawCodec;
  cfg.overlapRoundsFlag = config::Switch::Off;
  cfg.balanceFlag = config::Switch::Off;
  cfg.outerLr = 1;
  cfg.outerMomentum = 0;
  const double diff = diffFromTheWorkerAlone(cfg);
  std::cout << "diloco on one worker (H = 3) vs the worker alone: max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
  std::vector<std::int64_t> steps;
  for (const auto& c : rundir::listPublished(cfg.trainDir + "/ckpt")) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<std::int64_t>{12, 20}));
}

// diloco on smallSyntheticConfig, its rounds overlapped: H `localSteps`, in `fragments`.
static config::TrainConfig overlappedDiloco(const std::string& trainDir, const char* localSteps, const char* fragments) {
  auto cfg = testsupport::smallSyntheticConfig(trainDir);
  cfg.mode = config::Mode::Diloco;
  cfg.localStepsFlag = localSteps;
  cfg.fragmentsFlag = fragments;
  cfg.overlapRoundsFlag = config::Switch::On;
  return cfg;
}

// --overlap-rounds on one worker with a plain outer step: each round starts from the local
// weights while the last round's exchange travels, and its progress moves onto the global
// weights that come back, which are the worker's own of a round ago: the worker alone again.
TEST(ModesThreads, DilocoOverlappedRoundsOnOneWorkerAreTheWorkerAlone) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("diloco-overlap");
  auto cfg = overlappedDiloco(scratch.str(), "3", "1");  // the whole model each round (streamed: below)
  cfg.compress = config::kRawCodec;
  cfg.outerLr = 1;
  cfg.outerMomentum = 0;
  const double diff = diffFromTheWorkerAlone(cfg);
  std::cout << "diloco, overlapped rounds, one worker (H = 3) vs the worker alone: max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
}

// Runs `cfg` on a server and 2 workers from one seed's weights, and expects the server's
// model and every worker's copy of the global weights equal bit for bit at the end, the
// weights moved, and trained_model.pt the server's model.
static void expectEveryCopyOfTheWeightsEqual(const config::TrainConfig& cfg) {
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  std::vector<std::shared_ptr<models::Net>> nets;
  for (int r = 0; r < 3; ++r) {
    torch::manual_seed(cfg.seed);
    nets.push_back(models::makeModel(cfg.model));
  }
  checkpoint::TensorList initial;
  for (const auto& [name, tensor] : models::stateDict(*nets[0])) initial.emplace_back(name, tensor.clone());
  comm::InProcessWorld world(3);
  auto errors = runRanks(world, [&](int r) {
    training::runTraining(world.rank(r), config::RunPlan(cfg), *nets[r], r > 0 ? &train : nullptr, c10::Device(c10::kCPU), {});
  });
  for (int r = 0; r < 3; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  const auto server = models::stateDict(*nets[0]);
  for (int r = 1; r < 3; ++r) {
    const auto worker = models::stateDict(*nets[r]);
    ASSERT_EQ(worker.size(), server.size());
    for (std::size_t i = 0; i < server.size(); ++i) {
      EXPECT_TRUE(torch::equal(server[i].second, worker[i].second)) << "rank " << r << ": " << server[i].first;
    }
  }
  EXPECT_GT(testsupport::maxAbsDiff(initial, server), 1e-3) << "the weights did not move";
  const auto saved = checkpoint::readStateDict(cfg.trainDir + "/trained_model.pt");
  EXPECT_EQ(testsupport::maxAbsDiff(saved, server), 0.0) << "trained_model.pt is the server's model";
}

// diloco's defaults code both directions in int4: the pseudo-gradients under error
// feedback, and down the update toward the server's new weights, which the server applies to
// its copy exactly as each worker does to theirs. After 20 rounds (here of 2 local steps,
// several of them overlapped) the server's model and every worker's copy of the global
// weights are equal bit for bit, and the run trained.
TEST(ModesThreads, DilocoQuantizedRoundsKeepEveryCopyOfTheWeightsEqual) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("diloco-int4");
  auto cfg = overlappedDiloco(scratch.str(), "2", "1");  // the whole model each round (streamed: below)
  cfg.steps = 40;
  ASSERT_EQ(cfg.gradientCodec(), "int4");
  ASSERT_EQ(cfg.weightCodec(), "int4");
  expectEveryCopyOfTheWeightsEqual(cfg);
}

// Streamed rounds (--fragments 3, issue 83): each overlapped round of 2 local steps exchanges
// a third of the weights, in turn, int4 both ways, and the last round the whole model: every
// copy stays equal bit for bit.
TEST(ModesThreads, DilocoStreamedRoundsKeepEveryCopyOfTheWeightsEqual) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("diloco-streamed");
  auto cfg = overlappedDiloco(scratch.str(), "6", "3");
  cfg.steps = 41;  // 3 rounds of 6 measure, then 11 streamed rounds of 2, and a last one of 1, whole
  expectEveryCopyOfTheWeightsEqual(cfg);
}

// Streamed rounds on one worker with a plain outer step: each fragment's global weights
// become the worker's own at its send, and its progress since moves onto them unchanged:
// the worker alone, as without fragments.
TEST(ModesThreads, DilocoStreamedRoundsOnOneWorkerAreTheWorkerAlone) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("diloco-streamed-one");
  auto cfg = overlappedDiloco(scratch.str(), "6", "2");
  cfg.compress = config::kRawCodec;
  cfg.outerLr = 1;
  cfg.outerMomentum = 0;
  cfg.steps = 41;  // 3 rounds of 6 measure, then 7 streamed rounds of 3, and a last one of 2
  const double diff = diffFromTheWorkerAlone(cfg);
  std::cout << "diloco, streamed rounds (2 fragments), one worker vs the worker alone: max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
}
