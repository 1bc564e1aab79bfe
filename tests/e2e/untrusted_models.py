"""The corpus of untrusted model files (tests/e2e/own_model.sh): TorchScript files whose code
reads or writes files, in forward, in __setstate__ (which loading runs), in a forked body or
a helper, spelled plainly and rewritten the way a hostile archive is (a line continuation or
a comment inside the call, the debug records dropped), so that no text scan of the source
finds the call, or its classes moved out of the __torch__ namespace. Each writes a file named *-wrote.bin where it runs (none must exist after a
refusal). Usage: untrusted_models.py DIR; prints the files' names."""
import os
import sys
import zipfile
from typing import Tuple

import torch


class SavesInForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)

    def forward(self, x):
        torch.ops.aten.save(x.sum(), "forward-wrote.bin")
        return self.fc(x.flatten(1))


class ReadsInForward(SavesInForward):
    def forward(self, x):
        return self.fc(x.flatten(1)) + torch.from_file("/etc/hostname", False, 1).sum() * 0


class SavesInSetstate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)
        self.register_buffer("scale", torch.ones(1))

    def forward(self, x):
        return self.fc(x.flatten(1)) * self.scale

    @torch.jit.export
    def __getstate__(self):
        return (self.scale, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]):
        torch.ops.aten.save(state[0], "setstate-wrote.bin")
        self.scale = state[0]
        self.training = state[1]


class Holder(torch.nn.Module):  # the culprit a submodule
    def __init__(self):
        super().__init__()
        self.inner = SavesInSetstate()

    def forward(self, x):
        return self.inner(x)


class SavesInAFork(SavesInForward):
    def save_it(self, x: torch.Tensor) -> torch.Tensor:
        torch.save(x.sum(), "fork-wrote.bin")
        return x

    def forward(self, x):
        future = torch.jit._fork(self.save_it, x)
        return self.fc(torch.jit._wait(future).flatten(1))


def leak(t: torch.Tensor) -> torch.Tensor:
    torch.save(t, "helper-wrote.bin")
    return t


class HelperInForward(SavesInForward):
    def forward(self, x):
        return self.fc(leak(x).flatten(1))


class HelperInSetstate(SavesInSetstate):
    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]):
        self.scale = leak(state[0])
        self.training = state[1]


def rewrite(source, target, changes, everywhere=False):
    """`source` with each (old, new) of `changes` made in its code (`everywhere`: in every
    record and record name: its pickles too), its debug records dropped."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zout:
        code = {}
        for info in zin.infolist():
            if not info.filename.endswith(".debug_pkl"):
                code[info.filename] = zin.read(info.filename)
        for old, new in changes:
            hits = [n for n, data in code.items() if (everywhere or "/code/" in n) and old.encode() in data]
            assert hits, f"{old!r} is not in {source}'s code"
            for n in hits:
                code[n] = code[n].replace(old.encode(), new.encode())
            if everywhere:
                code = {n.replace(old, new): data for n, data in code.items()}
        for name, data in code.items():
            zout.writestr(name, data)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    path = lambda name: os.path.join(out, name)
    plain = {"saves.pt": SavesInForward, "reads.pt": ReadsInForward, "setstate.pt": Holder, "fork.pt": SavesInAFork,
             "helper.pt": HelperInForward, "helper-setstate.pt": HelperInSetstate}
    for name, cls in plain.items():
        torch.jit.script(cls()).save(path(name))
    cut = "\\\n    ("  # a line continuation between the operator's name and its arguments
    rewritten = {
        "continued.pt": ("saves.pt", [("torch.save(", "torch.save" + cut)]),
        "ops.pt": ("saves.pt", [("torch.save(", "ops.aten.save" + cut)]),
        "commented.pt": ("saves.pt", [("torch.save(", "(torch.save # a comment\n     )(")]),
        "continued-reads.pt": ("reads.pt", [("torch.from_file(", "torch.from_file" + cut)]),
        "continued-setstate.pt": ("setstate.pt", [("torch.save(", "torch.save" + cut)]),
        "continued-helper.pt": ("helper.pt", [("torch.save(", "torch.save" + cut)]),
        "continued-helper-setstate.pt": ("helper-setstate.pt", [("torch.save(", "torch.save" + cut)]),
        # The write in the forked body itself (prim::fork's subgraph), the method left clean.
        "forked-body.pt": ("fork.pt", [("    torch.save(torch.sum(x), \"fork-wrote.bin\")\n", ""),
                                       ("      return (self).save_it(x, )",
                                        "      torch.save" + cut + "torch.sum(x), \"fork-wrote.bin\")\n"
                                        "      return (self).save_it(x, )")]),
    }
    for name, (base, changes) in rewritten.items():
        rewrite(path(base), path(name), changes)
    # Its classes moved out of the __torch__ namespace (code/ and data.pkl alike): a check
    # that compiled only __torch__.* classes let __setstate__ run at load.
    rewrite(path("setstate.pt"), path("namespace.pt"), [("__torch__", "evil_code")], everywhere=True)
    print(" ".join(list(plain) + list(rewritten) + ["namespace.pt"]))


if __name__ == "__main__":
    main()
