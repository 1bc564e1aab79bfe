"""An example of a model of your own for pstrain: a small CNN with BatchNorm and dropout,
exported to TorchScript, the form `pstrain --model FILE` trains.

    /usr/bin/python3 tools/example_model.py smallcnn.pt            # 1x28x28 inputs, 10 classes
    /usr/bin/python3 tools/example_model.py cifar-cnn.pt --channels 3 --classes 100

Your own model is exported the same way: torch.jit.script(model).save("model.pt").
Its forward returns logits (pstrain's default loss for a model file is cross-entropy, as
nn.CrossEntropyLoss); with --loss mse it returns the regression outputs.

After training, load the weights back into the module:

    import sys, torch; sys.path.insert(0, "tools")
    from example_model import SmallCNN
    model = SmallCNN()
    model.load_state_dict(torch.load("runs/mine/trained_model.pt", weights_only=True))
    # or, with no Python class at hand: torch.jit.load("runs/mine/trained_model.torchscript.pt")
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    """conv(32) - BN - ReLU - pool, conv(64) - BN - ReLU - pool, to 7x7, dropout, 128, classes."""

    def __init__(self, channels: int = 1, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = self.dropout(torch.flatten(self.pool(x), 1))
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="the TorchScript file to write, e.g. smallcnn.pt")
    parser.add_argument("--channels", type=int, default=1, help="input channels (1: grey, 3: colour)")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = SmallCNN(args.channels, args.classes)
    torch.jit.script(model).save(args.output)  # script, not trace: shapes and device stay free
    count = sum(p.numel() for p in model.parameters())
    print(f"{args.output}: SmallCNN, {count} parameters, {args.channels} input channel(s), {args.classes} classes")


if __name__ == "__main__":
    main()
