#!/usr/bin/env python3
"""Per-domain FFN masks against the general one, and --domain auto's routing (docs/PRUNING.md).

Builds three domains' texts from what every Debian machine has, each split into calibration
and held-back halves that share no source file:
  * code: the Python standard library's sources (/usr/lib/python3.*/*.py), every 4th file
    (sorted by name) held back;
  * docs: man pages of section 1 rendered to text (`man -l -P cat`), every 4th page held back;
  * wiki: WikiText-2 validation (calibration) and test (held back).
The general calibration text is the three calibration texts interleaved paragraph by paragraph.
Then `squeeze prune --structure ffn --method M --sparsity S --domains code=..,docs=..,wiki=..`
writes one file with the three masks (and `--domains general=..` one with the general mask),
measures `squeeze perplexity --domain NAME` of every mask on every domain's held-back text, and
`squeeze route --expect D` the share of held-back windows --domain auto sends to their domain.

Usage: bench/domain_masks.py [--squeeze build/squeeze] [--model BASE] [--method wanda]
                             [--sparsity 0.35] [--chunks 20] [--windows 100] [--tokens 64,128]
                             [--out bench/out/domains]
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


def ppl(squeeze, model, text, chunks, extra=()):
    p = run([squeeze, "perplexity", "-m", model, "-f", text, "--chunks", str(chunks)] + list(extra))
    m = re.search(r"PPL = ([\d.]+)", p.stdout + p.stderr)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--squeeze", default=os.path.join(ROOT, "build", "squeeze"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--method", default="wanda")
    ap.add_argument("--sparsity", default="0.35")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--windows", type=int, default=100, help="routing: windows per domain")
    ap.add_argument("--tokens", default="64,128", help="routing: window lengths")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "domains"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    paths = build_texts(a.out)
    res_path = os.path.join(a.out, "results.json")
    res = json.load(open(res_path)) if os.path.exists(res_path) else {}
    key = f"masks-{a.method}-{a.sparsity}-{a.chunks}"
    res.setdefault(key, {})
    # One file with the three domains' masks (routing among them), one with the general mask.
    files = {"domains": os.path.join(a.out, f"domains-{a.method}-{a.sparsity}.gguf"),
             "general": os.path.join(a.out, f"general-{a.method}-{a.sparsity}.gguf")}
    specs = {"domains": ",".join(f"{d}={os.path.join(a.out, d + '_calib.txt')}" for d in DOMAINS),
             "general": f"general={os.path.join(a.out, 'general_calib.txt')}"}
    for name, path in files.items():
        if not os.path.exists(path):
            run([a.squeeze, "prune", "-m", a.model, "-o", path, "--structure", "ffn", "--method",
                 a.method, "--sparsity", a.sparsity, "--domains", specs[name]])
    rows = [("base", a.model, None)] + [(d, files["domains"], d) for d in DOMAINS] + \
           [("general", files["general"], "general")]
    for label, model, domain in rows:
        if label in res[key] and len(res[key][label]) == len(DOMAINS):
            continue
        extra = ["--domain", domain] if domain else []
        res[key][label] = {d: ppl(a.squeeze, model, paths[d][1], a.chunks, extra) for d in DOMAINS}
        json.dump(res, open(res_path, "w"), indent=1)
        print(f"{label}: {res[key][label]}", file=sys.stderr, flush=True)
    route = res[key].setdefault("route", {})
    for n in a.tokens.split(","):
        for d in DOMAINS:
            k = f"{d}-{n}"
            if k in route:
                continue
            p = run([a.squeeze, "route", "-m", files["domains"], "-f", paths[d][1], "--tokens", n,
                     "--windows", str(a.windows), "--expect", d])
            route[k] = {"line": p.stdout.strip(),
                        "acc": float(re.search(r"; \w+: ([\d.]+)%", p.stdout).group(1))}
            json.dump(res, open(res_path, "w"), indent=1)
            print(route[k]["line"], file=sys.stderr, flush=True)
    if not a.keep:
        for path in files.values():
            os.remove(path)
    print(f"| mask ({a.method}, {a.sparsity} of the FFN neurons) | " +
          " | ".join(f"{d} PPL" for d in DOMAINS) + " |")
    print("|---|" + "---:|" * len(DOMAINS))
    labels = [r[0] for r in rows]
    best = {d: min(res[key][l][d] for l in labels if l != "base") for d in DOMAINS}
    for label in labels:
        r = res[key][label]
        cells = [f"**{r[d]:.2f}**" if label != "base" and r[d] == best[d] else f"{r[d]:.2f}"
                 for d in DOMAINS]
        name = "none (base)" if label == "base" else f"`--domain {label}`"
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print("| window | " + " | ".join(f"{d} routed to {d}" for d in DOMAINS) + " |")
    print("|---|" + "---:|" * len(DOMAINS))
    for n in a.tokens.split(","):
        print(f"| {n} tokens | " + " | ".join(f"{route[f'{d}-{n}']['acc']:.0f}%" for d in DOMAINS) + " |")


if __name__ == "__main__":
    main()
