#include <fmt/format.h>
#include <torch/torch.h>

#include "models/Zoo.h"
#include "runtime/Errors.h"

namespace pstrain::models {
namespace {

namespace nn = torch::nn;

// Channels per conv layer; 0 is a 2x2 max-pool (torchvision's cfgs A, B, D, E).
std::vector<int> layout(int depth) {
  switch (depth) {
    case 11: return {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    case 13: return {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    case 16: return {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
    case 19: return {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0};
    default: throw InternalError(fmt::format("VGG: no layout of depth {} (the registry offers 11, 13, 16, 19)", depth));
  }
}

class Vgg : public Net {
 public:
  Vgg(int depth, int classes) {
    nn::Sequential layers;
    int in = 3;
    for (int channels : layout(depth)) {
      if (channels == 0) {
        layers->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
      } else {
        layers->push_back(nn::Conv2d(nn::Conv2dOptions(in, channels, 3).padding(1)));
        layers->push_back(nn::BatchNorm2d(channels));
        layers->push_back(nn::ReLU(nn::ReLUOptions(true)));
        in = channels;
      }
    }
    features = register_module("features", layers);
    classifier = register_module("classifier", nn::Linear(512, classes));
    torch::NoGradGuard noGrad;
    for (auto& m : modules(false)) {
      if (auto* conv = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
        nn::init::zeros_(conv->bias);
      }
    }
  }

  at::Tensor forward(const at::Tensor& x) override {
    auto out = features->forward(x).flatten(1);  // 32x32 input: 512x1x1 after five pools
    return torch::log_softmax(classifier->forward(out), 1);
  }

  nn::Sequential features{nullptr};
  nn::Linear classifier{nullptr};
};

}  // namespace

std::shared_ptr<Net> makeVgg(int depth, int classes) { return std::make_shared<Vgg>(depth, classes); }

}  // namespace pstrain::models
