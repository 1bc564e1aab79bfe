// The learning-rate schedule (runtime/optim/LrSchedule).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/config/TrainConfig.h"
#include "runtime/optim/LrSchedule.h"

using namespace pstrain;

TEST(LrSchedule, LinearScalingAndWarmup) {
  config::TrainConfig cfg;
  cfg.lr = 0.1;
  cfg.lrScaling = "linear";
  cfg.warmupSteps = 4;
  EXPECT_DOUBLE_EQ(optim::learningRate(cfg, 4, 0, 1000), 0.4 * 1 / 4);
  EXPECT_DOUBLE_EQ(optim::learningRate(cfg, 4, 3, 1000), 0.4);
  EXPECT_DOUBLE_EQ(optim::learningRate(cfg, 4, 100, 1000), 0.4);
  cfg.lrScaling = "none";
  cfg.warmupSteps = 0;
  EXPECT_DOUBLE_EQ(optim::learningRate(cfg, 4, 0, 1000), 0.1);
}

TEST(LrSchedule, CosineDecayAfterWarmupEndsNearZero) {
  config::TrainConfig cfg;
  cfg.lr = 0.1;
  cfg.lrScaling = "none";
  cfg.warmupSteps = 10;
  cfg.lrDecay = "cosine";
  EXPECT_DOUBLE_EQ(optim::learningRate(cfg, 2, 9, 110), 0.1);   // last warm-up step
  EXPECT_DOUBLE_EQ(optim::learningRate(cfg, 2, 10, 110), 0.1);  // cosine starts at the target
  EXPECT_NEAR(optim::learningRate(cfg, 2, 60, 110), 0.05, 1e-12);
  EXPECT_LT(optim::learningRate(cfg, 2, 109, 110), 1e-4);
}
