"""The parameter server a PyTorch user would write with torch.distributed (gloo), for the
end-to-end comparison of tools/bench: the same job as
    mpirun -np 3 pstrain --model lenet --batch-size 64 --steps 400 --momentum 0.9
(Fashion-MNIST, 2 workers, LeNet, SGD with momentum, lr x 2 workers). Rank 0 broadcasts
the flat weights, the workers compute on their shards and the gradients are summed onto
rank 0 (a reduce), which averages them and steps the optimizer.
    /usr/bin/python3 ps_gloo.py DATA_DIR [STEPS] [BATCH]
prints "steps samples_per_s" from rank 0; time the whole command for the wall clock."""
import gzip
import os
import socket
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pstrain_models  # noqa: E402

WORLD = 3  # a server and 2 workers


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def run(rank, port, data_dir, steps, batch):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.manual_seed(1)
    model = pstrain_models.build("lenet")
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    workers = WORLD - 1
    if rank == 0:
        weights = flat.clone().requires_grad_(False)
        momentum = torch.zeros_like(weights)
        lr = 0.01 * workers
    else:
        x = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
        y = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")).astype(np.int64)
        images = pstrain_models.normalize(torch.from_numpy(x[:, None].copy()), "fashion-mnist")
        labels = torch.from_numpy(y)
        shard = torch.arange(rank - 1, len(labels), workers)  # disjoint shards
        generator = torch.Generator().manual_seed(1)
        model.train()
    grad = torch.zeros_like(flat)
    start = time.perf_counter()
    for step in range(steps):
        if rank == 0:
            flat.copy_(weights)
        dist.broadcast(flat, src=0)
        if rank != 0:
            torch.nn.utils.vector_to_parameters(flat, model.parameters())
            if step % (len(shard) // batch) == 0:
                order = shard[torch.randperm(len(shard), generator=generator)]
            i = (step % (len(shard) // batch)) * batch
            pick = order[i:i + batch]
            model.zero_grad()
            torch.nn.functional.nll_loss(model(images[pick]), labels[pick]).backward()
            grad = torch.cat([p.grad.flatten() for p in model.parameters()])
        else:
            grad.zero_()
        dist.reduce(grad, dst=0)
        if rank == 0:
            momentum.mul_(0.9).add_(grad / workers)
            weights.add_(momentum, alpha=-lr)
    if rank == 0:
        seconds = time.perf_counter() - start
        print(f"{steps} {steps * batch * workers / seconds:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    data_dir = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(port, data_dir, steps, batch), nprocs=WORLD)
