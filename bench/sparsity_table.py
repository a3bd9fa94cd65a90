#!/usr/bin/env python3
"""The activation-sparsity table of docs/SPARSITY.md.

For each weight format (default: q8_0 and q4_0 files converted from the shipped Q4_1 model with
`squeeze quantize --type`, and the Q4_1 file itself), and each method (teal, teal with the
greedy allocation, cats):
  * `squeeze sparsify --sparsity 0.5,0.25,0.4,0.6` on valid.txt (its first 80%; the density
    check on the held-back rest), which also reports the density of the union over a batch;
  * quality with `squeeze perplexity --act-sparsity S --kl-divergence BASE` on wiki.test.raw,
    ctx 512, the first --chunks chunks, against the dense base model's logits (the Q4_1 file),
    for S = dense and each level: PPL, mean KLD, top-1 agreement and the density reached there;
  * TEAL with the output head's input sparsified too (`--head-sparsity` at the same level), at
    HEAD_LEVELS: quality and speed as above;
  * speed: tg128 (`squeeze bench -p 0 -n 128 -r REPS`) dense and at each level, and llama.cpp's
    dense tg128 on the same file (llama-cpp-python, timed as bench/vs_llamacpp times it), all in
    one loop of --rounds interleaved rounds, dense also at the end of each round: t/s is the
    median over rounds; a speed-up is the median over rounds of the ratio within the round
    (to dense: the geometric mean of its two runs), with the rounds' range in brackets (the
    host's speed drifts by tens of percent between and within rounds).
  * HellaSwag accuracy (%) with `squeeze hellaswag --tasks N --act-sparsity S` on the first N
    tasks of llama-perplexity's random order, N = --hellaswag-tasks (default 0: not run, as it
    adds some 8 minutes per row on 2 threads; cells without it show "not measured");
  * block weights read: the fraction of the blocks' weight bytes that one token's products
    read, as the products count it (`bench`'s "block weights read" in the tg128 runs; "-" when
    the speed phase did not run).
Results are cached in bench/out/sparsity_table/results.json (delete entries to re-measure).

  bench/sparsity_table.py [--formats q8_0 q4_0 q4_1] [--chunks 40] [--rounds 5] [--no-speed]
                          [--hellaswag-tasks 1000]
"""

import argparse
import importlib.machinery
import importlib.util
import json
import os
import random
import re
import statistics
import subprocess
import sys

from hellaswag_vs_llamacpp import squeeze_hellaswag

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TEST = os.path.join(ROOT, "..", "shared", "data", "wikitext-2-raw", "wiki.test.raw")
CALIB = os.path.join(ROOT, "..", "shared", "data", "wikitext-2", "valid.txt")
BASE = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
LEVELS = [0.25, 0.4, 0.5, 0.6]
# teal-greedy: TEAL with its block-wise greedy allocation (`sparsify --allocate greedy`, default
# step and windows); the rest of its handling is TEAL's.
METHODS = ["teal", "teal-greedy", "cats"]
SPARSIFY_ARGS = {"teal": ["--method", "teal"],
                 "teal-greedy": ["--method", "teal", "--allocate", "greedy"],
                 "cats": ["--method", "cats"]}
# TEAL with the output head sparsified too (--head-sparsity at the blocks' level).
HEAD_LEVELS = [0.25, 0.4, 0.5]


