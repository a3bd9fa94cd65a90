#!/usr/bin/env python3
"""The KV-cache table of docs/KVCACHE.md: perplexity at a long context with each KV storage,
squeeze's (`squeeze perplexity --kv-type ...`, evaluated in batches of --batch tokens so every
position reads the codes of the blocks before its recent window, as a decode would) beside
llama.cpp's own (`llama-perplexity -ctk/-ctv`, flash attention on, which its quantized V cache
needs; tools/build_llamacpp.sh builds it). Same text (WikiText-2 test), same chunks of --ctx
tokens, the second half of each scored.

With --set evict, the token-eviction table instead: each policy (`--kv-evict`) at budgets of
50%, 25% and 12.5% of --ctx, beside the f16 cache that keeps every token; every --batch tokens
a sequence past its budget is cut back to it.

Rows with `--kv-codebook` first fit the codebook (`squeeze calibrate-kv`, on WikiText-2
validation: 32 windows of 512 tokens, the row's options but its recent window) into a copy of
the model under --out, then run on that copy.

Results are cached per row in --out/results.json; an interrupted run resumes.

Usage: bench/kv_table.py [--set kv|evict] [--ctx 4096] [--chunks 10] [--batch 64] [--threads 2]
                         [--only LABEL...] [--out bench/out/kv] [--table-only]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST = os.path.join(ROOT, "..", "shared", "data", "wikitext-2-raw", "wiki.test.raw")
VALID = os.path.join(ROOT, "..", "shared", "data", "wikitext-2", "valid.txt")  # calibration text
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
LLAMA = os.path.join(ROOT, "tools", ".llamacpp", "build", "bin", "llama-perplexity")


EVICT_POLICIES = ("streaming", "h2o", "snapkv", "vatp", "a2sf", "keyformer")
EVICT_BUDGETS = ("0.5", "0.25", "0.125")


def evict_rows():
    """The eviction table's rows: f16 with every token, then each budget and policy."""
    out = [("f16", "squeeze", "f16, every token", ["--kv-type", "f16"])]
    for b in EVICT_BUDGETS:
        for p in EVICT_POLICIES:
            out.append((f"evict-{p}-{b}", "squeeze", f"{p}, budget {float(b) * 100:g}%",
                        ["--kv-evict", p, "--kv-budget", b]))
    return out


def rows():
    """(label, engine, description, extra args) in table order."""
    out = [("f16", "squeeze", "f16", ["--kv-type", "f16"])]
    for t in ("q8", "q4", "q2"):
        out.append((f"{t}-r128", "squeeze", f"{t}, keys per channel, values per token, g64, R 128",
                    ["--kv-type", t, "--kv-recent", "128"]))
    out.append(("q4-token-r128", "squeeze", "q4, keys per token (as values), g64, R 128",
                ["--kv-type", "q4", "--kv-k-axis", "token", "--kv-recent", "128"]))
    out.append(("q2-g32-r128", "squeeze", "q2, keys per channel, g32, R 128",
                ["--kv-type", "q2", "--kv-group", "32", "--kv-recent", "128"]))
    out.append(("q4-r0", "squeeze", "q4, keys per channel, g64, no f16 window",
                ["--kv-type", "q4", "--kv-recent", "0"]))
    # The first block (BOS, the attention sink) kept in half.
    out.append(("q4-r128-s64", "squeeze", "q4, keys per channel, g64, R 128, sinks 64",
                ["--kv-type", "q4", "--kv-recent", "128", "--kv-sinks", "64"]))
    out.append(("q2-g32-r128-s32", "squeeze", "q2, keys per channel, g32, R 128, sinks 32",
                ["--kv-type", "q2", "--kv-group", "32", "--kv-recent", "128", "--kv-sinks", "32"]))
    # 1% of each frozen block's keys and values kept aside in half (KVQuant's dense-and-sparse).
    out.append(("q4-r128-o1", "squeeze", "q4, keys per channel, g64, R 128, outliers 1%",
                ["--kv-type", "q4", "--kv-recent", "128", "--kv-outliers", "0.01"]))
    # q2 g32 with 32 sinks, and KVQuant's levers: outliers, keys before RoPE.
    q2 = ["--kv-type", "q2", "--kv-group", "32", "--kv-recent", "128", "--kv-sinks", "32"]
    for label, desc, extra in (("o1", "outliers 1%", ["--kv-outliers", "0.01"]),
                               ("o2", "outliers 2%", ["--kv-outliers", "0.02"]),
                               ("pre", "keys before RoPE", ["--kv-k-prerope"]),
                               ("pre-o2", "keys before RoPE, outliers 2%", ["--kv-k-prerope", "--kv-outliers", "0.02"])):
        out.append((f"q2-g32-r128-s32-{label}", "squeeze",
                    f"q2, keys per channel, g32, R 128, sinks 32, {desc}", q2 + extra))
    # A calibrated codebook (squeeze calibrate-kv) in place of the uniform grid.
    for label, desc, extra in (("q4-r128-s64-cb", "q4, keys per channel, g64, R 128, sinks 64, codebook",
                                ["--kv-type", "q4", "--kv-recent", "128", "--kv-sinks", "64"]),
                               ("q2-g32-r128-s32-cb", "q2, keys per channel, g32, R 128, sinks 32, codebook", q2),
                               ("q2-g32-r128-s32-pre-o2-cb",
                                "q2, keys per channel, g32, R 128, sinks 32, keys before RoPE, outliers 2%, codebook",
                                q2 + ["--kv-k-prerope", "--kv-outliers", "0.02"])):
        out.append((label, "squeeze", desc, extra + ["--kv-codebook"]))
    for t in ("f16", "q8_0", "q4_0"):
        out.append((f"llama-{t}", "llama.cpp", f"llama.cpp -ctk {t} -ctv {t} -fa on",
                    ["-ctk", t, "-ctv", t, "-fa", "on"]))
    return out


