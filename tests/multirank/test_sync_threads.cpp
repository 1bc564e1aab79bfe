// Multi-rank protocol tests with ranks as threads on the in-process communicator.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "runtime/Errors.h"
#include "runtime/comm/InProcessComm.h"
#include "runtime/roles/Training.h"
#include "tests/common/Reference.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;

namespace {

// Runs body(rank) on `size` threads; returns each rank's exception message ("" if none).
std::vector<std::string> runRanks(comm::InProcessWorld& world, const std::function<void(int)>& body) {
  std::vector<std::string> errors(world.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        world.abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

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
    roles::runTraining(world.rank(r), cfg, *nets[r], r == 0 ? nullptr : &train, c10::Device(c10::kCPU), {});
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;

  torch::manual_seed(cfg.seed);
  auto reference = models::makeModel(cfg.model);
  testsupport::trainReference(*reference, train, cfg, 2, cfg.steps);
  auto trained = checkpoint::readStateDict(cfg.trainDir + "/trained_model.pt");
  EXPECT_LE(testsupport::maxAbsDiff(models::stateDict(*reference), trained), 1e-5);
  EXPECT_GT(testsupport::maxAbsDiff(initial, trained), 1e-3) << "training did not move the weights";
  // The server's model holds the final weights after the run.
  EXPECT_LE(testsupport::maxAbsDiff(models::stateDict(*nets[0]), trained), 0.0);
  // Checkpoints at step 10 and the final step 20 were published.
  auto published = checkpoint::listPublished(cfg.trainDir + "/ckpt");
  ASSERT_EQ(published.size(), 2u);
  EXPECT_EQ(published[0].step, 10);
  EXPECT_EQ(published[1].step, 20);
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
      roles::runTraining(world.rank(r), r == 2 ? other : cfg, *nets[r], r == 0 ? nullptr : &train,
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
    roles::runTraining(world.rank(r), cfg, *nets[r], r == 0 ? nullptr : (r == 1 ? &train : &smaller),
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
          roles::runTraining(world.rank(0), cfg, *net, nullptr, c10::Device(c10::kCPU), {});
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
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
}
