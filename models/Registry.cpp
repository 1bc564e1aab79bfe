#include "models/Registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "models/ScriptModel.h"
#include "models/Zoo.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::models {
namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

// Linear(784, 256) -> ReLU -> Linear(256, 10).
class Mlp : public Net {
 public:
  explicit Mlp(int classes)
      : fc1(register_module("fc1", nn::Linear(784, 256))), fc2(register_module("fc2", nn::Linear(256, classes))) {}
  at::Tensor forward(const at::Tensor& x) override {
    auto h = torch::relu(fc1->forward(x.flatten(1)));
    return torch::log_softmax(fc2->forward(h), 1);
  }
  nn::Linear fc1, fc2;
};

// Conv2d(1, 3, 3) -> max_pool 3 -> ReLU -> Linear(192, 10).
class ConvNet : public Net {
 public:
  explicit ConvNet(int classes)
      : conv1(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 3, 3)))),
        fc1(register_module("fc1", nn::Linear(192, classes))) {}
  at::Tensor forward(const at::Tensor& x) override {
    auto h = torch::relu(torch::max_pool2d(conv1->forward(x), 3));
    return torch::log_softmax(fc1->forward(h.flatten(1)), 1);
  }
  nn::Conv2d conv1;
  nn::Linear fc1;
};

// LeNet-5 as in the PyTorch MNIST example: conv(1,20,5) -> pool -> conv(20,50,5) -> pool ->
// fc(800,500) -> fc(500,10), ReLU between.
class LeNet : public Net {
 public:
  explicit LeNet(int classes)
      : conv1(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 20, 5)))),
        conv2(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(20, 50, 5)))),
        fc1(register_module("fc1", nn::Linear(800, 500))),
        fc2(register_module("fc2", nn::Linear(500, classes))) {}
  at::Tensor forward(const at::Tensor& x) override {
    auto h = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2->forward(h)), 2);
    h = torch::relu(fc1->forward(h.flatten(1)));
    return torch::log_softmax(fc2->forward(h), 1);
  }
  nn::Conv2d conv1, conv2;
  nn::Linear fc1, fc2;
};

struct Entry {
  ModelInfo info;
  std::function<std::shared_ptr<Net>(int classes)> make;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = [] {
    const std::vector<std::int64_t> mnist = {1, 28, 28}, cifar = {3, 32, 32};
    std::vector<Entry> e = {
        {{"mlp", "784-256-10 perceptron", mnist}, [](int c) { return std::make_shared<Mlp>(c); }},
        {{"convnet", "one 3-channel conv, max-pool 3, linear", mnist},
         [](int c) { return std::make_shared<ConvNet>(c); }},
        {{"lenet", "LeNet-5: two convs (20, 50), two linears (500, 10)", mnist},
         [](int c) { return std::make_shared<LeNet>(c); }},
    };
    for (int depth : {20, 32, 44, 56, 110}) {
      e.push_back({{"resnet" + std::to_string(depth),
                    fmt::format("He et al. CIFAR ResNet, 3x{} BasicBlocks of 16/32/64 channels", (depth - 2) / 6), cifar},
                   [depth](int c) { return makeCifarResNet(depth, c); }});
    }
    for (int depth : {18, 34, 50, 101, 152}) {
      e.push_back({{"resnet" + std::to_string(depth),
                    fmt::format("torchvision ResNet-{} ({}), CIFAR stem: 3x3 conv, no max-pool", depth,
                                depth >= 50 ? "Bottleneck" : "BasicBlock"), cifar},
                   [depth](int c) { return makeResNet(depth, c); }});
    }
    for (int depth : {11, 13, 16, 19}) {
      e.push_back({{"vgg" + std::to_string(depth), fmt::format("VGG-{} with BatchNorm, CIFAR classifier", depth), cifar},
                   [depth](int c) { return makeVgg(depth, c); }});
    }
    return e;
  }();
  return entries;
}

}  // namespace

std::vector<ModelInfo> modelList() {
  std::vector<ModelInfo> list;
  for (const auto& e : registry()) list.push_back(e.info);
  return list;
}

const ModelInfo& modelInfo(const std::string& name) {
  std::string known;
  for (const auto& e : registry()) {
    if (e.info.name == name) return e.info;
    known += (known.empty() ? "" : ", ") + e.info.name;
  }
  throw ConfigError(fmt::format("unknown model '{}' (known: {})", name, known));
}

std::shared_ptr<Net> makeModel(const std::string& name, int classes, const WeightsNeeded& needed) {
  if (config::isModelFile(name)) return loadScriptModel(name, needed);
  std::string known;
  for (const auto& e : registry()) {
    if (e.info.name == name) return e.make(classes);
    known += (known.empty() ? "" : ", ") + e.info.name;
  }
  throw ConfigError(fmt::format("unknown model '{}' (known: {})", name, known));
}

const ModelFacts& Net::facts() const {
  static const ModelFacts none;
  return none;
}

OwnLoss Net::forwardWithTargets(const at::Tensor&, const at::Tensor&) {
  throw InternalError("forwardWithTargets() of a model that does not compute its own loss");
}

std::int64_t parameterCount(const torch::nn::Module& module) {
  std::int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();
  return count;
}

std::int64_t frozenCount(const Net& model) {
  std::int64_t count = 0;
  for (const auto& [name, w] : model.frozen()) count += w.numel();
  return count;
}

std::string describeParameters(const Net& model) {
  const std::int64_t frozen = frozenCount(model);
  std::string text = fmt::format("{} {}parameters", parameterCount(model), frozen > 0 ? "trained " : "");
  if (frozen > 0) text += fmt::format(", {} frozen", frozen);
  for (const auto& [alias, name] : model.ties()) text += fmt::format(", {} tied to {}", alias, name);
  return text;
}

}  // namespace pstrain::models
