#pragma once
// Factories of the CIFAR models, registered by name in Registry.cpp.
#include <memory>

#include "models/Registry.h"

namespace pstrain::models {

// He et al. 2016, section 4.2: 3 stages of 16/32/64 channels, (depth - 2) / 6 BasicBlocks
// each, identity shortcuts zero-padded where the shape changes ("option A"): the
// akamaster/pytorch_resnet_cifar10 layout (conv1, bn1, layer1..3, linear).
std::shared_ptr<Net> makeCifarResNet(int depth, int classes);

// torchvision's ResNet-18/34/50/101/152 (BasicBlock / Bottleneck, downsample.0/1, fc) with
// the CIFAR stem: a 3x3 stride-1 conv1 and no max-pool.
std::shared_ptr<Net> makeResNet(int depth, int classes);

// VGG-11/13/16/19 with BatchNorm: `features` as torchvision's vgg*_bn, then the CIFAR
// classifier Linear(512, classes) named `classifier`.
std::shared_ptr<Net> makeVgg(int depth, int classes);

}  // namespace pstrain::models
