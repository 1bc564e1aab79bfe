"""The PyTorch twin of bench_lm_step: the GPT of tools/gpt_model.py (as an nn.Module, and
scripted), the same windows' shape read from the same token file at random offsets, and the
loop a nanoGPT user writes: zero_grad, forward, F.cross_entropy per position, backward,
clip_grad_norm_, torch.optim.AdamW.
    python3 lm_step_python.py THREADS BATCH STEPS TRAIN.bin BLOCK -- LAYERS HEADS EMBD VOCAB [KINDS]
prints "gpt/eager ms_per_step tokens_per_s" and "gpt/scripted ..." lines (KINDS: which of
them, comma-separated; default eager,scripted)."""
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpt_model  # noqa: E402

threads, batch, steps, train, block = sys.argv[1:6]
threads, batch, steps, block = int(threads), int(batch), int(steps), int(block)
layers, heads, embd, vocab = (int(a) for a in sys.argv[7:11])
kinds = sys.argv[11].split(",") if len(sys.argv) > 11 else ["eager", "scripted"]
torch.set_num_threads(threads)
tokens = torch.from_numpy(np.fromfile(train, dtype="<u2").astype(np.int64))
rng = np.random.default_rng(0)

for kind in kinds:
    torch.manual_seed(1)
    model = gpt_model.GPT(vocab, block, layers, heads, embd)
    if kind == "scripted":
        model = torch.jit.script(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    model.train()

    def step():
        starts = rng.integers(0, len(tokens) - block, size=batch)
        x = torch.stack([tokens[i:i + block] for i in starts])
        y = torch.stack([tokens[i + 1:i + block + 1] for i in starts])
        opt.zero_grad()
        F.cross_entropy(model(x).flatten(0, -2), y.flatten()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - start
    print(f"gpt/{kind} {1000 * seconds / steps:.3f} {batch * block * steps / seconds:.1f}", flush=True)
