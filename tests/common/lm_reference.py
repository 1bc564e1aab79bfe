"""One PyTorch process on the windows pstrain's workers train on: the reference of the
language-model tests' equivalences (e2e.language_model, e2e.finetune).

A token file's windows are drawn at random offsets, a pure function of (seed, step, virtual
shard, j) (data/ShardSampler.h, windowDraw); a step's global batch is every shard's windows,
in shard order, whose mean loss is the mean of the workers' (the same count each).
"""
import numpy as np
import torch
import torch.nn.functional as F

G, M = 0x9E3779B97F4A7C15, (1 << 64) - 1


def mix64(x):
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)


def draw(seed, step, shard, j, offsets):
    h = mix64((seed + G) & M)
    for v in (step, shard, j):
        h = mix64(h ^ ((v + G) & M))
    return h % offsets


def read_tokens(path):
    """nanoGPT's flat little-endian uint16 ids."""
    return torch.from_numpy(np.fromfile(path, dtype="<u2").astype(np.int64))


def windows(tokens, seed, step, shards, batch, block):
    """Step `step`'s inputs and targets: `batch` windows of `block` ids per shard."""
    starts = [draw(seed, step, s, j, len(tokens) - block) for s in range(shards) for j in range(batch)]
    x = torch.stack([tokens[i:i + block] for i in starts])
    y = torch.stack([tokens[i + 1:i + block + 1] for i in starts])
    return x, y


def train(model, optimizer, tokens, steps, seed, shards, batch, block, clip=0.0, own_loss=False):
    """`steps` steps of `optimizer` on `model`: its own loss (forward(x, y) -> (logits, loss))
    or the cross-entropy of its logits per position; clipped as clip_grad_norm_ where `clip`.
    Returns each step's gradient norm before clipping (where clipped)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    norms = []
    for step in range(steps):
        x, y = windows(tokens, seed, step, shards, batch, block)
        optimizer.zero_grad()
        loss = model(x, y)[1] if own_loss else F.cross_entropy(model(x).flatten(0, -2), y.flatten())
        loss.backward()
        if clip:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip)))
        optimizer.step()
    return norms


def max_diff(ours, model):
    """The largest |difference| between a state dict pstrain wrote and `model`'s tensors."""
    state = model.state_dict()
    assert sorted(ours) == sorted(state), (sorted(ours), sorted(state))
    return max((ours[k].float() - state[k].float()).abs().max().item() for k in ours)
