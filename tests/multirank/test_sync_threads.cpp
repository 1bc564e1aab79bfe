// Multi-rank protocol tests with ranks as threads on the in-process communicator.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "models/StateDict.h"
#include "runtime/Errors.h"
#include "runtime/comm/InProcessComm.h"
#include "runtime/loss/Evaluation.h"
#include "runtime/training/Training.h"
#include "tests/common/Ranks.h"
#include "tests/common/Reference.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;

using testsupport::runRanks;

TEST(SyncThreads, TwoWorkersEqualOneProcessOnTheUnion) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("equivalence");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  // Models are built here, one after the other, so the global generator is not raced.
  std::vector<std::shared_ptr<models::Net>> nets;
  for (int r = 0; r < 3; ++r) {
    torch::manual_seed(cfg.seed);
    nets.push_back(models::makeModel(cfg.model));
  }
  auto initial = testsupport::cloneState(models::stateDict(*nets[0]));

  comm::InProcessWorld world(3);
  auto errors = runRanks(world, [&](int r) {
    training::runTraining(world.rank(r), config::RunPlan(cfg), *nets[r], r == 0 ? nullptr : &train, c10::Device(c10::kCPU), {});
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;

  torch::manual_seed(cfg.seed);
  auto reference = models::makeModel(cfg.model);
  testsupport::trainReference(*reference, train, cfg, 2, cfg.steps);
  auto trained = checkpoint::readStateDict(cfg.trainDir + "/trained_model.pt");
  const double diff = testsupport::maxAbsDiff(models::stateDict(*reference), trained);
  std::cout << "sync PS (2 workers, ranks as threads) vs single process: max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
  EXPECT_GT(testsupport::maxAbsDiff(initial, trained), 1e-3) << "training did not move the weights";
  // The server's model holds the final weights after the run.
  EXPECT_LE(testsupport::maxAbsDiff(models::stateDict(*nets[0]), trained), 0.0);
  // Checkpoints at step 10 and the final step 20 were published.
  auto published = rundir::listPublished(cfg.trainDir + "/ckpt");
  ASSERT_EQ(published.size(), 2u);
  EXPECT_EQ(published[0].step, 10);
  EXPECT_EQ(published[1].step, 20);
}

namespace {

// Keeps `dir`'s checkpoints up to `step` only, as if the job had stopped there.
void truncateRun(const std::filesystem::path& dir, std::int64_t step) {
  for (const auto& p : rundir::listPublished((dir / "ckpt").string())) {
    if (p.step <= step) continue;
    std::filesystem::remove(p.path);
    std::filesystem::remove(p.path.substr(0, p.path.size() - 3) + ".ok");
  }
  std::filesystem::remove(dir / "trained_model.pt");
}

// Trains `cfg` with `workers` workers on ranks as threads (their models from cfg.seed).
void trainWith(const config::TrainConfig& cfg, int workers, const data::Dataset& train) {
  std::vector<std::shared_ptr<models::Net>> nets;
  for (int r = 0; r <= workers; ++r) {
    torch::manual_seed(cfg.seed);
    nets.push_back(models::makeModel(cfg.model));
  }
  comm::InProcessWorld world(workers + 1);
  auto errors = runRanks(world, [&](int r) {
    training::runTraining(world.rank(r), config::RunPlan(cfg), *nets[r], r == 0 ? nullptr : &train, c10::Device(c10::kCPU), {});
  });
  for (int r = 0; r <= workers; ++r) ASSERT_EQ(errors[r], "") << workers << " workers, rank " << r;
}

}  // namespace

// Elastic runs: with the global batch dealt to 6 virtual shards, a run that goes from 2
// workers to 1 after step 5 and to 3 after step 10 (mid-epoch: 13 steps per epoch) ends
// with the weights of an uninterrupted run with 2 workers, and of one process at 6b.
TEST(SyncThreads, VirtualShardsMakeTheRunIndependentOfTheWorkers) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("virtual");
  auto cfg = testsupport::smallSyntheticConfig((scratch / "whole").string());
  cfg.virtualShards = 6;
  cfg.batchSize = 8;
  cfg.checkpointEvery = 5;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  trainWith(cfg, 2, train);
  auto changing = cfg;
  changing.trainDir = (scratch / "changing").string();
  std::filesystem::copy(cfg.trainDir, changing.trainDir, std::filesystem::copy_options::recursive);
  truncateRun(changing.trainDir, 5);
  changing.resume = true;
  changing.virtualShards = 0;  // kept from the checkpoint
  trainWith(changing, 1, train);
  truncateRun(changing.trainDir, 10);
  trainWith(changing, 3, train);

  auto whole = checkpoint::readStateDict(cfg.trainDir + "/trained_model.pt");
  auto elastic = checkpoint::readStateDict(changing.trainDir + "/trained_model.pt");
  torch::manual_seed(cfg.seed);
  auto reference = models::makeModel(cfg.model);
  testsupport::trainReference(*reference, train, cfg, 2, cfg.steps);
  const double vsWhole = testsupport::maxAbsDiff(whole, elastic);
  const double vsReference = testsupport::maxAbsDiff(models::stateDict(*reference), elastic);
  std::cout << "6 virtual shards, 2 -> 1 -> 3 workers vs 2 throughout: max abs diff " << vsWhole
            << "; vs one process at 6b: " << vsReference << std::endl;
  EXPECT_LE(vsWhole, 1e-5);
  EXPECT_LE(vsReference, 1e-5);

  // A resume that would change the virtual shards is refused without --reshard.
  truncateRun(changing.trainDir, 15);
  changing.virtualShards = 4;
  std::vector<std::shared_ptr<models::Net>> nets = {models::makeModel(cfg.model), models::makeModel(cfg.model)};
  comm::InProcessWorld world(2);
  world.rank(1).setTimeoutSeconds(5);
  auto errors = runRanks(world, [&](int r) {
    training::runTraining(world.rank(r), config::RunPlan(changing), *nets[r], r == 0 ? nullptr : &train, c10::Device(c10::kCPU), {});
  });
  EXPECT_NE(errors[0].find("--reshard if you mean it"), std::string::npos) << errors[0];
}

