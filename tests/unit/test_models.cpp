// The model zoo (models/): layouts, parameter counts, outputs, names.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <torch/torch.h>

#include "models/Registry.h"
#include "models/StateDict.h"
#include "runtime/Errors.h"
#include "runtime/protocol/FlatParameters.h"

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

TEST(Models, SmallModelsHaveThePyTorchStateDictLayout) {
  for (const char* name : {"mlp", "convnet", "lenet"}) {
    EXPECT_EQ(models::parameterSignature(*models::makeModel(name)), expectedSignature(name)) << name;
  }
}

// Exact counts of the definitions (10 classes); the references quote resnet20 0.27 M,
// resnet56 0.85 M, resnet110 1.7 M (He et al.), resnet18 11.2 M, vgg16-bn 15 M (CIFAR).
TEST(Models, ParameterCountsOfTheZoo) {
  const std::map<std::string, std::int64_t> expected = {
      {"mlp", 203530},          {"convnet", 1960},        {"lenet", 431080},        {"resnet20", 269722},
      {"resnet32", 464154},     {"resnet44", 658586},     {"resnet56", 853018},     {"resnet110", 1727962},
      {"resnet18", 11173962},   {"resnet34", 21282122},   {"resnet50", 23520842},   {"resnet101", 42512970},
      {"resnet152", 58156618},  {"vgg11", 9231114},       {"vgg13", 9416010},       {"vgg16", 14728266},
      {"vgg19", 20040522}};
  ASSERT_EQ(models::modelList().size(), expected.size());
  for (const auto& info : models::modelList()) {
    EXPECT_EQ(models::parameterCount(*models::makeModel(info.name)), expected.at(info.name)) << info.name;
  }
  EXPECT_EQ(models::parameterCount(*models::makeModel("resnet20", 100)), 269722 + 64 * 90 + 90);
}

TEST(Models, ForwardGivesLogProbabilitiesOfTheDeclaredInputShape) {
  torch::NoGradGuard noGrad;
  for (const auto& info : models::modelList()) {
    auto model = models::makeModel(info.name);
    model->eval();
    std::vector<std::int64_t> shape = {2};
    shape.insert(shape.end(), info.inputShape.begin(), info.inputShape.end());
    auto out = model->forward(torch::randn(shape));
    EXPECT_EQ(out.sizes(), (std::vector<std::int64_t>{2, 10})) << info.name;
    EXPECT_NEAR(out.exp().sum(1).mean().item<double>(), 1.0, 1e-4) << info.name;
  }
}

TEST(Models, BatchNormStatisticsAreBuffersNotParameters) {
  auto model = models::makeModel("resnet20");
  std::set<std::string> buffers;
  for (const auto& item : model->named_buffers()) buffers.insert(item.key());
  for (const auto& item : model->named_parameters()) {
    EXPECT_EQ(item.key().find("running_"), std::string::npos) << item.key();
  }
  EXPECT_TRUE(buffers.count("bn1.running_mean"));
  EXPECT_TRUE(buffers.count("layer3.2.bn2.running_var"));
  EXPECT_TRUE(buffers.count("layer1.0.bn1.num_batches_tracked"));
  // 19 BatchNorms over 688 channels: running mean and var per channel, one counter each.
  EXPECT_EQ(protocol::bufferCount(*model), 2 * 688 + 19);
}

TEST(Models, UnknownNameListsTheKnownOnes) {
  try {
    models::makeModel("alexnet");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("lenet"), std::string::npos);
  }
}
