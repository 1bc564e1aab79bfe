#!/usr/bin/env python3
"""What adding one more of a kind touches: DESIGN.md's "to add" table, counted on this tree.

For each kind (an exchange, a mode, a dataset format, a codec, an update rule, a weight-decay rule) it takes one
that exists and lists every file outside that one's own files which names it, with the
lines that do: what a new one of the kind would have to edit beside its own files. Tests
and docs aside. The names searched are each example's identifiers in the code (its
enumerator, its row's name, its folder or header), comments aside; a file that asks for the
example by another route (a string built at run time) is not seen.

Usage: tools/count_touches.py [ROOT] [--kind KIND]   (ROOT: the checkout, default: here)
"""
import argparse
import os
import re
import subprocess
import sys

# kind -> (example, the example's own files (prefixes), the patterns that name it)
KINDS = {
    "exchange": ("rounds (diloco, localsgd)", ["runtime/exchanges/rounds/"],
                 [r"\bkLocalRounds\b", r"Exchange::LocalRounds\b", r"\bLocalRounds,", r"exchanges/rounds/"]),
    "server-exchange": ("range servers (sync with K servers)", ["runtime/exchanges/range_servers/"],
                        [r"\bkRangeServers\b", r"exchanges/range_servers/"]),
    "mode": ("localsgd", [], [r"Mode::LocalSgd\b", r"\bLocalSgd\b", r'"localsgd"']),
    "format": ("npz", ["data/Npz"], [r"\bNpz\.h\b", r"data/Npz(Format)?\.cpp", r'"npz"', r"\bnpz(File|Reader|Dataset)\b",
                                       r"\bkNpzFormat\b"]),
    "codec": ("int4", [], [r"\bInt4\b", r'"int4"']),
    "optimizer": ("adamw (Adam)", ["runtime/optim/Adam."], [r'"adamw"', r"optim/Adam\.(h|cpp)", r"\bAdam\(", r"\bAdamOptions\b"]),
    "weight-decay-rule": ("matrices (--weight-decay-scope)", ["runtime/optim/MatrixSpans."],
                          [r"DecayScope::Matrices\b", r'"matrices"', r"\bmatrixSpans\b", r"optim/MatrixSpans\.h"]),
}
SEARCHED = ["runtime", "launcher", "models", "data", "CMakeLists.txt"]


def comment(line):
    """A line that only talks about the example (C++ or CMake comment), not one that uses it."""
    text = line.strip()
    return text.startswith("//") or (text.startswith("#") and not text.startswith("#include"))


def touches(root, own, patterns):
    """{file: [(line number, text)]} of the files outside `own` whose lines match a pattern."""
    files = subprocess.run(["git", "-C", root, "ls-files", "--", *SEARCHED], check=True, capture_output=True,
                           text=True).stdout.split()
    found = {}
    pattern = re.compile("|".join(patterns))
    for path in files:
        if any(path.startswith(prefix) for prefix in own):
            continue
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                hits = [(n, line.strip()) for n, line in enumerate(f, 1) if pattern.search(line) and not comment(line)]
        except (OSError, UnicodeDecodeError):
            continue
        if hits:
            found[path] = hits
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--kind", choices=sorted(KINDS), help="one kind only")
    args = parser.parse_args()
    summary = []
    for kind, (example, own, patterns) in KINDS.items():
        if args.kind and kind != args.kind:
            continue
        found = touches(args.root, own, patterns)
        lines = sum(len(h) for h in found.values())
        where = f" beside {', '.join(own)}" if own else ""
        print(f"## {kind}: {example}: {len(found)} file(s), {lines} line(s){where}")
        for path, hits in sorted(found.items()):
            print(f"  {path}")
            for n, text in hits[:6]:
                print(f"    {n}: {text[:110]}")
            if len(hits) > 6:
                print(f"    ... {len(hits) - 6} more")
        summary.append((kind, example, len(found), lines))
    print("\n| to add | like | files beside its own | lines |\n|---|---|---:|---:|")
    for kind, example, files, lines in summary:
        print(f"| {kind} | {example} | {files} | {lines} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
