#!/usr/bin/env python3
"""The layering of runtime/ (DESIGN.md, "Layout"): a folder may include its own headers and
those of the folders below it, never one above. And names match folders: a file of
runtime/X/Y/ opens namespace pstrain::X (or pstrain::X::Y...), and a namespace block of
another folder in it only declares that folder's types. Prints FILE:LINE for each include
that runs backwards and each file in another folder's namespace, and exits 1 if there is
any; run as ctest lint.layers.

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


# A block of only forward declarations ("struct Server;") may name another folder's namespace.
DECLARATION = re.compile(r"^((struct|class) \w+;|enum class \w+( : \w+)?;|//.*)?$")


def namespace_findings(path, text):
    """A file of runtime/X/Y/ must open pstrain::X (or deeper, along its path), and may open
    another folder's namespace only to declare its types."""
    parts = os.path.dirname(path).split("/")[1:]  # below runtime/
    if not parts:
        return []  # runtime/'s own files name their own small namespaces
    own = {"::".join(parts[:i]) for i in range(1, len(parts) + 1)}
    found, findings = False, []
    for m in re.finditer(r"^namespace pstrain(?:::([\w:]+))? \{\n(.*?)^\}", text, re.M | re.S):
        name = m.group(1) or ""
        if name in own or name.startswith(parts[0] + "::"):
            found = True
        elif not all(DECLARATION.match(line.strip()) for line in m.group(2).split("\n")):
            line = text.count("\n", 0, m.start()) + 1
            findings.append(f"{path}:{line}: defines things in namespace pstrain::{name}, not its folder's")
    if not found:
        findings.append(f"{path}: opens no namespace of its folder (pstrain::{'::'.join(parts)})")
    return findings


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
                    text = f.read()
                if top == "runtime":
                    findings += namespace_findings(path, text)
                for number, line in enumerate(text.split("\n"), 1):
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
    print(f"layers: {len(findings)} include(s) running backwards or file(s) outside their folder's namespace")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
