#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/Registry.h"
#include "runtime/Errors.h"
#include "runtime/roles/FlatParameters.h"

using namespace pstrain;

namespace {

// state_dict keys and shapes of the PyTorch modules in tools/pstrain_models.py.
std::string expectedSignature(const std::string& name) {
  if (name == "mlp") return "fc1.weight:256x784,fc1.bias:256,fc2.weight:10x256,fc2.bias:10";
  if (name == "convnet") return "conv1.weight:3x1x3x3,conv1.bias:3,fc1.weight:10x192,fc1.bias:10";
  return "conv1.weight:20x1x5x5,conv1.bias:20,conv2.weight:50x20x5x5,conv2.bias:50,"
         "fc1.weight:500x800,fc1.bias:500,fc2.weight:10x500,fc2.bias:10";
}

}  // namespace

TEST(Models, StateDictMatchesPyTorchAndForwardGivesLogProbabilities) {
  for (const auto& info : models::modelList()) {
    auto model = models::makeModel(info.name);
    EXPECT_EQ(models::parameterSignature(*model), expectedSignature(info.name)) << info.name;
    auto out = model->forward(torch::randn({4, 1, 28, 28}));
    EXPECT_EQ(out.sizes(), (std::vector<std::int64_t>{4, 10})) << info.name;
    EXPECT_NEAR(out.exp().sum(1).mean().item<double>(), 1.0, 1e-5) << info.name;
  }
  EXPECT_EQ(models::parameterCount(*models::makeModel("lenet")), 431080);
  EXPECT_EQ(models::parameterCount(*models::makeModel("mlp")), 203530);
  EXPECT_EQ(models::parameterCount(*models::makeModel("convnet")), 1960);
}

TEST(Models, UnknownNameListsTheKnownOnes) {
  try {
    models::makeModel("alexnet");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("lenet"), std::string::npos);
  }
}

TEST(FlatParameters, ParametersAndGradientsLiveInTheFlatBuffers) {
  torch::manual_seed(0);
  auto model = models::makeModel("lenet");
  auto before = models::stateDict(*model)[0].second.clone();
  std::int64_t n = models::parameterCount(*model);
  at::Tensor weights = torch::zeros({n});
  at::Tensor grads = torch::zeros({n});
  roles::bindParameters(*model, weights);
  roles::bindGradients(*model, grads);
  EXPECT_TRUE(weights.narrow(0, 0, before.numel()).view(before.sizes()).equal(before));
  weights.fill_(0.5);
  EXPECT_EQ(model->parameters()[3][0].item<float>(), 0.5f);

  weights.normal_();
  auto loss = torch::nll_loss(model->forward(torch::randn({3, 1, 28, 28})), torch::tensor({1, 2, 3}));
  loss.backward();
  roles::collectGradients(*model, grads);
  EXPECT_GT(grads.abs().sum().item<double>(), 0);
  auto p = model->parameters();
  EXPECT_EQ(p[0].grad().data_ptr(), grads.data_ptr()) << "backward did not accumulate in place";
}
