#pragma once
// A whole run with ranks as threads (multirank tests).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "runtime/comm/InProcessComm.h"
#include "runtime/config/Layout.h"
#include "runtime/training/Training.h"
#include "tests/common/Ranks.h"

namespace pstrain::testsupport {

// Trains cfg on `size` ranks as threads and returns trained_model.pt; a rank's error fails
// the calling test. Rank r's model is seeded cfg.seed + r: every mode starts from rank 0's
// weights (sent, or averaged from them), which a test of that relies on.
inline checkpoint::TensorList trainOnThreads(const config::TrainConfig& cfg, int size, const data::Dataset& train) {
  std::vector<std::shared_ptr<models::Net>> nets;
  for (int r = 0; r < size; ++r) {
    torch::manual_seed(cfg.seed + static_cast<std::uint64_t>(r));
    nets.push_back(models::makeModel(cfg.model));
  }
  comm::InProcessWorld world(size);
  auto errors = runRanks(world, [&](int r) {
    const bool data = config::Layout(cfg, size).computes(r);
    training::runTraining(world.rank(r), config::RunPlan(cfg), *nets[r], data ? &train : nullptr, c10::Device(c10::kCPU), {});
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return checkpoint::readStateDict(cfg.trainDir + "/trained_model.pt");
}

}  // namespace pstrain::testsupport
