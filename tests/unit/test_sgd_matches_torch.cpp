// The server's flat-buffer SGD against torch::optim::SGD (runtime/optim/Sgd).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "runtime/optim/Sgd.h"
#include "tests/common/FlatTensors.h"

using namespace pstrain;
using testsupport::flatten;
using testsupport::strided;

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
  at::Tensor flat = flatten(params);
  optim::Sgd sgd({c.momentum, c.weightDecay, c.nesterov});
  // Contiguous CPU floats take the one-pass loop; a strided view takes the ATen ops that
  // run on any device. Both must match torch.
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
    at::Tensor flatGrad = flatten(grads);
    at::Tensor stridedGrad = strided(flatGrad);
    sgd.step(flat, flatGrad, lr);
    stridedSgd.step(stridedFlat, stridedGrad, lr);
  }
  at::Tensor expected = flatten(reference);
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