def load_vs_llamacpp():
    path = os.path.join(HERE, "vs_llamacpp")
    loader = importlib.machinery.SourceFileLoader("vs_llamacpp", path)
    spec = importlib.util.spec_from_loader("vs_llamacpp", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def reexec_into_venv(venv):
    """Runs this script with the llama-cpp-python venv's python unless it already does."""
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        sys.exit(f"no python in the llama-cpp-python venv {venv} (use --llama-venv PATH)")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    if os.environ.get("SQUEEZE_SPARSITY_TABLE_VENV") == venv:
        sys.exit(f"re-executing into {venv} did not switch the interpreter")
    env = dict(os.environ, SQUEEZE_SPARSITY_TABLE_VENV=venv)
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p


def perplexity(sq, model, base_logits, chunks, level, head=None):
    cmd = [sq, "perplexity", "-m", model, "-f", TEST, "--chunks", str(chunks),
           "--kl-divergence", base_logits]
    if level is not None:
        cmd += ["--act-sparsity", str(level)]
    if head is not None:
        cmd += ["--head-sparsity", str(head)]
    out = run(cmd).stdout
    r = {"ppl": float(re.search(r"PPL\(model\)\s+([\d.]+)", out).group(1)),
         "kld": float(re.search(r"Mean KLD\s+([\d.]+)", out).group(1)),
         "top1": float(re.search(r"Same top-1\s+([\d.]+)", out).group(1))}
    m = re.search(r"density (.*)\(weighted by weights ([\d.]+)\)", out)
    if m:
        r["density"] = float(m.group(2))
    else:
        m = re.search(r"density gate_act ([\d.]+)", out)
        r["density"] = float(m.group(1)) if m else 1.0
    m = re.search(r"; head_in ([\d.]+)", out)
    r["head_density"] = float(m.group(1)) if m else 1.0
    return r


def hellaswag(sq, model, tasks, threads, level, head=None):
    extra = [] if level is None else ["--act-sparsity", str(level)]
    if head is not None:
        extra += ["--head-sparsity", str(head)]
    return squeeze_hellaswag(sq, model, tasks, threads, extra)


def tg128(sq, model, reps, level, head=None, reads=None, key=None):
    """tg128 t/s; with a level, also the fraction of the blocks' weight bytes that the products
    read (bench's 'block weights read', counted by the products), kept in reads[key]."""
    cmd = [sq, "bench", "-m", model, "-p", "0", "-n", "128", "-r", str(reps), "--json"]
    if level is not None:
        cmd += ["--act-sparsity", str(level)]
    if head is not None:
        cmd += ["--head-sparsity", str(head)]
    p = run(cmd)
    if level is not None and reads is not None:
        m = re.search(r"block weights read ([\d.]+)", p.stderr)
        if not m:
            sys.exit(f"no 'block weights read' in the output of {' '.join(cmd)}")
        reads[key] = float(m.group(1))
    return json.loads(p.stdout)["results"][0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--squeeze", default=os.path.join(ROOT, "build", "squeeze"))
    ap.add_argument("--formats", nargs="*", default=["q8_0", "q4_0"])
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--calib-samples", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--hellaswag-tasks", type=int, default=0,
                    help="HellaSwag column on the first N tasks (default 0: not run)")
    ap.add_argument("--no-llamacpp", action="store_true", help="skip llama.cpp's tg128")
    ap.add_argument("--llama-venv", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "sparsity_table"))
    a = ap.parse_args()
    vs = load_vs_llamacpp()
    if not a.no_speed and not a.no_llamacpp:
        reexec_into_venv(a.llama_venv or vs.default_venv())
    sq = os.path.abspath(a.squeeze)
    os.makedirs(a.out, exist_ok=True)
    res_path = os.path.join(a.out, "results.json")
    res = json.load(open(res_path)) if os.path.exists(res_path) else {}
    save = lambda: json.dump(res, open(res_path, "w"), indent=1)

    # The HellaSwag column's key; printed for --hellaswag-tasks N, or 1000 when not run.
    hs_key = f"hellaswag{a.hellaswag_tasks or 1000}"
    base_logits = os.path.join(a.out, f"base-{a.chunks}.logits")
    if not os.path.exists(base_logits):
        run([sq, "perplexity", "-m", BASE, "-f", TEST, "--chunks", str(a.chunks),
             "--save-logits", base_logits])

    files = {}
    for fmt in a.formats:
        src = os.path.join(a.out, f"{fmt}.gguf")
        if fmt == "q4_1":
            src = BASE
        elif not os.path.exists(src):
            run([sq, "quantize", "-m", BASE, "-o", src, "--type", fmt])
        for method in METHODS:
            f = os.path.join(a.out, f"{fmt}-{method}.gguf")
            files[(fmt, method)] = f
            key = f"sparsify/{fmt}/{method}"
            if key not in res or not os.path.exists(f):
                p = run([sq, "sparsify", "-m", src, "-o", f] + SPARSIFY_ARGS[method] + [
                         "--sparsity", ",".join(str(s) for s in [0.5] + [l for l in LEVELS if l != 0.5]),
                         "--calib-samples", str(a.calib_samples), "-t", str(a.threads)])
                held = {float(m.group(1)): float(m.group(2)) for m in re.finditer(
                    r"at sparsity ([\d.]+) \(target density [\d.]+\):.*?weighted by weights ([\d.]+)",
                    p.stderr)}
                if method == "cats":
                    held = {float(m.group(1)): float(m.group(2)) for m in re.finditer(
                        r"at sparsity ([\d.]+) \(target density [\d.]+\): gate_act ([\d.]+)", p.stderr)}
                batch = {int(m.group(1)): float(m.group(2))
                         for m in re.finditer(r"b=(\d+) ([\d.]+)", p.stderr)}
                res[key] = {"heldout": held, "batch": batch}
                save()
                print(f"{key}: {res[key]}", file=sys.stderr, flush=True)
            for level in [None] + LEVELS:
                if level is None and method != METHODS[0]:
                    continue  # dense once per format
                qkey = f"quality/{fmt}/{method if level is not None else 'dense'}/{level}"
                if qkey not in res:
                    res[qkey] = perplexity(sq, f, base_logits, a.chunks, level)
                    save()
                    print(f"{qkey}: {res[qkey]}", file=sys.stderr, flush=True)
                if a.hellaswag_tasks > 0 and hs_key not in res[qkey]:
                    res[qkey][hs_key] = hellaswag(sq, f, a.hellaswag_tasks, a.threads, level)
                    save()
                    print(f"{qkey} {hs_key}: {res[qkey][hs_key]}", file=sys.stderr, flush=True)
            if method == "teal":
                for level in HEAD_LEVELS:
                    qkey = f"quality/{fmt}/teal+head/{level}"
                    if qkey not in res:
                        res[qkey] = perplexity(sq, f, base_logits, a.chunks, level, level)
                        save()
                        print(f"{qkey}: {res[qkey]}", file=sys.stderr, flush=True)
                    if a.hellaswag_tasks > 0 and hs_key not in res[qkey]:
                        res[qkey][hs_key] = hellaswag(sq, f, a.hellaswag_tasks, a.threads,
                                                      level, level)
                        save()

        # ReLU-fication: no thresholds, one level (0).
        f = os.path.join(a.out, f"{fmt}-relu.gguf")
        files[(fmt, "relu")] = f
        key = f"sparsify/{fmt}/relu"
        if key not in res or not os.path.exists(f):
            p = run([sq, "sparsify", "-m", src, "-o", f, "--method", "relu",
                     "--calib-samples", str(a.calib_samples), "-t", str(a.threads)])
            m = re.search(r"at sparsity 0.00 \(target density 1.00\): gate_act ([\d.]+)", p.stderr)
            batch = {int(m2.group(1)): float(m2.group(2))
                     for m2 in re.finditer(r"b=(\d+) ([\d.]+)", p.stderr)}
            res[key] = {"heldout": {0.0: float(m.group(1))}, "batch": batch}
            save()
        qkey = f"quality/{fmt}/relu/0"
        if qkey not in res:
            res[qkey] = perplexity(sq, f, base_logits, a.chunks, 0)
            save()
            print(f"{qkey}: {res[qkey]}", file=sys.stderr, flush=True)
        if a.hellaswag_tasks > 0 and hs_key not in res[qkey]:
            res[qkey][hs_key] = hellaswag(sq, f, a.hellaswag_tasks, a.threads, 0)
            save()

    if not a.no_speed:
        llama = {}
        if not a.no_llamacpp:
            import llama_cpp
            res["llama_cpp_build"] = vs.llama_build_info(llama_cpp)
        samples = {}
        reads = res.setdefault("block_read", {})
        for rnd in range(a.rounds):
            for fmt in a.formats:
                f = files[(fmt, METHODS[0])]
                if not a.no_llamacpp:
                    if fmt not in llama:
                        llama[fmt] = vs.LlamaSide(llama_cpp, f, 256, 256, a.threads)
                    t = llama[fmt].run([("tg", 128)], a.reps, 1234 + rnd)["tg128"]
                    samples.setdefault(f"{fmt}/llama.cpp", []).append(t)
                samples.setdefault(f"{fmt}/dense", []).append(tg128(sq, f, a.reps, None))
                for method in METHODS:
                    for level in LEVELS:
                        key = f"{fmt}/{method}/{level}"
                        samples.setdefault(key, []).append(
                            tg128(sq, files[(fmt, method)], a.reps, level, None, reads, key))
                for level in HEAD_LEVELS:
                    key = f"{fmt}/teal+head/{level}"
                    samples.setdefault(key, []).append(
                        tg128(sq, files[(fmt, "teal")], a.reps, level, level, reads, key))
                samples.setdefault(f"{fmt}/relu/0", []).append(
                    tg128(sq, files[(fmt, "relu")], a.reps, 0, None, reads, f"{fmt}/relu/0"))
                # Dense again at the end of the round: the round's reference speed is the
                # geometric mean of the two (the host's speed drifts within a round).
                samples.setdefault(f"{fmt}/dense_end", []).append(tg128(sq, f, a.reps, None))
            print(f"speed round {rnd + 1}/{a.rounds}", file=sys.stderr, flush=True)
        res["tg128"] = {k: statistics.median(v) for k, v in samples.items()}
        res["tg128_samples"] = samples
        save()

    tg = res.get("tg128", {})
    block_read = res.get("block_read", {})
    smp = res.get("tg128_samples", {})

    def speedup(key, fmt, ref):
        """Median over rounds of key's speed over the reference's in the same round (ref
        'dense': the geometric mean of dense at the start and the end of the round), with the
        rounds' range: '1.52x (1.40-1.71)'."""
        s = smp.get(key)
        if ref == "dense":
            d0, d1 = smp.get(f"{fmt}/dense"), smp.get(f"{fmt}/dense_end")
            r = [(x * y) ** 0.5 for x, y in zip(d0, d1)] if d0 and d1 else d0
        else:
            r = smp.get(f"{fmt}/{ref}")
        if not s or not r or len(s) != len(r):
            return "-"
        q = [x / y for x, y in zip(s, r)]
        return f"{statistics.median(q):.2f}x ({min(q):.2f}-{max(q):.2f})"

    for fmt in a.formats:
        dense_q = res[f"quality/{fmt}/dense/None"]
        d_tg, l_tg = tg.get(f"{fmt}/dense"), tg.get(f"{fmt}/llama.cpp")
        f1 = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
        fhs = lambda q: f"{q[hs_key]['acc']:.1f}" if hs_key in q else "not measured"
        print(f"\n{fmt} (llama.cpp dense tg128 {f1(l_tg, 0)} t/s)\n")
        print("| method | target sparsity | density (held-back valid) | density (test) | "
              f"block weights read | head read | PPL | mean KLD | top-1 % | "
              f"HellaSwag {hs_key[len('hellaswag'):]} acc % | tg128 t/s | "
              "vs dense squeeze | vs dense llama.cpp |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        print(f"| dense | 0 | 1 | 1 | 1 | 1 | {dense_q['ppl']:.3f} | {dense_q['kld']:.4f} | "
              f"{dense_q['top1']:.2f} | {fhs(dense_q)} | {f1(d_tg, 0)} | 1.00x | "
              f"{speedup(f'{fmt}/dense', fmt, 'llama.cpp')} |")
        def row(name, level, held, q, head, key):
            read = block_read.get(key)
            print(f"| {name} | {level} | {f1(held, 3)} | {q['density']:.3f} | {f1(read, 2)} | "
                  f"{head} | {q['ppl']:.3f} | {q['kld']:.4f} | {q['top1']:.2f} | {fhs(q)} | "
                  f"{f1(tg.get(key), 0)} | {speedup(key, fmt, 'dense')} | "
                  f"{speedup(key, fmt, 'llama.cpp')} |")

        for method in METHODS:
            sp = res[f"sparsify/{fmt}/{method}"]
            for level in LEVELS:
                q = res[f"quality/{fmt}/{method}/{level}"]
                held = sp["heldout"].get(str(level), sp["heldout"].get(level))
                label = "teal (greedy)" if method == "teal-greedy" else method
                row(label, level, held, q, 1, f"{fmt}/{method}/{level}")
            if method != "teal":
                continue
            for level in HEAD_LEVELS:
                q = res.get(f"quality/{fmt}/teal+head/{level}")
                if q is None:
                    continue
                held = sp["heldout"].get(str(level), sp["heldout"].get(level))
                row("teal + head", level, held, q, f"{q['head_density']:.2f}",
                    f"{fmt}/teal+head/{level}")
        q = res[f"quality/{fmt}/relu/0"]
        held = list(res[f"sparsify/{fmt}/relu"]["heldout"].values())[0]
        row("relu (no thresholds)", "-", held, q, 1, f"{fmt}/relu/0")
        print("\ndensity of the union over a batch of b tokens at sparsity 0.5 (held-back valid):\n")
        bs = sorted({int(b) for m in METHODS + ["relu"] for b in res[f"sparsify/{fmt}/{m}"]["batch"]})
        print("| method | " + " | ".join(f"b={b}" for b in bs) + " |")
        print("|---|" + "---|" * len(bs))
        for method in METHODS + ["relu"]:
            bd = res[f"sparsify/{fmt}/{method}"]["batch"]
            print(f"| {method} | " + " | ".join(f1(bd.get(str(b), bd.get(b)), 3) for b in bs) + " |")


if __name__ == "__main__":
    main()
