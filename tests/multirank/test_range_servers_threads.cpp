// --servers K with ranks as threads (exchanges/range_servers, point_to_point, rounds): K servers
// give one server's weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>

#include "models/StateDict.h"
#include "tests/common/Reference.h"
#include "tests/common/ScratchDir.h"
#include "tests/common/TrainOnThreads.h"

using namespace pstrain;
using testsupport::trainOnThreads;

namespace {

// 20 steps of `cfg` with 1 server and with each count of `servers`, and `workers` workers:
// the same weights to 1e-6. 4 servers (ranges cut inside more tensors, four partial norms)
// where the update or the codec depends on the cuts; 2 elsewhere, which mpi.servers repeats.
void expectServersAgree(config::TrainConfig cfg, const std::string& what, int workers = 3,
                        std::initializer_list<int> counts = {2}) {
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  const std::string dir = cfg.trainDir;
  cfg.trainDir = dir + "/k1";
  const auto one = trainOnThreads(cfg, 1 + workers, train);
  for (int servers : counts) {
    cfg.servers = servers;
    cfg.trainDir = dir + "/k" + std::to_string(servers);
    const double diff = testsupport::maxAbsDiff(one, trainOnThreads(cfg, servers + workers, train));
    std::cout << what << ": " << servers << " servers vs 1: max abs diff " << diff << std::endl;
    EXPECT_LE(diff, 1e-6) << what << ", " << servers << " servers";
  }
}

}  // namespace

TEST(RangeServersThreads, ServersGiveOneServersWeightsWithSgdMomentum) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-sgd");
  expectServersAgree(testsupport::smallSyntheticConfig(scratch.str()), "sgd momentum", 3, {2, 4});
}

TEST(RangeServersThreads, ServersGiveOneServersWeightsWithAdamWAndClipping) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-adamw");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.optimizer = "adamw";
  cfg.lr = 0.002;
  cfg.weightDecay = 0.01;
  cfg.clipGradNorm = 0.5;  // below the gradient's norm: every step is clipped by the whole norm
  expectServersAgree(cfg, "adamw + clip 0.5", 3, {2, 4});
}

// --overlap on (the default) without clipping: each server updates each part of its range as
// it arrives (TrainConfig::updatesOnArrival), AdamW's bias correction counted once a step.
TEST(RangeServersThreads, ServersGiveOneServersWeightsWithAdamWUpdatingEachPartOnArrival) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-adamw-parts");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.optimizer = "adamw";
  cfg.lr = 0.002;
  cfg.weightDecay = 0.01;
  cfg.servers = 2;
  ASSERT_TRUE(cfg.updatesOnArrival());
  cfg.servers = 1;
  expectServersAgree(cfg, "adamw, each part on arrival");
}

// --memory lean (auto takes fast on this machine): one server's streamed buckets and the K
// servers' parts give their pages back once sent and keep a few in flight, each server takes
// two parts per worker at a time; the same weights.
TEST(RangeServersThreads, ServersGiveOneServersWeightsUnderMemoryLean) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-lean");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.memory = config::MemoryUse::Lean;
  ASSERT_TRUE(config::RunPlan(cfg).leanMemory() && cfg.streamsGradients());
  expectServersAgree(cfg, "sgd momentum, --memory lean", 3, {2, 4});
}

// --overlap off: each server sums its whole range, then updates it.
TEST(RangeServersThreads, ServersGiveOneServersWeightsWithOverlapOff) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-overlap-off");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.overlap = config::OnOff::Off;
  expectServersAgree(cfg, "sgd momentum, overlap off");
}

TEST(RangeServersThreads, ServersGiveOneServersWeightsWithInt8AndErrorFeedback) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-int8");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.compress = "int8";
  cfg.errorFeedback = config::Switch::On;
  expectServersAgree(cfg, "int8 + error feedback", 3, {2, 4});
}

// --balance: server 0 deals each step's virtual shards by the workers' measured speed, as
// sync's one server does (the same counts give the same sums; threads of one machine run at
// about one speed, and counts that moved would change only the summation order).
TEST(RangeServersThreads, ServersGiveOneServersWeightsWithBalance) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-balance");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.balanceFlag = config::Switch::On;
  cfg.virtualShards = 12;  // 4 a worker, which the speeds may move
  ASSERT_TRUE(cfg.balance());
  expectServersAgree(cfg, "sgd momentum, --balance");
}

