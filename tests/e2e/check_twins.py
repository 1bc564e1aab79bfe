"""Every exported pstrain model loads strictly (same keys and shapes, buffers included) into
its PyTorch twin from tools/pstrain_models.py, and computes the same eval-mode output.
Usage: check_twins.py DIR (written by export_models)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
from pstrain_models import build  # noqa: E402


def main(directory):
    torch.set_num_threads(1)
    names = sorted(f[:-3] for f in os.listdir(directory) if f.endswith(".pt") and not f.endswith(".io.pt"))
    failures = 0
    for name in names:
        model = build(name)
        model.load_state_dict(torch.load(os.path.join(directory, name + ".pt"), weights_only=True))  # strict
        model.eval()
        io = torch.load(os.path.join(directory, name + ".io.pt"), weights_only=True)
        with torch.no_grad():
            diff = (model(io["input"]) - io["output"]).abs().max().item()
        ok = diff <= 1e-4
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {sum(p.numel() for p in model.parameters())} parameters, "
              f"max |output difference| {diff:.2e}")
    print(f"{len(names) - failures} passed, {failures} failed")
    return 0 if names and failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
