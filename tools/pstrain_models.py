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
NORMALIZATION = {
    "fashion-mnist": ([0.2860], [0.3530]),
    "mnist": ([0.1307], [0.3081]),
    "synthetic": ([0.5], [0.3]),
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


MODELS = {"mlp": MLP, "convnet": ConvNet, "lenet": LeNet}


def build(name):
    return MODELS[name]()