// --compress-weights: each server codes its range of the weights with a codec of its own,
// made for its whole tensors, so that every worker decodes what one server's codec gives.
TEST(RangeServersThreads, ServersGiveOneServersWeightsWithAWeightCodec) {
  torch::set_num_threads(1);
  for (const char* codec : {"int4", "fp16"}) {
    testsupport::ScratchDir scratch(std::string("servers-weights-") + codec);
    auto cfg = testsupport::smallSyntheticConfig(scratch.str());
    cfg.compressWeights = codec;
    ASSERT_TRUE(cfg.compressesWeights());
    expectServersAgree(cfg, std::string("--compress-weights ") + codec);
  }
}

// Point to point (exchanges/point_to_point): server 0 decides each arrival and the others
// follow. async with one worker: every gradient is accepted, in one order; AdamW with
// clipping asks every server's partial norm. backup with every gradient in (--aggregate 2 of
// 2 workers): two addends sum alike in either order of arrival. With int8 and error
// feedback, each range coded by its own codec.
TEST(RangeServersThreads, ServersGiveOneServersWeightsInAsyncWithOneWorker) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-async");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.mode = config::Mode::Async;
  cfg.optimizer = "adamw";
  cfg.lr = 0.002;
  cfg.clipGradNorm = 0.5;
  expectServersAgree(cfg, "async, adamw + clip 0.5", 1);
}

TEST(RangeServersThreads, ServersGiveOneServersWeightsInBackupWithEveryGradientIn) {
  torch::set_num_threads(1);
  for (const char* codec : {"none", "int8"}) {
    testsupport::ScratchDir scratch(std::string("servers-backup-") + codec);
    auto cfg = testsupport::smallSyntheticConfig(scratch.str());
    cfg.mode = config::Mode::Backup;
    cfg.aggregate = 2;
    cfg.compress = codec;
    expectServersAgree(cfg, std::string("backup, aggregate 2 of 2, --compress ") + codec, 2);
  }
}

// ResNet-18's ranges are millions of floats: raw gradients travel in several parts of
// kPartFloats each (exchanges/Wire.h), summed part by part; a checkpoint mid-run is written as
// server 0 gathers the optimizer state one parameter at a time.
TEST(RangeServersThreads, ServersGiveOneServersWeightsWithRangesOfManyParts) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-parts");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.model = "resnet18";
  cfg.dataset = "synthetic-cifar";
  cfg.syntheticSize = 96;
  cfg.batchSize = 2;
  cfg.steps = 4;
  cfg.checkpointEvery = 2;
  cfg.warmupSteps = 0;
  expectServersAgree(cfg, "resnet18, parts");
}

// diloco's outer step (exchanges/rounds/OuterRanges.h): raw floats both ways, rounds of 5
// local steps neither overlapped nor dealt by speed, so that only the servers differ.
TEST(RangeServersThreads, ServersGiveOneServersWeightsInDilocosOuterStep) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("servers-diloco");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.mode = config::Mode::Diloco;
  cfg.localStepsFlag = "5";
  cfg.overlapRoundsFlag = config::Switch::Off;
  cfg.balanceFlag = config::Switch::Off;
  cfg.compress = "none";
  cfg.compressWeights = "none";
  cfg.outerMomentum = 0.9;
  expectServersAgree(cfg, "diloco, outer nesterov");
}

// K servers against a plain reference written without the exchange code (tests/common/
// Reference.cpp: torch::optim::SGD on each step's union of the shards' batches), so that a
// bug that K servers and one server share cannot cancel out: sync, backup with every gradient
// in and async with one worker, each over 2 servers.
TEST(RangeServersThreads, TwoServersGiveThePlainReferencesWeights) {
  torch::set_num_threads(1);
  struct Case {
    config::Mode mode;
    int workers;
  };
  for (const Case c : {Case{config::Mode::Sync, 3}, Case{config::Mode::Backup, 2}, Case{config::Mode::Async, 1}}) {
    testsupport::ScratchDir scratch("servers-reference");
    auto cfg = testsupport::smallSyntheticConfig(scratch.str());
    cfg.mode = c.mode;
    cfg.aggregate = c.workers;  // backup: every gradient in
    cfg.servers = 2;
    data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
    const auto trained = trainOnThreads(cfg, 2 + c.workers, train);
    torch::manual_seed(cfg.seed);
    auto reference = models::makeModel(cfg.model);
    testsupport::trainReference(*reference, train, cfg, c.workers, cfg.steps);
    const double diff = testsupport::maxAbsDiff(models::stateDict(*reference), trained);
    std::cout << config::info(c.mode).name << ", 2 servers vs the plain reference: max abs diff " << diff << std::endl;
    EXPECT_LE(diff, 1e-5) << config::info(c.mode).name;
  }
}
