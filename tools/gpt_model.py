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

Written as people write GPTs (docs/own-model.md, "Fine-tune on your Macs"):
  --tie        the head is the token embedding (GPT-2's and nanoGPT's tie: one tensor, both
               names in the state dict);
  --own-loss   forward(ids, targets) returns (logits, loss), as nanoGPT's: pstrain trains with
               that loss (the model file is traced with an example batch, as people trace it);
  --lora R     LoRA adapters of rank R on the attention's qkv projection (PEFT's default for
               GPT-2, c_attn: lora_A, lora_B, B zero at the start, scaled by --lora-alpha /
               R), the rest frozen (requires_grad False): a fine-tune that trains and sends
               the adapters only;
  --state-dict FILE   also write the initial weights as torch.save(model.state_dict()) (or
               .safetensors, by its extension: pstrain --init-from reads both).
"""
import argparse
import json
import math
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Linear):
    """A linear layer with LoRA adapters (Hu et al. 2021): W x + b + (alpha / r) B A x, with
    W and b as nn.Linear's (the same state_dict names, so a pretrained base loads as it is),
    A [r, in] random, B [out, r] zero at the start, as PEFT initialises them."""

    def __init__(self, features_in: int, features_out: int, bias: bool, rank: int, alpha: float):
        super().__init__(features_in, features_out, bias=bias)
        self.lora_A = nn.Parameter(torch.empty(rank, features_in))
        self.lora_B = nn.Parameter(torch.zeros(features_out, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scaling = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


def linear(features_in: int, features_out: int, bias: bool, lora: int, alpha: float) -> nn.Linear:
    return LoRALinear(features_in, features_out, bias, lora, alpha) if lora else nn.Linear(features_in, features_out, bias)


class CausalSelfAttention(nn.Module):
    def __init__(self, embd: int, heads: int, dropout: float, lora: int = 0, alpha: float = 16.0):
        super().__init__()
        # No bias: the keys' bias adds one number to every score of a row, which softmax
        # ignores, so its gradient is rounding noise; Adam scales noise up to full-size steps,
        # and runs that differ only in summation order (other worker counts) would drift.
        self.qkv = linear(embd, 3 * embd, False, lora, alpha)  # LoRA where PEFT puts it in GPT-2: c_attn
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
    def __init__(self, embd: int, heads: int, dropout: float, lora: int = 0, alpha: float = 16.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(embd)
        self.attn = CausalSelfAttention(embd, heads, dropout, lora, alpha)
        self.ln2 = nn.LayerNorm(embd)
        self.mlp = nn.Sequential(nn.Linear(embd, 4 * embd), nn.GELU(), nn.Linear(4 * embd, embd), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block_size: int, layers: int = 4, heads: int = 4, embd: int = 128,
                 dropout: float = 0.0, tie: bool = False, lora: int = 0, alpha: float = 16.0):
        super().__init__()
        self.block_size = block_size
        self.vocab = vocab
        self.tokens = nn.Embedding(vocab, embd)
        self.positions = nn.Embedding(block_size, embd)
        self.blocks = nn.ModuleList([Block(embd, heads, dropout, lora, alpha) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab, bias=False)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if "lora_" in name:
                continue
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") or name.endswith("mlp.2.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        if tie:  # nanoGPT's weight tying: one tensor, the embedding's and the head's
            self.head.weight = self.tokens.weight
        if lora:  # only the adapters train
            for name, p in self.named_parameters():
                p.requires_grad_("lora_" in name)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.size(1)
        if t > self.block_size:
            raise RuntimeError(f"a window of {t} tokens; this model takes at most {self.block_size}")
        x = self.tokens(ids) + self.positions(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class GPTWithLoss(GPT):
    """nanoGPT's calling convention: forward(idx, targets) -> (logits, loss)."""

    def forward(self, ids: torch.Tensor, targets: torch.Tensor):
        logits = super().forward(ids)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


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
    parser.add_argument("--tie", action="store_true", help="the head is the token embedding (GPT-2's tie)")
    parser.add_argument("--own-loss", action="store_true",
                        help="forward(ids, targets) -> (logits, loss), as nanoGPT's; traced with an example batch")
    parser.add_argument("--lora", type=int, default=0, metavar="R",
                        help="LoRA adapters of rank R on the attention's qkv, the rest frozen")
    parser.add_argument("--lora-alpha", type=float, default=16.0, help="LoRA's alpha (the adapters' scale is alpha / R)")
    parser.add_argument("--state-dict", metavar="FILE",
                        help="also write the initial weights there: torch.save's state dict, or .safetensors")
    args = parser.parse_args()
    vocab = args.vocab
    if args.meta:
        try:
            with open(args.meta) as f:
                vocab = json.load(f)["vocab_size"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"gpt_model.py: {args.meta}: {e!r}")
    if vocab < 1 or args.block_size < 1 or args.embd % args.heads or args.lora < 0:
        sys.exit("gpt_model.py: needs a vocabulary of 1 or more, --block-size of 1 or more, --embd a multiple of "
                 "--heads, --lora 0 or more")
    torch.manual_seed(args.seed)
    kind = GPTWithLoss if args.own_loss else GPT
    model = kind(vocab, args.block_size, args.layers, args.heads, args.embd, args.dropout, args.tie, args.lora,
                 args.lora_alpha)
    if args.own_loss:  # traced, as nanoGPT's model is: with an example batch of ids and targets
        example = torch.zeros(2, args.block_size, dtype=torch.long)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)  # the window's length: fixed, as said
        torch.jit.trace(model, (example, example), check_trace=False).save(args.output)
    else:
        torch.jit.script(model).save(args.output)  # script, not trace: the window length stays free
    if args.state_dict:
        state = model.state_dict()
        if args.state_dict.endswith(".safetensors"):
            save_safetensors(state, args.state_dict)
        else:
            torch.save(state, args.state_dict)
    count = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"{args.output}: GPT, {count} parameters ({trained} trained), vocabulary {vocab}, block size "
          f"{args.block_size}, {args.layers} layers x {args.heads} heads x {args.embd}"
          f"{', tied head' if args.tie else ''}{', its own loss' if args.own_loss else ''}"
          f"{f', LoRA rank {args.lora}' if args.lora else ''}")


def save_safetensors(state, path):
    """`state` as a .safetensors file, by the format's spec (a tie once, as Hugging Face's
    safetensors writes it: the other name left out), without the safetensors package."""
    codes = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
    header, blobs, offset, seen = {}, [], 0, {}
    for name, t in state.items():
        key = (t.data_ptr(), t.shape, t.stride())
        if key in seen:
            continue
        seen[key] = name
        data = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else \
            t.contiguous().numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


if __name__ == "__main__":
    main()
