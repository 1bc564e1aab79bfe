#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/optim/LrSchedule.h"
#include "runtime/optim/Sgd.h"
#include "runtime/roles/SummedUpdate.h"

#include <cmath>
#include <limits>

using namespace pstrain;

namespace {

struct Case {
  const char* name;
  double momentum, weightDecay;
  bool nesterov;
};

// Names the case in test listings (instead of its raw bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SgdMatchesTorch : public ::testing::TestWithParam<Case> {};

}  // namespace

// The flat-buffer SGD of the server equals torch::optim::SGD on per-parameter tensors,
// on both of its paths.
TEST_P(SgdMatchesTorch, OverTenStepsWithChangingLr) {
  const Case c = GetParam();
  torch::manual_seed(3);
  std::vector<at::Tensor> params = {torch::randn({5, 7}), torch::randn({7}), torch::randn({3, 2, 2})};
  std::vector<at::Tensor> reference;
  for (auto& p : params) reference.push_back(p.clone().requires_grad_(true));
  torch::optim::SGD torchSgd(reference, torch::optim::SGDOptions(0.1)
                                            .momentum(c.momentum)
                                            .nesterov(c.nesterov)
                                            .weight_decay(c.weightDecay));
  at::Tensor flat = torch::cat({params[0].flatten(), params[1].flatten(), params[2].flatten()});
  optim::Sgd sgd({c.momentum, c.weightDecay, c.nesterov});
  // Contiguous CPU floats take the one-pass loop; a strided view takes the ATen ops that
  // run on any device. Both must match torch.
  auto strided = [](const at::Tensor& t) {
    at::Tensor doubled = torch::zeros({2 * t.numel()});
    at::Tensor view = doubled.slice(0, 0, 2 * t.numel(), 2);
    view.copy_(t);
    return view;
  };
  at::Tensor stridedFlat = strided(flat);
  ASSERT_FALSE(stridedFlat.is_contiguous());
  optim::Sgd stridedSgd({c.momentum, c.weightDecay, c.nesterov});
  for (int step = 0; step < 10; ++step) {
    double lr = 0.05 + 0.01 * step;
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(torch::randn(p.sizes()));
    for (std::size_t i = 0; i < reference.size(); ++i) reference[i].mutable_grad() = grads[i].clone();
    for (auto& group : torchSgd.param_groups()) group.options().set_lr(lr);
    torchSgd.step();
    at::Tensor flatGrad = torch::cat({grads[0].flatten(), grads[1].flatten(), grads[2].flatten()});
    at::Tensor stridedGrad = strided(flatGrad);
    sgd.step(flat, flatGrad, lr);
    stridedSgd.step(stridedFlat, stridedGrad, lr);
  }
  at::Tensor expected = torch::cat({reference[0].detach().flatten(), reference[1].detach().flatten(),
                                    reference[2].detach().flatten()});
  EXPECT_LE((flat - expected).abs().max().item<double>(), 1e-6);
  EXPECT_LE((stridedFlat - expected).abs().max().item<double>(), 1e-6);
  EXPECT_EQ(sgd.momentumBuffer().defined(), c.momentum != 0);
}

INSTANTIATE_TEST_SUITE_P(Variants, SgdMatchesTorch,
                         ::testing::Values(Case{"Plain", 0, 0, false}, Case{"Momentum", 0.9, 0, false},
                                           Case{"MomentumDecay", 0.9, 5e-4, false},
                                           Case{"NesterovDecay", 0.9, 5e-4, true},
                                           Case{"DecayOnly", 0, 1e-2, false}),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

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

// The server updates each gradient bucket as soon as it is reduced: stepping every slice
// must equal one step over the whole buffer, momentum and Nesterov included.
TEST(Sgd, SlicesEqualTheWholeBuffer) {
  for (bool nesterov : {false, true}) {
    torch::manual_seed(5);
    at::Tensor whole = torch::randn({100}), sliced = whole.clone();
    optim::Sgd a({0.9, 1e-3, nesterov}), b({0.9, 1e-3, nesterov});
    for (int step = 0; step < 5; ++step) {
      at::Tensor grad = torch::randn({100});
      at::Tensor g1 = grad.clone(), g2 = grad.clone();
      a.step(whole, g1, 0.1);
      for (std::int64_t begin : {60, 20, 0}) {  // any order, as buckets arrive
        std::int64_t end = begin == 60 ? 100 : begin == 20 ? 60 : 20;
        b.stepSlice(sliced.narrow(0, begin, end - begin), g2.narrow(0, begin, end - begin), 0.1, begin, 100);
      }
    }
    EXPECT_LE((whole - sliced).abs().max().item<double>(), 1e-7) << "nesterov " << nesterov;
  }
}

// The server's update in one pass: the gradient divided by the sample count in the same
// loop gives exactly the values of dividing first, and the step itself tells whether its
// gradient was finite (a non-finite value anywhere, the loop's tail included).
TEST(Sgd, FusedDivisionAndFiniteCheck) {
  for (bool nesterov : {false, true}) {
    for (double decay : {0.0, 1e-3}) {
      torch::manual_seed(7);
      at::Tensor fused = torch::randn({1003}), separate = fused.clone();
      optim::Sgd a({0.9, decay, nesterov}), b({0.9, decay, nesterov});
      for (int step = 0; step < 3; ++step) {
        at::Tensor grad = torch::randn({1003}) * 64;
        at::Tensor g1 = grad.clone(), g2 = grad.clone();
        EXPECT_TRUE(a.step(fused, g1, 0.1, 64.0));
        g2.div_(64.0);
        EXPECT_TRUE(b.step(separate, g2, 0.1));
      }
      EXPECT_TRUE(fused.equal(separate)) << "nesterov " << nesterov << " decay " << decay;
    }
  }
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    for (std::int64_t at : {0, 517, 1002}) {
      for (double lr : {0.1, 0.0}) {  // lr 0 too: 0 x Inf is NaN
        at::Tensor weights = torch::randn({1003}), grad = torch::randn({1003});
        grad[at] = bad;
        optim::Sgd sgd({0.9, 0, false});
        EXPECT_FALSE(sgd.step(weights, grad, lr, 2.0)) << bad << " at " << at << " lr " << lr;
      }
    }
  }
  // An update that overflows the weights fails as well.
  at::Tensor big = torch::full({10}, std::numeric_limits<float>::max()), push = torch::full({10}, -1.0f);
  optim::Sgd plain({0, 0, false});
  EXPECT_FALSE(plain.step(big, push, std::numeric_limits<float>::max()));
}

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
