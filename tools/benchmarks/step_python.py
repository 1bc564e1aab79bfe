"""The PyTorch twin of bench_step: the same models (tools/pstrain_models.py), batch and
loop (zero_grad, forward, nll_loss, backward, SGD with momentum) on a fixed random batch.
    python3 step_python.py [--device D] THREADS BATCH STEPS MODEL...
prints "MODEL ms_per_step samples_per_s" lines. On a GPU the clock starts and stops with
the device drained, as in bench_step."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pstrain_models  # noqa: E402

args = sys.argv[1:]
device = "cpu"
if args[:1] == ["--device"]:
    device, args = args[1], args[2:]
threads, batch, steps = (int(a) for a in args[:3])
torch.set_num_threads(threads)


def synchronize():
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


for name in args[3:]:
    torch.manual_seed(1)
    model = pstrain_models.build(name).to(device)
    shape = (batch, 1, 28, 28) if name in ("mlp", "convnet", "lenet") else (batch, 3, 32, 32)
    images = torch.randn(shape, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()

    def step():
        sgd.zero_grad()
        torch.nn.functional.nll_loss(model(images), labels).backward()
        sgd.step()

    for _ in range(5):
        step()
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize()
    seconds = time.perf_counter() - start
    print(f"{name} {1000 * seconds / steps:.3f} {batch * steps / seconds:.1f}", flush=True)
