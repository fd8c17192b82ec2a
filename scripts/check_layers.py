#!/usr/bin/env python3
"""The include check: every `#include "..."` of tessera's sources must point down the layers.

    scripts/check_layers.py [ROOT]      # ROOT: the source tree (default: this checkout)
    scripts/check_layers.py --count     # also print how many files include across layers

The layers, bottom to top (a file may include files of its own layer and of lower ones):

    0  base      core/*.{h,cpp}, core/cuda/, core/sparse/: Tensor, dtype, device, storage,
                 layouts, the op machinery, autograd's records, autocast's mode. Includes no op.
    1  ops       kernels/: one folder per op, kernels/common.
    2  engine    core/engine/ (the backward pass, the Tensor members and factories that run
                 ops), core/graph/, core/io/, core/logging/, core/distributed/.
    3  layers/  optim/  data/    peers: none of the three includes another.
    4  models/
    5  programs  examples/, bench/, and the umbrella header core/tessera.h.in.
    6  tests/    may include anything.

Prints one line per wrong-way include, `file:line: includes "target" (layer): rule`, and
exits 1 when there is any (0 otherwise). Includes that name no file of the tree (system and
third-party headers, `gradcheck.h` found through an include path) are not layered. Standard
library only; run by ctest as `include_layers` (scripts/test.sh is the CI command).
"""
import argparse
import os
import re
import sys

# (path prefix, layer, rank); the longest matching prefix names a file's layer.
LAYERS = [
    ("core/", "base", 0),
    ("kernels/", "ops", 1),
    ("core/engine/", "engine", 2),
    ("core/graph/", "engine", 2),
    ("core/io/", "engine", 2),
    ("core/logging/", "engine", 2),
    ("core/distributed/", "engine", 2),
    ("layers/", "layers", 3),
    ("optim/", "optim", 3),
    ("data/", "data", 3),
    ("models/", "models", 4),
    ("examples/", "programs", 5),
    ("bench/", "programs", 5),
    ("core/tessera.h.in", "programs", 5),
    ("tests/", "tests", 6),
]
RANK = {layer: rank for _, layer, rank in LAYERS}
SOURCE_DIRS = ["core", "kernels", "layers", "optim", "data", "models", "examples", "bench", "tests"]
EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".in")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(path):
    """The layer of a root-relative path (forward slashes), or None outside the layers."""
    best = None
    for prefix, layer, _ in LAYERS:
        if (path == prefix or path.startswith(prefix)) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return best[1] if best else None


def allowed(src, dst):
    """Whether a file of layer `src` may include one of layer `dst`."""
    return src == dst or RANK[dst] < RANK[src]


def below(layer):
    """What a file of `layer` may include, in words."""
    names = sorted({l for l in RANK if RANK[l] < RANK[layer]}, key=lambda l: (RANK[l], l))
    return layer + (" and the layers below it (" + ", ".join(names) + ")" if names else "")


def sources(root):
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    full = os.path.join(dirpath, name)
                    yield os.path.relpath(full, root).replace(os.sep, "/")


def resolve(root, rel, target):
    """The root-relative path that `#include "target"` in file `rel` names, or None."""
    for candidate in (target, os.path.join(os.path.dirname(rel), target)):
        candidate = os.path.normpath(candidate).replace(os.sep, "/")
        if not candidate.startswith("..") and os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def check(root):
    """(violations as printable lines, set of files with at least one)."""
    problems, files = [], set()
    for rel in sources(root):
        src = layer_of(rel)
        if src is None:
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(root, rel, m.group(1))
                dst = layer_of(target) if target else None
                if dst is None or allowed(src, dst):
                    continue
                if RANK[dst] == RANK[src]:
                    rule = f"{src}/ and {dst}/ are peers and do not include each other"
                else:
                    rule = f"{src} may include only {below(src)}"
                problems.append(f'{rel}:{lineno}: includes "{m.group(1)}" ({dst}): {rule}')
                files.add(rel)
    return problems, files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--count", action="store_true", help="print the number of files that include across layers")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    if not os.path.isdir(os.path.join(root, "core")):
        print(f"check_layers: {root} has no core/ folder", file=sys.stderr)
        return 2
    problems, files = check(root)
    for p in problems:
        print(p)
    sys.stdout.flush()
    if args.count or problems:
        print(f"check_layers: {len(problems)} wrong-way includes in {len(files)} files", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
