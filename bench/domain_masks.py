#!/usr/bin/env python3
"""Per-domain structured masks against the general one (docs/PRUNING.md, issue 21's contextual
pruning, first step: separate files, no run-time switching yet).

Builds three domains' texts from what every Debian machine has, each split into calibration
and held-back halves that share no source file:
  * code: the Python standard library's sources (/usr/lib/python3.*/*.py), every 4th file
    (sorted by name) held back;
  * docs: man pages of section 1 rendered to text (`man -l -P cat`), every 4th page held back;
  * wiki: WikiText-2 validation (calibration) and test (held back).
The general calibration text is the three calibration texts interleaved paragraph by paragraph.
Then it prunes the base model once per calibration text (`squeeze prune --structure ffn
--method M --sparsity S`) and measures each file's perplexity on every domain's held-back text.

Usage: bench/domain_masks.py [--squeeze build/squeeze] [--model BASE] [--method wanda]
                             [--sparsity 0.35] [--chunks 20] [--out bench/out/domains]
Results are cached in OUT/results.json; files are removed unless --keep.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

from quant_table import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
DOMAINS = ("code", "docs", "wiki")
CHARS = 1_500_000  # per calibration or held-back text


def split_files(files):
    files = sorted(files)
    held = [f for i, f in enumerate(files) if i % 4 == 3]
    calib = [f for i, f in enumerate(files) if i % 4 != 3]
    return calib, held


def cat(paths, read, limit=CHARS):
    out, n = [], 0
    for p in paths:
        t = read(p)
        if not t.strip():
            continue
        out.append(t)
        n += len(t)
        if n >= limit:
            break
    return "\n\n".join(out)[:limit]


def read_py(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_man(path):
    p = subprocess.run(["man", "-l", "-P", "cat", path], capture_output=True, text=True,
                       env=dict(os.environ, MANWIDTH="80", LANG="C.UTF-8"), errors="replace")
    return re.sub(r".\x08", "", p.stdout)  # overstrike (bold, underline)


def build_texts(out):
    paths = {d: (os.path.join(out, f"{d}_calib.txt"), os.path.join(out, f"{d}_test.txt"))
             for d in DOMAINS}
    if all(os.path.exists(p) for pair in paths.values() for p in pair):
        return paths
    py = [f for f in glob.glob("/usr/lib/python3.*/*.py")]
    man = sorted(glob.glob("/usr/share/man/man1/*.1.gz"))[:3000]
    sources = {"code": (split_files(py), read_py), "docs": (split_files(man), read_man)}
    for d, ((calib, held), read) in sources.items():
        for files, path in ((calib, paths[d][0]), (held, paths[d][1])):
            with open(path, "w") as f:
                f.write(cat(files, read))
    with open(os.path.join(SHARED, "wikitext-2", "valid.txt")) as f:
        wiki_calib = f.read()[:CHARS]
    with open(os.path.join(SHARED, "wikitext-2-raw", "wiki.test.raw")) as f:
        wiki_test = f.read()[:CHARS]
    for text, path in ((wiki_calib, paths["wiki"][0]), (wiki_test, paths["wiki"][1])):
        with open(path, "w") as f:
            f.write(text)
    # The general text: the three calibration texts' paragraphs interleaved.
    paras = [open(paths[d][0]).read().split("\n\n") for d in DOMAINS]
    mixed = []
    for i in range(max(len(p) for p in paras)):
        mixed += [p[i] for p in paras if i < len(p)]
    with open(os.path.join(out, "general_calib.txt"), "w") as f:
        f.write("\n\n".join(mixed))
    return paths


def ppl(squeeze, model, text, chunks):
    p = run([squeeze, "perplexity", "-m", model, "-f", text, "--chunks", str(chunks)])
    m = re.search(r"PPL = ([\d.]+)", p.stdout + p.stderr)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--squeeze", default=os.path.join(ROOT, "build", "squeeze"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--method", default="wanda")
    ap.add_argument("--sparsity", default="0.35")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "domains"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    paths = build_texts(a.out)
    res_path = os.path.join(a.out, "results.json")
    res = json.load(open(res_path)) if os.path.exists(res_path) else {}
    key = f"{a.method}-{a.sparsity}-{a.chunks}"
    res.setdefault(key, {})
    rows = {"base": a.model}
    for calib in DOMAINS + ("general",):
        rows[calib] = os.path.join(a.out, f"{calib}-{a.method}-{a.sparsity}.gguf")
    for label, model in rows.items():
        if label in res[key] and len(res[key][label]) == len(DOMAINS):
            continue
        if label != "base" and not os.path.exists(model):
            run([a.squeeze, "prune", "-m", a.model, "-o", model, "--structure", "ffn", "--method",
                 a.method, "--sparsity", a.sparsity, "--calib",
                 os.path.join(a.out, f"{label}_calib.txt")])
        res[key][label] = {d: ppl(a.squeeze, model, paths[d][1], a.chunks) for d in DOMAINS}
        json.dump(res, open(res_path, "w"), indent=1)
        print(f"{label}: {res[key][label]}", file=sys.stderr, flush=True)
        if label != "base" and not a.keep:
            os.remove(model)
    print(f"| calibration ({a.method}, {a.sparsity} of the FFN neurons) | " +
          " | ".join(f"{d} PPL" for d in DOMAINS) + " |")
    print("|---|" + "---:|" * len(DOMAINS))
    for label in rows:
        r = res[key][label]
        best = {d: min(res[key][l][d] for l in rows if l != "base") for d in DOMAINS}
        cells = [f"**{r[d]:.2f}**" if label != "base" and r[d] == best[d] else f"{r[d]:.2f}"
                 for d in DOMAINS]
        print(f"| {'none (base)' if label == 'base' else label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
