"""A small GPT-style language model for pstrain, exported to TorchScript.

    /usr/bin/python3 tools/gpt_model.py gpt.pt --meta data/shakespeare/meta.json --block-size 64
    /usr/bin/python3 tools/gpt_model.py gpt.pt --vocab 50257 --layers 6 --heads 6 --embd 384

Token and position embeddings, --layers pre-norm blocks of causal self-attention and an MLP,
a final LayerNorm and a linear head: ids [B, T] (T <= --block-size) in, logits [B, T, vocab]
out. pstrain trains it with a cross-entropy per position (its default loss for a model file):

    mpirun -np 3 pstrain --model gpt.pt --dataset data/shakespeare/train.bin --block-size 64 \\
        --optimizer adamw --lr 1e-3 --clip-grad-norm 1 --batch-size 16 --steps 2000

Dropout is off by default: with --dropout, pstrain seeds it per step and virtual shard.
tools/generate.py samples text from the trained model (trained_model.torchscript.pt).
"""
import argparse
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, embd: int, heads: int, dropout: float):
        super().__init__()
        # No bias: the keys' bias adds one number to every score of a row, which softmax
        # ignores, so its gradient is rounding noise; Adam scales noise up to full-size steps,
        # and runs that differ only in summation order (other worker counts) would drift.
        self.qkv = nn.Linear(embd, 3 * embd, bias=False)
        self.proj = nn.Linear(embd, embd)
        self.dropout = nn.Dropout(dropout)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)  # [B, heads, T, head size]
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        # Each position attends to itself and the ones before it (made per call: no buffer
        # to keep, to exchange or to checkpoint).
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = self.dropout(F.softmax(scores.masked_fill(future, float("-inf")), dim=-1))
        y = (weights @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.dropout(self.proj(y))


class Block(nn.Module):
    def __init__(self, embd: int, heads: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(embd)
        self.attn = CausalSelfAttention(embd, heads, dropout)
        self.ln2 = nn.LayerNorm(embd)
        self.mlp = nn.Sequential(nn.Linear(embd, 4 * embd), nn.GELU(), nn.Linear(4 * embd, embd), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block_size: int, layers: int = 4, heads: int = 4, embd: int = 128,
                 dropout: float = 0.0):
        super().__init__()
        self.block_size = block_size
        self.vocab = vocab
        self.tokens = nn.Embedding(vocab, embd)
        self.positions = nn.Embedding(block_size, embd)
        self.blocks = nn.ModuleList([Block(embd, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab, bias=False)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") or name.endswith("mlp.2.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.size(1)
        if t > self.block_size:
            raise RuntimeError(f"a window of {t} tokens; this model takes at most {self.block_size}")
        x = self.tokens(ids) + self.positions(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("output", help="the TorchScript file to write, e.g. gpt.pt")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--meta", help="tools/text_to_bin.py's meta.json: the vocabulary size")
    size.add_argument("--vocab", type=int, help="the vocabulary size (the largest id + 1, or more)")
    parser.add_argument("--block-size", type=int, default=64, help="the longest window (pstrain's --block-size)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--embd", type=int, default=128, help="the embedding width (a multiple of --heads)")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    args = parser.parse_args()
    vocab = args.vocab
    if args.meta:
        try:
            with open(args.meta) as f:
                vocab = json.load(f)["vocab_size"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"gpt_model.py: {args.meta}: {e!r}")
    if vocab < 1 or args.block_size < 1 or args.embd % args.heads:
        sys.exit("gpt_model.py: needs a vocabulary of 1 or more, --block-size of 1 or more, --embd a multiple of --heads")
    torch.manual_seed(args.seed)
    model = GPT(vocab, args.block_size, args.layers, args.heads, args.embd, args.dropout)
    torch.jit.script(model).save(args.output)  # script, not trace: the window length stays free
    count = sum(p.numel() for p in model.parameters())
    print(f"{args.output}: GPT, {count} parameters, vocabulary {vocab}, block size {args.block_size}, "
          f"{args.layers} layers x {args.heads} heads x {args.embd}")


if __name__ == "__main__":
    main()
