#include <fmt/format.h>
#include <torch/torch.h>

#include "models/Zoo.h"
#include "runtime/Errors.h"

namespace pstrain::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv3x3(int in, int out, int stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}
nn::Conv2d conv1x1(int in, int out, int stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

// A residual block: forward(x) = relu(body(x) + shortcut(x)).
class Block : public nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;
};

// He et al.'s CIFAR block with the parameter-free "option A" shortcut: subsample by 2 and
// pad the new channels with zeros.
class CifarBasicBlock : public Block {
 public:
  CifarBasicBlock(int in, int out, int stride)
      : conv1(register_module("conv1", conv3x3(in, out, stride))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2", conv3x3(out, out, 1))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))),
        stride_(stride), padChannels_(out - in) {}

  at::Tensor forward(const at::Tensor& x) override {
    auto out = torch::relu(bn1->forward(conv1->forward(x)));
    out = bn2->forward(conv2->forward(out));
    at::Tensor shortcut = x;
    if (stride_ != 1 || padChannels_ != 0) {
      shortcut = x.index({torch::indexing::Slice(), torch::indexing::Slice(),
                          torch::indexing::Slice(torch::indexing::None, torch::indexing::None, 2),
                          torch::indexing::Slice(torch::indexing::None, torch::indexing::None, 2)});
      shortcut = torch::constant_pad_nd(shortcut, {0, 0, 0, 0, padChannels_ / 2, padChannels_ - padChannels_ / 2});
    }
    return torch::relu(out + shortcut);
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;

 private:
  int stride_;
  int padChannels_;
};

// torchvision's BasicBlock (expansion 1) and Bottleneck (expansion 4, stride on the 3x3).
class TorchvisionBlock : public Block {
 public:
  TorchvisionBlock(int in, int planes, int stride, bool bottleneck) : bottleneck_(bottleneck) {
    const int out = planes * (bottleneck ? 4 : 1);
    if (bottleneck) {
      conv1 = register_module("conv1", conv1x1(in, planes, 1));
      bn1 = register_module("bn1", nn::BatchNorm2d(planes));
      conv2 = register_module("conv2", conv3x3(planes, planes, stride));
      bn2 = register_module("bn2", nn::BatchNorm2d(planes));
      conv3 = register_module("conv3", conv1x1(planes, out, 1));
      bn3 = register_module("bn3", nn::BatchNorm2d(out));
    } else {
      conv1 = register_module("conv1", conv3x3(in, planes, stride));
      bn1 = register_module("bn1", nn::BatchNorm2d(planes));
      conv2 = register_module("conv2", conv3x3(planes, planes, 1));
      bn2 = register_module("bn2", nn::BatchNorm2d(planes));
    }
    if (stride != 1 || in != out) {
      downsample = register_module("downsample", nn::Sequential(conv1x1(in, out, stride), nn::BatchNorm2d(out)));
    }
  }

  at::Tensor forward(const at::Tensor& x) override {
    auto out = torch::relu(bn1->forward(conv1->forward(x)));
    out = bn2->forward(conv2->forward(out));
    if (bottleneck_) out = bn3->forward(conv3->forward(torch::relu(out)));
    return torch::relu(out + (downsample.is_empty() ? x : downsample->forward(x)));
  }

  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::Sequential downsample{nullptr};

 private:
  bool bottleneck_;
};

// The stem and head around a list of stages; `head` is "linear" (He et al.) or "fc"
// (torchvision), as their state_dicts name it.
class ResNet : public Net {
 public:
  ResNet(int stemChannels, const std::string& head, int features, int classes) {
    conv1 = register_module("conv1", conv3x3(3, stemChannels, 1));
    bn1 = register_module("bn1", nn::BatchNorm2d(stemChannels));
    head_ = register_module(head, nn::Linear(features, classes));
  }

  void addStage(std::vector<std::shared_ptr<Block>> blocks) {
    auto stage = std::make_shared<nn::ModuleListImpl>();
    for (auto& b : blocks) stage->push_back(b);
    stages_.push_back(std::move(blocks));
    register_module("layer" + std::to_string(stages_.size()), nn::ModuleList(stage));
  }

  at::Tensor forward(const at::Tensor& x) override {
    auto out = torch::relu(bn1->forward(conv1->forward(x)));
    for (auto& stage : stages_) {
      for (auto& block : stage) out = block->forward(out);
    }
    out = torch::adaptive_avg_pool2d(out, {1, 1}).flatten(1);
    return torch::log_softmax(head_->forward(out), 1);
  }

 private:
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::Linear head_{nullptr};
  std::vector<std::vector<std::shared_ptr<Block>>> stages_;
};

// PyTorch's default initialisation of the reference code: Kaiming-normal convolutions
// (fan_out, relu) and BatchNorm weight 1, bias 0 (libtorch's defaults already).
void kaimingInit(nn::Module& module) {
  torch::NoGradGuard noGrad;
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    }
  }
}

}  // namespace

std::shared_ptr<Net> makeCifarResNet(int depth, int classes) {
  if ((depth - 2) % 6 != 0) throw ConfigError("CIFAR ResNet depth must be 6n + 2");
  const int n = (depth - 2) / 6;
  auto net = std::make_shared<ResNet>(16, "linear", 64, classes);
  int in = 16;
  for (int stage = 0; stage < 3; ++stage) {
    const int out = 16 << stage;
    std::vector<std::shared_ptr<Block>> blocks;
    for (int i = 0; i < n; ++i) {
      blocks.push_back(std::make_shared<CifarBasicBlock>(in, out, i == 0 && stage > 0 ? 2 : 1));
      in = out;
    }
    net->addStage(std::move(blocks));
  }
  kaimingInit(*net);
  return net;
}

std::shared_ptr<Net> makeResNet(int depth, int classes) {
  std::vector<int> counts;
  bool bottleneck = depth >= 50;
  switch (depth) {
    case 18: counts = {2, 2, 2, 2}; break;
    case 34: counts = {3, 4, 6, 3}; break;
    case 50: counts = {3, 4, 6, 3}; break;
    case 101: counts = {3, 4, 23, 3}; break;
    case 152: counts = {3, 8, 36, 3}; break;
    default: throw InternalError(fmt::format("makeResNet: no ImageNet ResNet of depth {} (the registry offers 18, 34, 50, 101, 152)", depth));
  }
  const int expansion = bottleneck ? 4 : 1;
  auto net = std::make_shared<ResNet>(64, "fc", 512 * expansion, classes);
  int in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = 64 << stage;
    std::vector<std::shared_ptr<Block>> blocks;
    for (int i = 0; i < counts[stage]; ++i) {
      blocks.push_back(std::make_shared<TorchvisionBlock>(in, planes, i == 0 && stage > 0 ? 2 : 1, bottleneck));
      in = planes * expansion;
    }
    net->addStage(std::move(blocks));
  }
  kaimingInit(*net);
  return net;
}

}  // namespace pstrain::models
