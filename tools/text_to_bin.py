"""Turns a text file into token files that pstrain trains language models on.

    /usr/bin/python3 tools/text_to_bin.py input.txt data/shakespeare            # characters
    /usr/bin/python3 tools/text_to_bin.py input.txt data/shakespeare --level byte
    pstrain --dataset data/shakespeare/train.bin --block-size 64 --model gpt.pt ...

Writes DIR/train.bin and DIR/val.bin (nanoGPT's layout: flat little-endian uint16 token
ids; the last --val-fraction of the text is val.bin) and DIR/meta.json: the vocabulary
("chars" for --level char, the i-th character is id i; "byte": ids are the UTF-8 bytes,
256 of them) that tools/gpt_model.py sizes the model by and tools/generate.py decodes with.
--format llmc writes llm.c's layout instead (DIR/NAME_train.bin and DIR/NAME_val.bin, a
header of 256 int32: magic 20240520, version 1, the token count). A vocabulary of more than
65,536 ids needs uint32 ids: the files then have llm.c's version 7 header (magic 20240801,
uint32 ids) in either layout, which pstrain reads by their header whatever their name.
"""
import argparse
import json
import os
import sys

import numpy as np

LLMC_UINT16 = (20240520, 1)  # llm.c's magic and version for uint16 ids
LLMC_UINT32 = (20240801, 7)  # and for uint32 ids (vocabularies over 65,536: LLaMA-3's)


def encode(text, level):
    """The ids and the vocabulary's description (meta.json)."""
    if level == "byte":
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16), {"level": "byte", "vocab_size": 256}
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    dtype = np.uint16 if len(chars) <= 65536 else np.uint32
    ids = np.fromiter((index[c] for c in text), dtype=dtype, count=len(text))
    return ids, {"level": "char", "vocab_size": len(chars), "chars": "".join(chars)}


def write(path, ids, layout):
    """uint32 ids (a vocabulary over 65,536) always get llm.c's version 7 header: nanoGPT's flat
    files are uint16 only, and a reader must never have to guess the id type."""
    wide = ids.dtype == np.uint32
    header = layout == "llmc" or wide
    if header and len(ids) >= 2**31:
        sys.exit(f"text_to_bin.py: {len(ids)} tokens; llm.c's header counts at most 2^31 - 1")
    with open(path + ".tmp", "wb") as out:
        if header:
            header = np.zeros(256, dtype="<i4")
            header[:3] = [*(LLMC_UINT32 if wide else LLMC_UINT16), len(ids)]
            out.write(header.tobytes())
        out.write(ids.astype("<u4" if wide else "<u2").tobytes())
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("text", help="a UTF-8 text file")
    parser.add_argument("dir", help="where train.bin, val.bin and meta.json go (created)")
    parser.add_argument("--level", choices=["char", "byte"], default="char",
                        help="char: one id per distinct character (small vocabulary); byte: the 256 UTF-8 bytes")
    parser.add_argument("--val-fraction", type=float, default=0.1, help="the end of the text that becomes val.bin")
    parser.add_argument("--format", choices=["nanogpt", "llmc"], default="nanogpt")
    parser.add_argument("--name", default="text", help="--format llmc: files NAME_train.bin and NAME_val.bin")
    args = parser.parse_args()
    if not 0 < args.val_fraction < 1:
        sys.exit("text_to_bin.py: --val-fraction must be in (0, 1)")
    try:
        with open(args.text, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"text_to_bin.py: {args.text}: {e}")
    ids, meta = encode(text, args.level)
    split = int(len(ids) * (1 - args.val_fraction))
    if split < 2 or len(ids) - split < 2:
        sys.exit(f"text_to_bin.py: {args.text}: {len(ids)} tokens, too few to split into train and val")
    os.makedirs(args.dir, exist_ok=True)
    prefix = "" if args.format == "nanogpt" else args.name + "_"
    train, val = (os.path.join(args.dir, prefix + s + ".bin") for s in ("train", "val"))
    write(train, ids[:split], args.format)
    write(val, ids[split:], args.format)
    with open(os.path.join(args.dir, "meta.json"), "w") as f:
        json.dump(meta, f)
    wide = ids.dtype == np.uint32
    print(f"{train}: {split} tokens; {val}: {len(ids) - split} tokens; vocabulary {meta['vocab_size']} ({args.level})"
          + ("; uint32 ids: llm.c's version 7 header" if wide else ""))


if __name__ == "__main__":
    main()
