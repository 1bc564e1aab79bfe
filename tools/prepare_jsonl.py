"""Fine-tuning data as mlx-lm reads it (JSONL) into an .npz that pstrain trains on.

    /usr/bin/python3 tools/prepare_jsonl.py --tokenizer HUB_DIR --block-size 512 --mask-prompt \\
        --out data.npz train.jsonl valid.jsonl
    mpirun -np 3 build/pstrain --model model.pt --init-from HUB_DIR --dataset data.npz ...

Each line of TRAIN.jsonl (and VALID.jsonl) is one record, of one of mlx-lm's three formats,
which the first record decides:
  {"text": "..."}                                  tokenized, EOS appended (unless it ends so)
  {"prompt": "...", "completion": "..."}           the user's prompt and the assistant's answer,
  {"messages": [{"role": ..., "content": ...}]}    rendered by tokenizer_config.json's chat_template
Chat and completion records need a chat_template (Jinja, as transformers renders it); a
tokenizer without one refuses them, saying so. Tokens are Hugging Face's (tools/hf_tokenizer.py:
byte-level BPE and SentencePiece-style BPE with byte fallback, added tokens, the
post-processor's BOS). Each record is one row, in file order: x = ids[:-1], y = ids[1:], cut
to --block-size (counted and said), the rest padded: x with EOS's id, y with -100, which the
loss ignores. --mask-prompt also sets to -100 the targets of the prompt (everything the
template renders before the last message, or the completion), as mlx-lm's --mask-prompt.
The .npz holds x_train, y_train (and x_test, y_test from VALID) as int64.

A line that is not JSON, or a record without its format's keys, is exit 2 naming the file and
line, with nothing written.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_tokenizer import Tokenizer, Unsupported  # noqa: E402


class Refused(Exception):
    """Input this refuses: exit 2, nothing written."""


def records(path):
    """(line number, record) of each non-blank line of the JSONL file `path`."""
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except ValueError as e:
                    raise Refused(f"{path}:{number}: not JSON ({e})")
    except (OSError, UnicodeDecodeError) as e:
        raise Refused(f"{path}: {e}")


def format_of(record):
    if isinstance(record, dict):
        if "prompt" in record and "completion" in record:
            return "completions"
        if "messages" in record:
            return "chat"
        if "text" in record:
            return "text"
    return None


class Renderer:
    """tokenizer_config.json's chat_template, rendered as transformers renders it."""

    def __init__(self, tokenizer, folder):
        template = tokenizer.config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        self.template = None
        if template:
            try:
                import jinja2
                from jinja2.sandbox import ImmutableSandboxedEnvironment
            except ImportError:
                raise Refused("chat records need Jinja2 to render the chat_template (Debian: apt-get install "
                              "python3-jinja2; it comes with PyTorch's pip package)")
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

            def raise_exception(message):
                raise jinja2.exceptions.TemplateError(message)
            env.globals["raise_exception"] = raise_exception
            env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, ensure_ascii=False, indent=indent)
            self.template = env.from_string(template)
        self.tokenizer, self.folder = tokenizer, folder
        self.bos = tokenizer.special("bos_token")[0] or ""
        self.eos = tokenizer.special("eos_token")[0] or ""

    def ids(self, messages, add_generation_prompt=False):
        if self.template is None:
            raise Refused(f"{self.folder}/tokenizer_config.json has no chat_template: chat and prompt/completion records "
                          "are rendered by it (a base model's tokenizer has none: use {\"text\": ...} records)")
        text = self.template.render(messages=messages, bos_token=self.bos, eos_token=self.eos,
                                    add_generation_prompt=add_generation_prompt)
        return self.tokenizer.encode(text, special=False)  # the template writes its own special tokens


