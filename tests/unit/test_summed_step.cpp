// The update from summed up messages (roles/SummedStep: roles/RangeUpdate as roles/Admission
// admits it): the finite check, the outer step, the loss scale.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <limits>

#include "models/Registry.h"
#include "runtime/Errors.h"
#include "runtime/optim/LossScale.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/SummedStep.h"

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
  const codec::Shapes shapes = protocol::parameterShapes(*model);
  roles::Admission admission(rule);
  roles::RangeUpdate outer(rule, {0, n, shapes}, messages.weights, shapes, false, messages.grad);
  auto apply = [&](double lr, int contributors, std::int64_t step) {
    return roles::applySummed(admission, outer, messages, *model, lr, contributors, step);
  };

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
    ASSERT_TRUE(apply(rule.lr, 2, round));
    reference.mutable_grad() = sum / (samples[0] + samples[1]);
    torchSgd.step();
    const double norm = (sum / 64).to(torch::kDouble).norm().item<double>();  // the metrics' delta_norm
    EXPECT_NEAR(admission.gradNorm(), norm, 1e-6 * norm);
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

// --loss-scale's rule is torch.cuda.amp.GradScaler's (_amp_update_scale_): an overflow halves
// the scale and restarts the count; `growth_interval` finite updates in a row double it; a
// float's largest power of two is as far as it grows.
TEST(LossScale, FollowsGradScalersRule) {
  optim::LossScale scale(3);
  EXPECT_EQ(scale.scale(), 65536.0);
  scale.record(true, 0);
  scale.record(true, 1);
  EXPECT_EQ(scale.scale(), 65536.0);
  EXPECT_EQ(scale.goodSteps(), 2);
  scale.record(true, 2);
  EXPECT_EQ(scale.scale(), 131072.0);
  EXPECT_EQ(scale.goodSteps(), 0);
  scale.record(true, 3);
  scale.record(false, 4);
  EXPECT_EQ(scale.scale(), 65536.0);
  EXPECT_EQ(scale.goodSteps(), 0);
  scale.record(false, 5);
  EXPECT_EQ(scale.scale(), 32768.0);

  optim::LossScale top(1);
  for (int step = 0; step < 200; ++step) top.record(true, step);
  EXPECT_EQ(top.scale(), std::ldexp(1.0, 127));
  EXPECT_EQ(static_cast<double>(static_cast<float>(top.scale())), top.scale());
}

// No finite update at any scale: the run stops naming the step instead of skipping forever.
TEST(LossScale, GivesUpBelowTheSmallestScaleAndRestoresOnlyWhatFits) {
  optim::LossScale scale(2000);
  int steps = 0;
  try {
    for (; steps < 100; ++steps) scale.record(false, steps);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 40"), std::string::npos) << e.what();
  }
  EXPECT_EQ(steps, 40);  // 65536 = 2^16 halved 40 times is 2^-24, the last one tried
  scale.restore(1024.0, 1999);
  EXPECT_EQ(scale.scale(), 1024.0);
  EXPECT_EQ(scale.goodSteps(), 1999);
  // A scale that dynamic loss scaling never reaches is refused as a configuration (exit 2,
  // never retried): outside float's range (1e-300 travelled as 0, "garbled"), or below the
  // smallest the backoff tries (1e-45, a float denormal, gave "lower --lr").
  for (double forged : {0.0, 1e39, double(NAN), 1e-300, 1e-45, 5e-8}) {
    EXPECT_THROW(scale.restore(forged, 0), ConfigError) << forged;
  }
  EXPECT_THROW(scale.restore(1024.0, 2000), ConfigError);
  scale.restore(optim::LossScale::kSmallestScale, 0);  // the smallest it tries
}

// With loss scaling the update skips a summed gradient that overflowed, changing neither the
// weights nor the optimizer, and halves the scale; a finite one is applied.
TEST(LossScale, AnOverflowedGradientIsSkippedAndHalvesTheScale) {
  torch::manual_seed(5);
  config::TrainConfig cfg;
  cfg.optimizer = "adam";
  cfg.lossScale = "dynamic";
  cfg.lossScaleWindow = 2;
  auto model = models::makeModel("mlp");
  const std::int64_t n = models::parameterCount(*model);
  protocol::StepMessages messages(n, protocol::bufferCount(*model), 2);
  protocol::bindParameters(*model, messages.weights);
  const codec::Shapes shapes = protocol::parameterShapes(*model);
  roles::Admission admission(cfg);
  roles::RangeUpdate adam(cfg, {0, n, shapes}, messages.weights, shapes, false, messages.grad);
  auto apply = [&](double lr, int contributors, std::int64_t step) {
    return roles::applySummed(admission, adam, messages, *model, lr, contributors, step);
  };
  ASSERT_NE(admission.lossScaling(), nullptr);
  EXPECT_EQ(admission.lossScale(), 65536.0);
  messages.trailer[protocol::kSamples] = 8;
  messages.trailer[protocol::kLossSum] = 8;
  messages.grad.normal_();
  ASSERT_TRUE(apply(0.01, 1, 0));
  const at::Tensor before = messages.weights.clone();
  messages.grad[n / 2] = INFINITY;
  EXPECT_FALSE(apply(0.01, 1, 1));
  EXPECT_TRUE(messages.weights.equal(before));
  EXPECT_EQ(adam.optimizer().updates(), 1);
  EXPECT_EQ(admission.lossScale(), 32768.0);
  messages.grad.normal_();
  EXPECT_TRUE(apply(0.01, 1, 2));
  EXPECT_TRUE(apply(0.01, 1, 3));
  EXPECT_EQ(admission.lossScale(), 65536.0);
  EXPECT_FALSE(messages.weights.equal(before));

  config::TrainConfig plain;  // fp32, --loss-scale auto: none
  const roles::Admission unscaled(plain);
  EXPECT_EQ(unscaled.lossScaling(), nullptr);
  EXPECT_EQ(unscaled.lossScale(), 1.0);
  plain.precision = "fp16";
  EXPECT_TRUE(plain.lossScaling());
}
