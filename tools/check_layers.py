#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_layers: every `#include "..."` of loaderd's C and CUDA sources
against the layer table (tools/layers.txt), and the length of every file
under the folders the table limits.

    tools/check_layers.py [SOURCE_DIR]     (default: this file's project)

Prints one line per violation and exits 1 when there is any, else 0:
    FILE:LINE: includes daemon/x/y.h (layer X above layer Y)
    FILE:LINE: includes daemon/x/y.h (layer X beside layer Y)
    FILE:LINE: includes x/y.h (layer X, which layer Y does not use)
    FILE: 700 lines (more than 650)
    FILE: in no layer of tools/layers.txt
An include resolves as the compiler resolves it: beside the including
file first, then from the source directory; one that resolves to no file
of the project (a system or toolkit header) is not checked. Run by CTest
as unit.layers (tests/CMakeLists.txt).
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


class Layer:
    def __init__(self, rank, name, folders, uses):
        self.rank, self.name, self.folders, self.uses = rank, name, folders, uses


def read_table(path):
    layers, limits, allow, allow_long = [], [], {}, {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            where = f"{path}:{n}"
            if words[0] == "max-lines" and len(words) == 3:
                limits.append((words[1].rstrip("/"), int(words[2])))
            elif words[0] == "allow" and len(words) == 3:
                allow[(words[1], words[2])] = where
            elif words[0] == "allow-long" and len(words) == 2:
                allow_long[words[1]] = where
            elif words[0].isdigit() and len(words) >= 3:
                folders, uses = words[2:], None
                if "uses" in folders:
                    at = folders.index("uses")
                    folders, uses = folders[:at], set(folders[at + 1:])
                layers.append(Layer(int(words[0]), words[1], folders, uses))
            else:
                sys.exit(f"{where}: cannot read this line")
    names = {l.name for l in layers}
    for l in layers:
        for u in l.uses or ():
            if u not in names:
                sys.exit(f"{path}: layer {l.name} uses {u}, which is no layer")
    return layers, limits, allow, allow_long


def layer_of(layers, rel):
    """The layer whose folder is the longest prefix of rel, or None."""
    best, best_len = None, -1
    folder = os.path.dirname(rel)
    for l in layers:
        for f in l.folders:
            if f.endswith("/*"):
                hit = folder == f[:-2]
            else:
                hit = folder == f or folder.startswith(f + "/")
            if hit and len(f) > best_len:
                best, best_len = l, len(f)
    return best


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        # Build trees, dependencies and hidden folders are not the project's.
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "build"))
                             and not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt")))
        for name in sorted(filenames):
            yield os.path.relpath(os.path.join(dirpath, name), root)


def resolve(root, rel, target):
    for base in (os.path.dirname(rel), ""):
        cand = os.path.normpath(os.path.join(base, target))
        if not cand.startswith("..") and os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here))
    table = os.path.join(root, "tools", "layers.txt")
    layers, limits, allow, allow_long = read_table(table)
    used_allow, used_long = set(), set()
    problems = []
    files = list(source_files(root))
    for rel in files:
        for folder, most in limits:
            if rel.startswith(folder + "/"):
                with open(os.path.join(root, rel), "rb") as f:
                    count = f.read().count(b"\n")
                if count > most:
                    if rel in allow_long:
                        used_long.add(rel)
                    else:
                        problems.append(f"{rel}: {count} lines (more than {most})")
        if not rel.endswith(SOURCE_SUFFIXES):
            continue
        mine = layer_of(layers, rel)
        if mine is None:
            problems.append(f"{rel}: in no layer of tools/layers.txt")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = resolve(root, rel, m.group(1))
            if target is None:
                continue
            theirs = layer_of(layers, target)
            if theirs is None or theirs is mine:
                continue  # a file in no layer is reported once, as itself
            if mine.uses is not None:
                why = None if theirs.name in mine.uses else \
                    f"layer {theirs.name}, which layer {mine.name} does not use"
            elif theirs.rank < mine.rank:
                why = f"layer {theirs.name} above layer {mine.name}"
            elif theirs.rank == mine.rank:
                why = f"layer {theirs.name} beside layer {mine.name}"
            else:
                why = None
            if why is None:
                continue
            if (rel, target) in allow:
                used_allow.add((rel, target))
                continue
            problems.append(f"{rel}:{n}: includes {target} ({why})")
    for key, where in sorted(allow.items()):
        if key not in used_allow:
            problems.append(f"{where}: allow {key[0]} {key[1]}: no such violation any more; "
                            "remove the entry")
    for rel, where in sorted(allow_long.items()):
        if rel not in used_long:
            problems.append(f"{where}: allow-long {rel}: not too long any more; remove the entry")
    for p in problems:
        print(p)
    checked = sum(1 for rel in files if rel.endswith(SOURCE_SUFFIXES))
    print(f"check_layers: {checked} files, {len(problems)} problem(s)"
          f"{'' if not (used_allow or used_long) else f'; {len(used_allow) + len(used_long)} allowed'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
