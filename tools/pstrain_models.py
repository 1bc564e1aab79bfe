"""PyTorch twins of pstrain's models: same state_dict keys and shapes, same forward.

    import torch, sys
    sys.path.insert(0, "tools")
    from pstrain_models import build, normalize
    model = build("lenet")
    model.load_state_dict(torch.load("runs/pstrain/trained_model.pt"))
    # or a checkpoint: ckpt = torch.load(".../ckpt/step-00000500.pt")
    #                  model = build(ckpt["__meta__"]["model"]); model.load_state_dict(ckpt["model"])
    model.eval()
    log_probs = model(normalize(uint8_images, "fashion-mnist"))   # uint8 [N, 1, 28, 28]
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Per-channel mean and std of pixel/255, as pstrain normalises (data/Dataset.cpp).
CIFAR = ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616])
NORMALIZATION = {
    "fashion-mnist": ([0.2860], [0.3530]),
    "mnist": ([0.1307], [0.3081]),
    "cifar10": CIFAR,
    "cifar100": CIFAR,
    "synthetic": ([0.5], [0.3]),
    "synthetic-cifar": ([0.5] * 3, [0.3] * 3),
}


def normalize(uint8_images, dataset):
    """float [N, C, H, W] exactly as pstrain computes it: (x / 255 - mean) / std."""
    mean, std = NORMALIZATION[dataset]
    x = uint8_images.to(torch.float32) / 255.0
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return (x - m) / s


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x.flatten(1)))), dim=1)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 3, kernel_size=3)
        self.fc1 = nn.Linear(192, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 3))
        return F.log_softmax(self.fc1(x.flatten(1)), dim=1)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(800, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


class CifarBasicBlock(nn.Module):
    """He et al.'s CIFAR block; the shortcut subsamples and zero-pads channels (option A)."""

    def __init__(self, inp, out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.stride, self.pad = stride, out - inp

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        shortcut = x
        if self.stride != 1 or self.pad:
            shortcut = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + shortcut)


class CifarResNet(nn.Module):
    """resnet20/32/44/56/110: 3 stages of 16/32/64 channels, (depth - 2) / 6 blocks each."""

    def __init__(self, depth, classes=10):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        inp = 16
        for stage in range(3):
            out = 16 << stage
            blocks = []
            for i in range(n):
                blocks.append(CifarBasicBlock(inp, out, 2 if i == 0 and stage > 0 else 1))
                inp = out
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.linear = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return F.log_softmax(self.linear(F.adaptive_avg_pool2d(x, 1).flatten(1)), dim=1)


class TorchvisionBlock(nn.Module):
    """torchvision's BasicBlock (expansion 1) or Bottleneck (expansion 4, stride on the 3x3)."""

    def __init__(self, inp, planes, stride, bottleneck):
        super().__init__()
        out = planes * (4 if bottleneck else 1)
        self.bottleneck = bottleneck
        if bottleneck:
            self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
        else:
            self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        if self.bottleneck:
            out = self.bn3(self.conv3(F.relu(out)))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """torchvision ResNet-18/34/50/101/152 with the CIFAR stem (3x3 conv1, no max-pool)."""

    BLOCKS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}

    def __init__(self, depth, classes=10):
        super().__init__()
        bottleneck = depth >= 50
        expansion = 4 if bottleneck else 1
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        inp = 64
        for stage, count in enumerate(self.BLOCKS[depth]):
            planes = 64 << stage
            blocks = []
            for i in range(count):
                blocks.append(TorchvisionBlock(inp, planes, 2 if i == 0 and stage > 0 else 1, bottleneck))
                inp = planes * expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(512 * expansion, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return F.log_softmax(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), dim=1)


class VGG(nn.Module):
    """torchvision's vgg*_bn features and a CIFAR classifier Linear(512, classes)."""

    LAYOUT = {
        11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
        13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
        16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
        19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
             512, 512, 512, 512, "M"],
    }

    def __init__(self, depth, classes=10):
        super().__init__()
        layers, inp = [], 3
        for c in self.LAYOUT[depth]:
            if c == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(inp, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
                inp = c
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, classes)

    def forward(self, x):
        return F.log_softmax(self.classifier(self.features(x).flatten(1)), dim=1)


MODELS = {"mlp": MLP, "convnet": ConvNet, "lenet": LeNet}
MODELS.update({f"resnet{d}": (lambda d=d, **kw: CifarResNet(d, **kw)) for d in (20, 32, 44, 56, 110)})
MODELS.update({f"resnet{d}": (lambda d=d, **kw: ResNet(d, **kw)) for d in (18, 34, 50, 101, 152)})
MODELS.update({f"vgg{d}": (lambda d=d, **kw: VGG(d, **kw)) for d in (11, 13, 16, 19)})


def build(name, classes=10):
    """The PyTorch module of pstrain model `name` (classes: 10, or 100 for CIFAR-100)."""
    if name in ("mlp", "convnet", "lenet"):
        return MODELS[name]()
    return MODELS[name](classes=classes)
