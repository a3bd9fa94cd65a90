#!/usr/bin/env python3
"""Fails on an include that points up the library order of ../shared/DESIGN.md, and on a source
file of more than MAX_LINES lines (a file that long is asking to be split: STYLE.md).

Each folder under src/ is one library with a rank; a file may include headers of its own
library and of libraries of a lower rank only (core < formats < ops < gguf, sample < tokenizer <
kv < sparsity < model < calib < compress, prune, eval < serve < cli). A folder missing from the
table is an error too, so that a new library gets its place when it is added.

  check_layers.py SRC_DIR
"""

import os
import re
import sys

RANK = {
    "core": 0,
    "formats": 1,
    "ops": 2,
    "gguf": 3,
    "sample": 3,
    "tokenizer": 4,  # reads its vocabulary from a gguf::File
    "kv": 5,
    "sparsity": 6,
    "model": 7,
    "calib": 8,
    "compress": 9,
    "prune": 9,
    "eval": 9,
    "serve": 10,
    "cli": 11,
}
MAX_LINES = 600
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/[^"]+"', re.M)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    errors = []
    for lib in sorted(os.listdir(src)):
        path = os.path.join(src, lib)
        if not os.path.isdir(path):
            continue
        if lib not in RANK:
            errors.append(f"src/{lib}/: a library without a place in the order (tests/layering)")
            continue
        for root, _, files in os.walk(path):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                file = os.path.join(root, name)
                with open(file, encoding="utf-8") as f:
                    text = f.read()
                n_lines = text.count("\n")
                if n_lines > MAX_LINES:
                    rel = os.path.relpath(file, os.path.dirname(src))
                    errors.append(f"{rel}: {n_lines} lines, more than {MAX_LINES}")
                for m in INCLUDE.finditer(text):
                    dep = m.group(1)
                    if dep == lib:
                        continue
                    line = text.count("\n", 0, m.start()) + 1
                    rel = os.path.relpath(file, os.path.dirname(src))
                    if dep not in RANK:
                        errors.append(f"{rel}:{line}: includes {dep}/, not a library of src/")
                    elif RANK[dep] >= RANK[lib]:
                        errors.append(f"{rel}:{line}: {lib} includes {dep}/, which is not below it")
    for e in errors:
        print(e)
    if errors:
        sys.exit(1)
    print(f"no upward includes, no file over {MAX_LINES} lines")


if __name__ == "__main__":
    main()
