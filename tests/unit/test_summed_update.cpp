// The update from summed up messages (roles/SummedUpdate): its finite check.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <limits>

#include "models/Registry.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/SummedUpdate.h"

using namespace pstrain;

// The server's check of a summed gradient: finite extremes pass, one Inf or NaN anywhere
// (including the vectorised loop's tail) fails.
TEST(AllFinite, FindsAnyInfOrNanAndPassesFiniteExtremes) {
  at::Tensor values = torch::randn({1003});
  values[0] = std::numeric_limits<float>::max();
  values[1] = -std::numeric_limits<float>::max();
  values[2] = std::numeric_limits<float>::denorm_min();
  values[3] = -0.0f;
  EXPECT_TRUE(roles::allFinite(values));
  EXPECT_TRUE(roles::allFinite(torch::zeros({0})));
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    for (std::int64_t at : {0, 517, 1002}) {
      at::Tensor copy = values.clone();
      copy[at] = bad;
      EXPECT_FALSE(roles::allFinite(copy)) << bad << " at " << at;
    }
  }
}

// diloco's outer step (issue 40): rank 0's rule for --mode diloco (TrainConfig::updateRule)
// applied to summed pseudo-gradients (each worker's global - local weights times its
// samples) equals torch.optim.SGD(lr, momentum, nesterov=True) applied to their
// sample-weighted mean, over 5 rounds; the inner rule's clipping and weight decay stay out.
TEST(OuterStep, DilocosNesterovStepIsTorchSgdOnTheMeanPseudoGradient) {
  torch::manual_seed(11);
  config::TrainConfig cfg;
  cfg.mode = config::Mode::Diloco;
  cfg.optimizer = "adamw";  // the workers' inner rule: not rank 0's
  cfg.clipGradNorm = 0.01;  // the inner gradient's: the outer step is not clipped
  cfg.weightDecay = 0.1;
  cfg.outerLr = 0.7;
  cfg.outerMomentum = 0.9;
  const config::TrainConfig rule = cfg.updateRule();
  auto model = models::makeModel("mlp");
  const std::int64_t n = models::parameterCount(*model);
  protocol::StepMessages messages(n, protocol::bufferCount(*model), 3);
  protocol::bindParameters(*model, messages.weights);
  auto outer = optim::makeOptimizer(rule);
  roles::SummedUpdate update(rule, *outer, *model, messages);

  at::Tensor reference = messages.weights.clone().requires_grad_(true);
  torch::optim::SGD torchSgd({reference}, torch::optim::SGDOptions(0.7).momentum(0.9).nesterov(true));
  const float samples[] = {16, 48};  // two workers that did unequal work
  for (int round = 0; round < 5; ++round) {
    at::Tensor sum = torch::zeros({n});
    for (float s : samples) sum += torch::randn({n}) * 0.01 * s;
    messages.grad.copy_(sum);
    messages.trailer[protocol::kSamples] = samples[0] + samples[1];
    messages.trailer[protocol::kLossSum] = 1;
    messages.trailer[protocol::kNonFinite] = 0;
    ASSERT_TRUE(update.apply(rule.lr, 2, round));
    reference.mutable_grad() = sum / (samples[0] + samples[1]);
    torchSgd.step();
    const double norm = (sum / 64).to(torch::kDouble).norm().item<double>();  // the metrics' delta_norm
    EXPECT_NEAR(update.gradNorm(), norm, 1e-6 * norm);
  }
  const double diff = (messages.weights - reference.detach()).abs().max().item<double>();
  std::cout << "outer Nesterov step vs torch::optim::SGD over 5 rounds: max abs diff " << diff << std::endl;
  EXPECT_LE(diff, 1e-6);
  EXPECT_EQ(rule.optimizer, "sgd");
  EXPECT_TRUE(rule.nesterov);
  cfg.outerOptimizer = "sgd";
  EXPECT_FALSE(cfg.updateRule().nesterov);
  cfg.mode = config::Mode::Sync;  // every other mode: its own rule
  EXPECT_EQ(cfg.updateRule().optimizer, "adamw");
  EXPECT_EQ(cfg.updateRule().clipGradNorm, 0.01);
}
