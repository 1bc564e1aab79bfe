"""Samples text from a language model that pstrain trained.

    /usr/bin/python3 tools/generate.py runs/gpt/trained_model.torchscript.pt data/shakespeare/meta.json \\
        --prompt "ROMEO:" --tokens 300

Loads the TorchScript module (a model file's, trained: pstrain writes it at the end of a run),
encodes --prompt with the vocabulary of tools/text_to_bin.py's meta.json, and adds --tokens
ids one at a time, each drawn from the softmax of the last position's logits / --temperature
(among the --top-k likeliest), feeding the model the last block_size ids.
"""
import argparse
import json
import sys

import torch


def codec(meta):
    if meta["level"] == "byte":
        return (lambda s: list(s.encode("utf-8"))), (lambda ids: bytes(ids).decode("utf-8", errors="replace"))
    chars = meta["chars"]
    index = {c: i for i, c in enumerate(chars)}

    def encode(s):
        missing = sorted(set(c for c in s if c not in index))
        if missing:
            sys.exit(f"generate.py: the prompt holds characters the vocabulary lacks: {missing!r}")
        return [index[c] for c in s]

    return encode, lambda ids: "".join(chars[i] for i in ids)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("model", help="trained_model.torchscript.pt of the run")
    parser.add_argument("meta", help="tools/text_to_bin.py's meta.json")
    parser.add_argument("--prompt", default="\n")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        model = torch.jit.load(args.model, map_location="cpu")
        with open(args.meta) as f:
            meta = json.load(f)
    except (OSError, RuntimeError, ValueError) as e:
        sys.exit(f"generate.py: {e}")
    encode, decode = codec(meta)
    block = int(getattr(model, "block_size", 64))
    torch.manual_seed(args.seed)
    model.eval()
    ids = torch.tensor([encode(args.prompt)], dtype=torch.int64)
    with torch.no_grad():
        for _ in range(args.tokens):
            logits = model(ids[:, -block:])[:, -1, :] / max(args.temperature, 1e-6)
            if args.top_k > 0:
                kth = torch.topk(logits, min(args.top_k, logits.size(-1))).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            ids = torch.cat([ids, torch.multinomial(torch.softmax(logits, -1), 1)], dim=1)
    print(decode(ids[0].tolist()))


if __name__ == "__main__":
    main()
