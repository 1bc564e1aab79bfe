// The server's flat-buffer Adam and AdamW against torch::optim (runtime/optim/Adam), and the
// clipping factor against torch::nn::utils::clip_grad_norm_ (runtime/optim/Optimizer).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "runtime/Errors.h"
#include "runtime/optim/Adam.h"
#include "tests/common/FlatTensors.h"

using namespace pstrain;
using testsupport::flatten;
using testsupport::strided;

namespace {

struct Case {
  const char* name;
  double weightDecay;
  bool decoupled;  // AdamW
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class AdamMatchesTorch : public ::testing::TestWithParam<Case> {};

}  // namespace

// 100 steps with a changing lr: the one-pass CPU loop, the ATen path and an update taken in
// two slices (as the server takes gradient buckets) all stay within 1e-6 of torch::optim.
TEST_P(AdamMatchesTorch, OverHundredStepsWithChangingLr) {
  const Case c = GetParam();
  torch::manual_seed(5);
  std::vector<at::Tensor> params = {torch::randn({6, 5}), torch::randn({5}), torch::randn({2, 3, 3})};
  std::vector<at::Tensor> reference;
  for (auto& p : params) reference.push_back(p.clone().requires_grad_(true));
  std::unique_ptr<torch::optim::Optimizer> torchAdam;
  if (c.decoupled) {
    torchAdam = std::make_unique<torch::optim::AdamW>(
        reference, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(c.weightDecay));
  } else {
    torchAdam = std::make_unique<torch::optim::Adam>(
        reference, torch::optim::AdamOptions(1e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(c.weightDecay));
  }
  const optim::AdamOptions options{0.9, 0.95, 1e-8, c.weightDecay, c.decoupled};
  at::Tensor flat = flatten(params), stridedFlat = strided(flat), sliced = flat.clone();
  optim::Adam adam(options), stridedAdam(options), slicedAdam(options);
  const std::int64_t n = flat.numel(), cut = 17;
  for (int step = 0; step < 100; ++step) {
    const double lr = 1e-3 * (1 + 0.01 * step);
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(torch::randn(p.sizes()) * (step % 7 + 1));
    for (std::size_t i = 0; i < reference.size(); ++i) reference[i].mutable_grad() = grads[i].clone();
    for (auto& group : torchAdam->param_groups()) {
      if (c.decoupled) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
      else static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    }
    torchAdam->step();
    // The gradient arrives summed over 4 samples, as the server receives it.
    at::Tensor flatGrad = flatten(grads) * 4;
    at::Tensor stridedGrad = strided(flatGrad);
    ASSERT_TRUE(adam.step(flat, flatGrad.clone(), lr, 4));
    ASSERT_TRUE(stridedAdam.step(stridedFlat, stridedGrad, lr, 4));
    slicedAdam.beginUpdate();
    ASSERT_TRUE(slicedAdam.stepSlice(sliced.narrow(0, 0, cut), flatGrad.narrow(0, 0, cut).clone(), lr, 0, n, 4));
    ASSERT_TRUE(slicedAdam.stepSlice(sliced.narrow(0, cut, n - cut), flatGrad.narrow(0, cut, n - cut).clone(), lr, cut, n, 4));
  }
  const at::Tensor expected = flatten(reference);
  std::printf("%s, 100 steps: max abs diff to torch::optim %.3g (one pass), %.3g (ATen), %.3g (in slices)\n", c.name,
              (flat - expected).abs().max().item<double>(), (stridedFlat - expected).abs().max().item<double>(),
              (sliced - expected).abs().max().item<double>());
  EXPECT_LE((flat - expected).abs().max().item<double>(), 1e-6);
  EXPECT_LE((stridedFlat - expected).abs().max().item<double>(), 1e-6);
  EXPECT_LE((sliced - expected).abs().max().item<double>(), 1e-6);
  EXPECT_EQ(adam.updates(), 100);
  // torch's state, by its names: exp_avg and exp_avg_sq of the first parameter (to float
  // rounding of their magnitude: the squares reach the hundreds).
  auto& state = static_cast<torch::optim::AdamParamState&>(*torchAdam->state().at(c10::guts::to_string(reference[0].unsafeGetTensorImpl())));
  const auto ours = adam.state();
  ASSERT_EQ(ours.size(), 2u);
  EXPECT_EQ(ours[0].first, "exp_avg");
  auto relative = [](const at::Tensor& a, const at::Tensor& b) {
    return ((a - b).abs().max() / b.abs().max()).item<double>();
  };
  EXPECT_LE(relative(ours[0].second.narrow(0, 0, 30), state.exp_avg().flatten()), 1e-6);
  EXPECT_LE(relative(ours[1].second.narrow(0, 0, 30), state.exp_avg_sq().flatten()), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Variants, AdamMatchesTorch,
                         ::testing::Values(Case{"Adam", 0, false}, Case{"AdamL2", 1e-2, false},
                                           Case{"AdamW", 0.1, true}, Case{"AdamWNoDecay", 0, true}),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Restored from its state and step count (a checkpoint's), Adam goes on exactly as the one
// that was not interrupted.
TEST(Adam, RestoredStateContinuesExactly) {
  torch::manual_seed(2);
  const optim::AdamOptions options{0.9, 0.999, 1e-8, 0.01, true};
  at::Tensor a = torch::randn({50}), b;
  optim::Adam whole(options), first(options);
  std::vector<at::Tensor> grads;
  for (int i = 0; i < 10; ++i) grads.push_back(torch::randn({50}));
  b = a.clone();
  for (int i = 0; i < 10; ++i) whole.step(a, grads[i].clone(), 0.01);
  for (int i = 0; i < 4; ++i) first.step(b, grads[i].clone(), 0.01);
  optim::Adam second(options);
  for (const auto& [name, buffer] : first.state()) second.restore(name, buffer.clone());
  second.restoreUpdates(first.updates());
  for (int i = 4; i < 10; ++i) second.step(b, grads[i].clone(), 0.01);
  EXPECT_TRUE(a.equal(b));
  EXPECT_THROW(second.restore("momentum_buffer", torch::zeros({50})), CheckpointError);
}

// A non-finite gradient is reported (the weights it reached are not finite).
TEST(Adam, ReportsANonFiniteGradient) {
  optim::Adam adam({});
  at::Tensor w = torch::ones({8}), g = torch::ones({8});
  g[3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(adam.step(w, g, 0.1));
}

// clip_grad_norm_'s factor: min(1, max / (norm + 1e-6)), applied to the gradient.
TEST(Clipping, FactorMatchesClipGradNorm) {
  torch::manual_seed(4);
  for (double maxNorm : {0.1, 1.0, 100.0}) {
    std::vector<at::Tensor> params = {torch::randn({4, 4}, torch::requires_grad()), torch::randn({3}, torch::requires_grad())};
    for (auto& p : params) p.mutable_grad() = torch::randn(p.sizes());
    const at::Tensor flat = flatten({params[0].grad(), params[1].grad()});
    const double norm = std::sqrt(optim::sumOfSquares(flat));
    const double total = torch::nn::utils::clip_grad_norm_(params, maxNorm);
    EXPECT_NEAR(norm, total, 1e-5);
    const at::Tensor clipped = flatten({params[0].grad(), params[1].grad()});
    EXPECT_LE((flat * optim::clipFactor(norm, maxNorm) - clipped).abs().max().item<double>(), 1e-6);
  }
  EXPECT_EQ(optim::clipFactor(5.0, 0), 1.0);  // off
}
