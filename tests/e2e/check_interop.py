"""Loads pstrain's trained_model.pt into the PyTorch twin and compares its test-set
predictions with pseval's. Usage: check_interop.py MODEL WEIGHTS DATA_DIR PREDICTIONS"""
import gzip
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
from pstrain_models import build, normalize  # noqa: E402


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main(model_name, weights, data_dir, predictions_path):
    torch.set_num_threads(1)
    model = build(model_name)
    model.load_state_dict(torch.load(weights, weights_only=True))  # strict: every key and shape must match
    model.eval()
    images = torch.from_numpy(read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")).copy())
    labels = torch.from_numpy(read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))
    x = normalize(images.unsqueeze(1), "fashion-mnist")
    with torch.no_grad():
        # Batches of 100: at 1000 glibc maps and unmaps the big temporaries each time (4x slower).
        predicted = torch.cat([model(c).argmax(1) for c in x.split(100)])
    theirs = torch.tensor([int(line) for line in open(predictions_path)])
    differ = int((predicted != theirs).sum())
    accuracy = float((predicted == labels).float().mean())
    print(f"python: {len(predicted)} predictions, {differ} differ from pseval's; accuracy {100 * accuracy:.2f}%")
    return 0 if len(theirs) == len(predicted) and differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
