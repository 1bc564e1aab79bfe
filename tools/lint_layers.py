#!/usr/bin/env python3
"""The layering of runtime/ (DESIGN.md, "Layout"): a folder may include its own headers and
those of the folders below it, never one above. Prints FILE:LINE for each include that runs
backwards and exits 1 if there is any; run as ctest lint.layers.

  lint_layers.py ROOT
"""
import os
import re
import sys

# Lowest first. runtime/'s own files (Errors.h, Portable.h, Stop.h, Text.h) are below all;
# models/ and data/ (outside runtime/) sit between checkpoint and loss.
LAYERS = ["runtime", "runtime/zip", "runtime/config", "runtime/metrics", "runtime/rundir", "runtime/net", "runtime/comm",
          "runtime/comm/mpi", "runtime/codec", "runtime/optim", "runtime/checkpoint", "models", "data",
          "runtime/loss", "runtime/protocol", "runtime/roles", "runtime/exchanges", "runtime/exchanges/*", "runtime/training",
          "runtime/probe"]
# Folders at the same height that must not include each other either.
SIBLINGS = {("models", "data"), ("data", "models")}
# Each exchange's folder (runtime/exchanges/NAME/) is one layer, "runtime/exchanges/*", and
# knows no other exchange's folder.
EXCHANGES = "runtime/exchanges/"


def folder_of(path):
    folder = os.path.dirname(path)
    return EXCHANGES + "*" if folder.startswith(EXCHANGES) else folder


def siblings(mine, theirs):
    if mine.startswith(EXCHANGES) and theirs.startswith(EXCHANGES):
        return mine != theirs
    return (mine, theirs) in SIBLINGS


def layer_of(path):
    folder = folder_of(path)
    return LAYERS.index(folder) if folder in LAYERS else None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    findings = []
    for top in ("runtime", "models", "data"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                mine = layer_of(path)
                if mine is None:
                    findings.append(f"{path}: a folder that LAYERS does not place (tools/lint_layers.py)")
                    continue
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = re.match(r'#include "([^"]+)"', line)
                        if not m:
                            continue
                        target = layer_of(m.group(1))
                        if target is not None and (target > mine or siblings(os.path.dirname(path),
                                                                             os.path.dirname(m.group(1)))):
                            findings.append(f"{path}:{number}: includes {m.group(1)}, a layer above "
                                            f"{os.path.dirname(path)}/")
    for finding in findings:
        print(finding)
    print(f"layers: {len(findings)} include(s) running backwards")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