// --grad-accum K (issue 41): K micro-batches of B make the update of a batch of B x K, the
// same samples in the same order, for SGD with momentum (the gradient streamed to the server
// bucket by bucket during backward) and AdamW with clipping (the whole gradient at the end).
// 300 samples a worker in batches of 28 = 7 x 4: the epoch's last batch of 20 comes as
// micro-batches of 7, 7 and 6. AdamW with --eps 1e-5: on random data some of LeNet's
// gradient components are sums that cancel to rounding noise (1e-9), which the default eps
// lets Adam scale up to steps of the lr whichever way they round (one product of 28 or four
// of 7 summed): 1.8e-4 apart after 12 steps. e2e.big_models checks AdamW with the default
// eps on a language model (6.8e-6).
TEST(SyncThreads, GradientAccumulationGivesTheLargerBatchsWeights) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("grad-accum");
  for (const std::string optimizer : {"sgd", "adamw"}) {
    auto whole = testsupport::smallSyntheticConfig((scratch / (optimizer + "-whole")).string());
    whole.optimizer = optimizer;
    whole.clipGradNorm = optimizer == "adamw" ? 1.0 : 0.0;
    whole.lr = optimizer == "adamw" ? 2e-3 : 0.02;
    whole.eps = 1e-5;  // adamw
    whole.batchSize = 28;
    whole.steps = 12;  // 11 a epoch
    data::Dataset train = data::loadDataset(whole.dataset, "", data::Split::Train, whole.syntheticSize);
    trainWith(whole, 2, train);
    auto accumulated = whole;
    accumulated.trainDir = (scratch / (optimizer + "-accumulated")).string();
    accumulated.batchSize = 7;
    accumulated.gradAccum = 4;
    trainWith(accumulated, 2, train);
    auto initial = [&] { torch::manual_seed(whole.seed); return models::stateDict(*models::makeModel(whole.model)); }();
    auto a = checkpoint::readStateDict(whole.trainDir + "/trained_model.pt");
    auto b = checkpoint::readStateDict(accumulated.trainDir + "/trained_model.pt");
    const double diff = testsupport::maxAbsDiff(a, b);
    std::cout << optimizer << ": --batch-size 7 --grad-accum 4 vs --batch-size 28: max abs diff " << diff << std::endl;
    EXPECT_LE(diff, 1e-5) << optimizer;
    EXPECT_GT(testsupport::maxAbsDiff(initial, b), 1e-3) << optimizer << ": training did not move the weights";
    // The checkpoint records the batch a shard computes: either run resumes the other.
    auto published = rundir::listPublished(accumulated.trainDir + "/ckpt");
    ASSERT_FALSE(published.empty());
    EXPECT_EQ(checkpoint::read(published.back()).batchSize, 28) << optimizer;
  }
}