def tokenized(number, path, record, kind, tokenizer, renderer, mask_prompt):
    """The record's ids and how many of them are the prompt's (0 unless --mask-prompt)."""
    where = f"{path}:{number}"
    if format_of(record) != kind:
        keys = {"text": '"text"', "completions": '"prompt" and "completion"', "chat": '"messages"'}[kind]
        raise Refused(f"{where}: a record without {keys}, which the first record's format has")
    if kind == "text":
        if not isinstance(record["text"], str):
            raise Refused(f"{where}: \"text\" is not a string")
        ids = tokenizer.encode(record["text"])
        eos = tokenizer.special("eos_token")[1]
        if eos is not None and (not ids or ids[-1] != eos):
            ids.append(eos)
        return ids, 0
    if kind == "completions":
        if not isinstance(record["prompt"], str) or not isinstance(record["completion"], str):
            raise Refused(f"{where}: \"prompt\" and \"completion\" must be strings")
        messages = [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["completion"]}]
    else:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise Refused(f"{where}: \"messages\" is not a list of {{\"role\": ..., \"content\": ...}}")
    ids = renderer.ids(messages)
    if not mask_prompt:
        return ids, 0
    prompt = renderer.ids(messages[:-1], add_generation_prompt=messages[-1]["role"] == "assistant")
    return ids, len(prompt)


def rows(path, tokenizer, renderer, block, mask_prompt):
    """x and y rows of the records of `path`, and how many records were cut."""
    xs, ys, cut, kind = [], [], 0, None
    pad = tokenizer.special("eos_token")[1] or 0
    for number, record in records(path):
        kind = kind or format_of(record)
        if kind is None:
            raise Refused(f"{path}:{number}: a record of none of the formats ({{\"text\"}}, {{\"prompt\", \"completion\"}}, "
                          "{\"messages\"})")
        ids, prompt = tokenized(number, path, record, kind, tokenizer, renderer, mask_prompt)
        if len(ids) < 2:
            continue  # nothing to predict
        x, y = ids[:-1], ids[1:]
        if mask_prompt:
            y = [-100] * min(len(y), max(prompt - 1, 0)) + y[max(prompt - 1, 0):]
        if len(x) > block:
            cut += 1
            x, y = x[:block], y[:block]
        xs.append(x + [pad] * (block - len(x)))
        ys.append(y + [-100] * (block - len(y)))
    if not xs:
        raise Refused(f"{path}: no record with anything to train on")
    return np.array(xs, dtype=np.int64), np.array(ys, dtype=np.int64), cut


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--tokenizer", required=True, help="the hub folder of the model's tokenizer.json")
    parser.add_argument("--block-size", type=int, required=True, help="the row's length (pstrain's --block-size)")
    parser.add_argument("--mask-prompt", action="store_true", help="train on the answers only")
    parser.add_argument("--out", required=True, help="the .npz to write")
    parser.add_argument("train", help="TRAIN.jsonl")
    parser.add_argument("valid", nargs="?", help="VALID.jsonl (the test split)")
    args = parser.parse_args()
    try:
        if args.block_size < 1:
            raise Refused("--block-size must be 1 or more")
        try:
            tokenizer = Tokenizer.from_folder(args.tokenizer)
        except (OSError, ValueError, KeyError) as e:
            raise Refused(f"{args.tokenizer}: {e!r}")
        renderer = Renderer(tokenizer, args.tokenizer)
        arrays, said = {}, []
        for split, path in (("train", args.train), ("test", args.valid)):
            if path is None:
                continue
            x, y, cut = rows(path, tokenizer, renderer, args.block_size, args.mask_prompt)
            arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y
            said.append(f"{path}: {len(x)} rows of {args.block_size}, {cut} cut, {int((y != -100).sum())} targets")
    except Unsupported as e:
        print(f"prepare_jsonl.py: {args.tokenizer}/tokenizer.json: {e}; nothing written", file=sys.stderr)
        sys.exit(2)
    except Refused as e:
        print(f"prepare_jsonl.py: {e}; nothing written", file=sys.stderr)
        sys.exit(2)
    temp = args.out + ".partial.npz"
    np.savez(temp, **arrays)
    os.replace(temp, args.out)
    for line in said:
        print(line)
    print(f"{args.out}: written")


if __name__ == "__main__":
    main()
