#!/usr/bin/env python3
"""The POP (prefill-only layer skipping) table of docs/POP.md.

For each layer-order file (written by `squeeze prune-prefill --score kld|bi|last` from the same
model) and each skip fraction R:
  * quality with `squeeze perplexity --prefill-skip auto:R --prefill-split --kl-divergence BASE`
    on wiki.test.raw at --ctx (each chunk's first half is the pruned prompt, the second half is
    scored through the KV cache it left), against the dense model's saved logits: PPL, mean KLD,
    top-1 agreement over the scored tokens and on the first token after the prompt;
  * speed (the kld file's sets): `squeeze bench -p PP -n 0 -r 1 --prefill-skip auto:R` for each
    prompt length, all fractions in one loop of --rounds interleaved rounds; prefill t/s is the
    median over rounds, the speed-up the median of the within-round ratios to R = 0, and the
    time to first token the prompt's length over the median t/s.

With --heads (and --groups: whole KV groups, --head-groups), instead, dynamic head pruning (`--prefill-heads F --head-score S`) for each score
and fraction: the same quality columns, and the attention seconds of `bench -p --heads-pp`
(the `samples_attn_s` of its JSON), all settings and dense in --rounds interleaved rounds.

  bench/pop_table.py --files kld=K.gguf,bi=B.gguf,last=L.gguf [--fractions 0.1,0.2,0.3,0.4,0.5]
                     [--ctx 2048] [--chunks 10] [--pp 512,2048] [--rounds 3] [--threads 2]
  bench/pop_table.py --heads [-m MODEL] [--head-fractions 0.5,0.34] [--head-scores qk,entropy,vnorm,a2sf]
                     [--heads-pp 4096] [--ctx 2048] [--chunks 10] [--rounds 3]
Prints markdown tables on stdout; progress on stderr.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQUEEZE = os.path.join(ROOT, "build", "squeeze")
TEXT = os.path.join(ROOT, "..", "shared", "data", "wikitext-2-raw", "wiki.test.raw")


def run(args):
    print("$ squeeze " + " ".join(args), file=sys.stderr, flush=True)
    r = subprocess.run([SQUEEZE] + args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"squeeze {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def field(out, name):
    m = re.search(r"^" + re.escape(name) + r"\s+([0-9.]+)", out, re.M)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", help="score=FILE,... (prune-prefill outputs)")
    ap.add_argument("--heads", action="store_true", help="the head-pruning table instead")
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--head-fractions", default="0.5,0.34")
    ap.add_argument("--head-scores", default="qk,entropy,vnorm,a2sf")
    ap.add_argument("--heads-pp", type=int, default=4096)
    ap.add_argument("--groups", action="store_true", help="--heads with --head-groups (whole KV groups)")
    ap.add_argument("--fractions", default="0.1,0.2,0.3,0.4,0.5")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--pp", default="512,2048")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-speed", action="store_true")
    a = ap.parse_args()
    if a.heads:
        return heads_table(a)
    if not a.files:
        ap.error("--files is required without --heads")
    files = dict(kv.split("=", 1) for kv in a.files.split(","))
    fractions = [float(f) for f in a.fractions.split(",")]
    first = next(iter(files.values()))
    common = ["-t", str(a.threads), "-f", TEXT, "--ctx", str(a.ctx), "--chunks", str(a.chunks)]

    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.logits")
        out = run(["perplexity", "-m", first, "--save-logits", base] + common)
        dense_ppl = float(re.search(r"PPL = ([0-9.]+)", out).group(1))
        print(f"\n### Quality: wiki.test.raw, ctx {a.ctx} (prompt {a.ctx // 2}), "
              f"{a.chunks} chunks; dense PPL {dense_ppl:.4f}\n")
        print("| score | R | layers skipped | PPL | PPL change | mean KLD | top-1 | first-token top-1 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for score, path in files.items():
            for r in fractions:
                out = run(["perplexity", "-m", path, "--kl-divergence", base, "--prefill-skip",
                           f"auto:{r}", "--prefill-split"] + common)
                ppl = field(out, "PPL(model)")
                m = re.search(r"layers (\S+) \((\d+) of", run_layers(path, r))
                print(f"| {score} | {r:.2f} | {m.group(2)}: {m.group(1)} | {ppl:.4f} | {100 * (ppl / dense_ppl - 1):+.2f}% "
                      f"| {field(out, 'Mean KLD'):.5f} | {field(out, 'Same top-1'):.2f}% "
                      f"| {field(out, 'First-token top-1'):.1f}% |", flush=True)

    if a.no_speed:
        return
    pps = [int(p) for p in a.pp.split(",")]
    path = files.get("kld", first)
    ts = {(r, p): [] for r in [0.0] + fractions for p in pps}
    for rnd in range(a.rounds):
        for r in [0.0] + fractions:
            args = ["bench", "-m", path, "-t", str(a.threads), "-p", a.pp, "-n", "0", "-r", "1",
                    "--json"]
            if r > 0:
                args += ["--prefill-skip", f"auto:{r}"]
            res = json.loads(run(args))["results"]
            for x in res:
                ts[(r, x["n_prompt"])].append(x["median_ts"])
    print(f"\n### Speed: prefill, {a.threads} threads, {a.rounds} interleaved rounds "
          f"(layer sets of {os.path.basename(path)})\n")
    print("| R | " + " | ".join(f"pp{p} t/s | speed-up | TTFT {p} (s)" for p in pps) + " |")
    print("|---:|" + "---:|---:|---:|" * len(pps))
    for r in [0.0] + fractions:
        cells = []
        for p in pps:
            med = statistics.median(ts[(r, p)])
            ratio = statistics.median(x / y for x, y in zip(ts[(r, p)], ts[(0.0, p)]))
            cells.append(f"{med:.1f} | {ratio:.2f}x | {p / med:.3f}")
        print(f"| {r:.2f} | " + " | ".join(cells) + " |", flush=True)


def heads_table(a):
    fractions = [float(f) for f in a.head_fractions.split(",")]
    scores = a.head_scores.split(",")
    common = ["-t", str(a.threads), "-f", TEXT, "--ctx", str(a.ctx), "--chunks", str(a.chunks)]
    settings = [(s, f) for s in scores for f in fractions]
    group_flag = ["--head-groups"] if a.groups else []
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.logits")
        out = run(["perplexity", "-m", a.model, "--save-logits", base] + common)
        dense_ppl = float(re.search(r"PPL = ([0-9.]+)", out).group(1))
        quality = {}
        for s, f in settings:
            out = run(["perplexity", "-m", a.model, "--kl-divergence", base, "--prefill-heads",
                       str(f), "--head-score", s, "--prefill-split"] + group_flag + common)
            quality[(s, f)] = (field(out, "PPL(model)"), field(out, "Mean KLD"),
                               field(out, "Same top-1"), field(out, "First-token top-1"))
    attn = {k: [] for k in [None] + settings}
    total = {k: [] for k in [None] + settings}
    for _ in range(a.rounds):
        for k in [None] + settings:
            args = ["bench", "-m", a.model, "-t", str(a.threads), "-p", str(a.heads_pp), "-n", "0",
                    "-r", "1", "--json"]
            if k:
                args += ["--prefill-heads", str(k[1]), "--head-score", k[0]] + group_flag
            res = json.loads(run(args))["results"][0]
            attn[k].append(res["samples_attn_s"][0])
            total[k].append(res["samples_s"][0])
    d_attn, d_total = statistics.median(attn[None]), statistics.median(total[None])
    info = run(["inspect", a.model])
    n_head = int(re.search(r"\.attention\.head_count\s+\S+\s+(\d+)", info).group(1))
    n_kv = int(re.search(r"\.attention\.head_count_kv\s+\S+\s+(\d+)", info).group(1))
    print(f"\n### Head pruning{' by whole KV groups' if a.groups else ''}: quality on wiki.test.raw, ctx {a.ctx} (prompt {a.ctx // 2}, "
          f"head chunks of 256), {a.chunks} chunks, dense PPL {dense_ppl:.4f}; attention time of "
          f"pp{a.heads_pp}, {a.threads} threads, medians of {a.rounds} interleaved rounds "
          f"(dense: attention {d_attn:.2f} s of {d_total:.2f} s)\n")
    print("| score | F | heads kept | PPL | PPL change | mean KLD | top-1 | first-token top-1 | "
          f"attention s (pp{a.heads_pp}) | attention lower by | prefill s | prefill speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s, f in settings:
        ppl, kld, top1, first = quality[(s, f)]
        at, tt = statistics.median(attn[(s, f)]), statistics.median(total[(s, f)])
        if a.groups:  # round(F * n_head_kv) whole groups
            kept = max(1, min(n_kv, int(f * n_kv + 0.5))) * (n_head // n_kv)
        else:  # round(F * n_head)
            kept = max(1, min(n_head, int(f * n_head + 0.5)))
        print(f"| {s} | {f:.2f} | {kept} of {n_head} | {ppl:.4f} | {100 * (ppl / dense_ppl - 1):+.2f}% | "
              f"{kld:.5f} | {top1:.2f}% | {first:.1f}% | {at:.2f} | {d_attn / at:.2f}x | "
              f"{tt:.2f} | {d_total / tt:.2f}x |", flush=True)


def run_layers(path, r):
    """The 'prefill-skip: layers ... (k of n)' line for auto:r on path."""
    p = subprocess.run([SQUEEZE, "bench", "-m", path, "-p", "8", "-n", "0", "-r", "1",
                        "--no-warmup", "--prefill-skip", f"auto:{r}"], capture_output=True, text=True)
    return next((l for l in p.stderr.splitlines() if l.startswith("prefill-skip:")),
                "layers none (0 of")


if __name__ == "__main__":
    main()