TEST(SyncThreads, MismatchedConfigStopsEveryRankNamingTheField) {
  testsupport::ScratchDir scratch("mismatch");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  auto other = cfg;
  other.lr = 0.5;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  std::vector<std::shared_ptr<models::Net>> nets;
  for (int r = 0; r < 3; ++r) nets.push_back(models::makeModel(cfg.model));
  comm::InProcessWorld world(3);
  std::vector<bool> collective(3, false);
  auto errors = runRanks(world, [&](int r) {
    try {
      training::runTraining(world.rank(r), config::RunPlan(r == 2 ? other : cfg), *nets[r], r == 0 ? nullptr : &train,
                         c10::Device(c10::kCPU), {});
    } catch (const CollectiveConfigError&) {
      collective[r] = true;
      throw;
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(collective[r]) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("'lr'"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank 2"), std::string::npos) << errors[r];
  }
}

TEST(SyncThreads, DatasetSizeMismatchIsCaught) {
  testsupport::ScratchDir scratch("datasize");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  data::Dataset smaller = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize / 2);
  std::vector<std::shared_ptr<models::Net>> nets;
  for (int r = 0; r < 3; ++r) nets.push_back(models::makeModel(cfg.model));
  comm::InProcessWorld world(3);
  auto errors = runRanks(world, [&](int r) {
    training::runTraining(world.rank(r), config::RunPlan(cfg), *nets[r], r == 0 ? nullptr : (r == 1 ? &train : &smaller),
                       c10::Device(c10::kCPU), {});
  });
  for (int r = 0; r < 3; ++r) EXPECT_NE(errors[r].find("'train-samples'"), std::string::npos) << errors[r];
}

TEST(SyncThreads, OneRankIsAClearError) {
  testsupport::ScratchDir scratch("alone");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  auto net = models::makeModel(cfg.model);
  comm::InProcessWorld world(1);
  EXPECT_THROW(
      {
        try {
          training::runTraining(world.rank(0), config::RunPlan(cfg), *net, nullptr, c10::Device(c10::kCPU), {});
        } catch (const CollectiveConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("at least one worker"), std::string::npos);
          throw;
        }
      },
      CollectiveConfigError);
}

TEST(SyncThreads, ARankThatNeverArrivesTimesOutNamingTheOperation) {
  comm::InProcessWorld world(2);
  world.rank(0).setTimeoutSeconds(0.2);
  std::vector<float> buffer(4, 1.0f);
  try {
    world.rank(0).reduceSum(buffer.data(), buffer.size(), 0, "step 7");
    FAIL() << "no timeout";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("step 7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("reduce at step 7: no answer"), std::string::npos) << e.what();
  }
}

// BatchNorm statistics are buffers: they must reach the server (averaged over the workers)
// so that its checkpoints evaluate like the workers' models, never stale or initial.
TEST(SyncThreads, BatchNormBuffersReachTheServerAndItsCheckpointEvaluatesLikeTheWorkers) {
  torch::set_num_threads(1);
  testsupport::ScratchDir scratch("batchnorm");
  auto cfg = testsupport::smallSyntheticConfig(scratch.str());
  cfg.model = "resnet20";
  cfg.dataset = "synthetic-cifar";
  cfg.syntheticSize = 96;
  cfg.batchSize = 8;
  cfg.steps = 6;
  cfg.checkpointEvery = 0;
  data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
  data::Dataset test = data::loadDataset(cfg.dataset, "", data::Split::Test, cfg.syntheticSize);
  std::vector<std::shared_ptr<models::Net>> nets;
  for (int r = 0; r < 3; ++r) {
    torch::manual_seed(cfg.seed);
    nets.push_back(models::makeModel(cfg.model));
  }
  comm::InProcessWorld world(3);
  auto errors = runRanks(world, [&](int r) {
    training::runTraining(world.rank(r), config::RunPlan(cfg), *nets[r], r == 0 ? nullptr : &train, c10::Device(c10::kCPU), {});
  });
  for (int r = 0; r < 3; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;

  auto published = rundir::listPublished(cfg.trainDir + "/ckpt");
  ASSERT_EQ(published.size(), 1u);
  auto ckpt = checkpoint::read(published[0]);
  std::map<std::string, at::Tensor> state(ckpt.modelState.begin(), ckpt.modelState.end());
  // The statistics moved away from their initial values (mean 0, var 1, 0 batches)...
  EXPECT_GT(state.at("bn1.running_mean").abs().max().item<double>(), 1e-3);
  EXPECT_GT((state.at("layer3.2.bn2.running_var") - 1).abs().max().item<double>(), 1e-3);
  EXPECT_EQ(state.at("bn1.num_batches_tracked").item<std::int64_t>(), cfg.steps);
  // ...and the server's checkpoint holds exactly what every worker's model holds.
  auto fromCheckpoint = models::makeModel(cfg.model);
  models::loadStateDict(*fromCheckpoint, ckpt.modelState, published[0].path);
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(testsupport::maxAbsDiff(models::stateDict(*nets[r]), ckpt.modelState), 0.0) << "worker " << r;
  }
  auto server = loss::evaluate(*fromCheckpoint, test, c10::Device(c10::kCPU));
  auto worker = loss::evaluate(*nets[1], test, c10::Device(c10::kCPU));
  EXPECT_EQ(server.accuracy, worker.accuracy);
  EXPECT_EQ(server.predictions, worker.predictions);
  EXPECT_NEAR(server.loss, worker.loss, 1e-6);
  // Stale (initial) statistics would evaluate differently: the test can tell.
  auto stale = models::makeModel(cfg.model);
  auto staleState = ckpt.modelState;
  for (auto& [key, tensor] : staleState) {
    if (key.find("running_mean") != std::string::npos) tensor = torch::zeros_like(tensor);
    if (key.find("running_var") != std::string::npos) tensor = torch::ones_like(tensor);
  }
  models::loadStateDict(*stale, staleState, "stale");
  EXPECT_GT(std::abs(loss::evaluate(*stale, test, c10::Device(c10::kCPU)).loss - server.loss), 1e-3);
}
