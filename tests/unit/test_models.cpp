#include <gtest/gtest.h>

#include <map>
#include <set>
#include <torch/torch.h>

#include "models/Registry.h"
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

TEST(FlatParameters, BuffersRoundTripThroughAFlatFloatBuffer) {
  auto model = models::makeModel("resnet20");
  model->train();
  model->forward(torch::randn({4, 3, 32, 32}));  // moves the running statistics
  at::Tensor flat = torch::empty({protocol::bufferCount(*model)});
  protocol::readBuffers(*model, flat);
  auto other = models::makeModel("resnet20");
  protocol::writeBuffers(*other, flat);
  auto a = model->named_buffers(), b = other->named_buffers();
  for (const auto& item : a) EXPECT_TRUE(item.value().equal(b[item.key()])) << item.key();
  EXPECT_EQ(b["bn1.num_batches_tracked"].item<std::int64_t>(), 1);
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
  protocol::bindParameters(*model, weights);
  protocol::bindGradients(*model, grads);
  EXPECT_TRUE(weights.narrow(0, 0, before.numel()).view(before.sizes()).equal(before));
  weights.fill_(0.5);
  EXPECT_EQ(model->parameters()[3][0].item<float>(), 0.5f);

  weights.normal_();
  auto loss = torch::nll_loss(model->forward(torch::randn({3, 1, 28, 28})), torch::tensor({1, 2, 3}));
  loss.backward();
  protocol::collectGradients(*model, grads);
  EXPECT_GT(grads.abs().sum().item<double>(), 0);
  auto p = model->parameters();
  EXPECT_EQ(p[0].grad().data_ptr(), grads.data_ptr()) << "backward did not accumulate in place";
}

TEST(FlatParameters, GradientBucketsCutTheBufferBackToFront) {
  auto model = models::makeModel("lenet");
  const std::int64_t n = models::parameterCount(*model);
  auto buckets = protocol::gradientBuckets(*model, 64 * 1024);
  ASSERT_GT(buckets.size(), 2u);
  EXPECT_EQ(buckets.front().end, n);  // the last parameters' gradients come first
  EXPECT_EQ(buckets.back().begin, 0);
  for (std::size_t b = 1; b < buckets.size(); ++b) EXPECT_EQ(buckets[b].end, buckets[b - 1].begin);
  for (std::size_t b = 0; b + 1 < buckets.size(); ++b) EXPECT_EQ((buckets[b].end - buckets[b].begin) * 4, 64 * 1024);
  EXPECT_EQ(buckets.size(), static_cast<std::size_t>((n * 4 + 64 * 1024 - 1) / (64 * 1024)));
  // Each bucket lists exactly the parameters it overlaps, the last ones first: fc1's
  // weight (400,000 elements) spans several buckets.
  auto parameters = model->parameters();
  std::int64_t offset = 0;
  std::vector<std::int64_t> offsets;
  for (const auto& p : parameters) {
    offsets.push_back(offset);
    offset += p.numel();
  }
  for (const auto& b : buckets) {
    std::vector<int> expected;
    for (int i = static_cast<int>(parameters.size()) - 1; i >= 0; --i) {
      if (offsets[i] < b.end && offsets[i] + parameters[i].numel() > b.begin) expected.push_back(i);
    }
    EXPECT_EQ(b.parameters, expected) << "bucket [" << b.begin << ", " << b.end << ")";
  }
  EXPECT_EQ(protocol::gradientBuckets(*model, std::int64_t(1) << 40).size(), 1u);  // one bucket: all of it
}