def codebook_model(args, label, extra):
    """A copy of the model with the codebook of the row's options (its recent window aside)."""
    path = os.path.join(args.out, f"codebook-{label}.gguf")
    if not os.path.exists(path):
        kv = [a for a in extra if a != "--kv-codebook"]
        if "--kv-recent" in kv:
            i = kv.index("--kv-recent")
            del kv[i:i + 2]
        cmd = [os.path.join(ROOT, "build", "squeeze"), "calibrate-kv", "-m", MODEL, "-f", VALID,
               "--samples", "32", "--ctx", "512", "-t", str(args.threads), "-o", path] + kv
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{(p.stdout + p.stderr)[-2000:]}")
        print(p.stdout.splitlines()[0], file=sys.stderr)
    return path


def measure(args, label, engine, extra):
    if engine == "squeeze":
        model = codebook_model(args, label, extra) if "--kv-codebook" in extra else MODEL
        cmd = [os.path.join(ROOT, "build", "squeeze"), "perplexity", "-m", model, "-f", TEST,
               "--ctx", str(args.ctx), "--chunks", str(args.chunks), "-b", str(args.batch),
               "-t", str(args.threads)] + extra
    else:
        cmd = [LLAMA, "-m", MODEL, "-f", TEST, "-c", str(args.ctx), "--chunks", str(args.chunks),
               "-t", str(args.threads), "-b", str(args.ctx)] + extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    text = p.stdout + p.stderr
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{text[-2000:]}")
    m = re.findall(r"PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
    if not m:
        sys.exit(f"no PPL in the output of {' '.join(cmd)}\n{text[-2000:]}")
    r = {"ppl": float(m[-1][0]), "ppl_err": float(m[-1][1]), "seconds": time.time() - t0,
         "command": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)}
    kv = re.search(r"KV cache .*: ([0-9.]+) bytes per token in codes \(f16: ([0-9]+)\)", text)
    if kv:
        r["bytes_per_token"], r["f16_bytes_per_token"] = float(kv.group(1)), int(kv.group(2))
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("kv", "evict"), default="kv")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "kv"))
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"results_ctx{args.ctx}_chunks{args.chunks}_b{args.batch}.json")
    results = json.load(open(path)) if os.path.exists(path) else {}
    table = rows() if args.set == "kv" else evict_rows()
    for label, engine, desc, extra in table:
        if args.table_only or label in results or (args.only and label not in args.only):
            continue
        print(f"{label} ...", file=sys.stderr, flush=True)
        results[label] = measure(args, label, engine, extra) | {"engine": engine, "description": desc}
        with open(path + ".tmp", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(path + ".tmp", path)
    base = results.get("f16", {}).get("ppl")
    if args.set == "evict":
        print(f"| eviction | PPL (ctx {args.ctx}, {args.chunks} chunks, -b {args.batch}) | vs every token | seconds |")
        print("|---|---|---|---|")
        for label, _, desc, _ in table:
            r = results.get(label)
            if r:
                rel = f"{100 * (r['ppl'] / base - 1):+.2f}%" if base else ""
                print(f"| {desc} | {r['ppl']:.4f} ± {r['ppl_err']:.4f} | {rel} | {r['seconds']:.0f} |")
        return
    print(f"| KV cache | PPL (ctx {args.ctx}, {args.chunks} chunks) | vs squeeze f16 | bytes/token | smaller |")
    print("|---|---|---|---|---|")
    for label, engine, desc, _ in rows():
        r = results.get(label)
        if not r:
            continue
        rel = f"{100 * (r['ppl'] / base - 1):+.2f}%" if base else ""
        bpt = r.get("bytes_per_token")
        size = f"{bpt:.0f} | {r['f16_bytes_per_token'] / bpt:.2f}x" if bpt else " | "
        print(f"| {desc} | {r['ppl']:.4f} ± {r['ppl_err']:.4f} | {rel} | {size} |")


if __name__ == "__main__":
    main()
