"""Converts the IDX files of Fashion-MNIST (or MNIST) into the NumPy .npz that
`pstrain --dataset FILE.npz` reads: arrays x_train, y_train, x_test, y_test, and the
per-channel mean and std that normalise x (after scaling uint8 by 1/255).

    /usr/bin/python3 tools/idx_to_npz.py /usr/share/datasets/fashion-mnist fashion-mnist.npz
    /usr/bin/python3 tools/idx_to_npz.py DIR small.npz --limit 2000 --compressed

Your own data go into the same arrays: x of uint8 or float32, any shape [N, ...]; y of
int64 (or int32) class labels, or float32 targets for --loss mse:
    np.savez("mine.npz", x_train=x, y_train=y, x_test=xt, y_test=yt)
"""
import argparse
import gzip
import os
import struct

import numpy as np


def read_idx(directory, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as f:
                data = f.read()
            zero, kind, dims = struct.unpack(">HBB", data[:4])
            if zero != 0 or kind != 0x08:
                raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
            shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    raise SystemExit(f"{directory}/{stem}{{.gz,}}: not found")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("idx_dir", help="folder of the IDX files (train-images-idx3-ubyte.gz, ...)")
    parser.add_argument("output", help="the .npz to write")
    parser.add_argument("--limit", type=int, default=0, help="keep only the first N samples of each split")
    parser.add_argument("--compressed", action="store_true", help="np.savez_compressed instead of np.savez")
    args = parser.parse_args()
    arrays = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(args.idx_dir, f"{prefix}-images-idx3-ubyte")[:, None, :, :]  # N, 1, 28, 28
        y = read_idx(args.idx_dir, f"{prefix}-labels-idx1-ubyte").astype(np.int64)
        if args.limit:
            x, y = x[:args.limit], y[:args.limit]
        arrays[f"x_{split}"], arrays[f"y_{split}"] = np.ascontiguousarray(x), y
    pixels = arrays["x_train"].astype(np.float64) / 255
    arrays["mean"] = np.array([pixels.mean()], dtype=np.float32)
    arrays["std"] = np.array([pixels.std()], dtype=np.float32)
    (np.savez_compressed if args.compressed else np.savez)(args.output, **arrays)
    print(f"{args.output}: {len(arrays['y_train'])} training and {len(arrays['y_test'])} test samples, "
          f"mean {arrays['mean'][0]:.4f}, std {arrays['std'][0]:.4f}")


if __name__ == "__main__":
    main()
