#!/usr/bin/env python3
"""The accuracy / size / speed table of docs/QUANTIZATION.md: quantizes the base model with each
method x bits x group size, then measures every file the same way:

  * PPL, mean KLD and top-1 agreement against the base model with `squeeze perplexity
    --kl-divergence` on the first --chunks chunks of wiki.test.raw (ctx 512);
  * tg128 tokens/s with `squeeze bench -p 0 -n 128` per storage layout (the method does not
    change the kernels): one file per layout is kept and all are benchmarked in interleaved
    rounds at the end (median over --rounds of each round's median of --reps), so run that
    phase on a quiet machine;
  * bits per quantized weight and the quantize wall time from `squeeze quantize`'s summary;
  * HellaSwag accuracy (%) with `squeeze hellaswag --tasks N` (N = --hellaswag-tasks, 1000:
    the first N tasks of llama-perplexity's random order); --hellaswag-tasks 0 skips it, and a
    cell measured without it shows "not measured".

Results are cached per cell in --out (JSON), so an interrupted run resumes where it stopped.

Usage: bench/quant_table.py [--squeeze build/squeeze] [--model BASE] [--chunks 40] [--calib-samples 128]
                            [--hellaswag-tasks 1000]
                            [--only LABEL...] [--out bench/out/quant_table]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

from hellaswag_vs_llamacpp import squeeze_hellaswag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST = os.path.join(ROOT, "..", "shared", "data", "wikitext-2-raw", "wiki.test.raw")
BASE = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def cells(samples):
    out = []
    for bits in (2, 3, 4):
        for group in (32, 128):
            common = ["--bits", str(bits), "--group-size", str(group)]
            tag = f"{bits}b-g{group}"
            out.append((f"rtn-absmax-{tag}", "RTN absmax", bits, group, ["--method", "rtn"] + common))
            out.append((f"rtn-mse-{tag}", "RTN mse", bits, group,
                        ["--method", "rtn", "--scale", "mse"] + common))
            g = ["--method", "gptq", "--calib-samples", str(samples)] + common
            out.append((f"gptq-{tag}", "GPTQ", bits, group, g))
            out.append((f"gptq-act-{tag}", "GPTQ act-order", bits, group,
                        g + ["--act-order", "--static-groups"]))
    # The defaults of `squeeze quantize` (128 samples) on one cell, against the table's count.
    out.append(("gptq-3b-g128-128s", "GPTQ", 3, 128,
                ["--method", "gptq", "--calib-samples", "128", "--bits", "3", "--group-size", "128"]))
    # Symmetric 4-bit g32 is stored as q4_0: what llama.cpp loads unchanged.
    out.append(("rtn-absmax-4b-g32-sym", "RTN absmax sym (q4_0)", 4, 32,
                ["--method", "rtn", "--bits", "4", "--group-size", "32", "--sym"]))
    out.append(("gptq-4b-g32-sym", "GPTQ sym (q4_0)", 4, 32,
                ["--method", "gptq", "--calib-samples", str(samples), "--bits", "4",
                 "--group-size", "32", "--sym"]))
    return out


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p


def measure(sq, model, base_logits, chunks):
    p = run([sq, "perplexity", "-m", model, "-f", TEST, "--chunks", str(chunks),
             "--kl-divergence", base_logits])
    txt = p.stdout + p.stderr
    ppl = float(re.search(r"PPL\(model\)\s+([\d.]+)", txt).group(1))
    kld = float(re.search(r"Mean KLD\s+([\d.]+)", txt).group(1))
    top1 = float(re.search(r"Same top-1\s+([\d.]+)", txt).group(1))
    return {"ppl": ppl, "kld": kld, "top1": top1, "file_mib": os.path.getsize(model) / 2**20}


def layout(args):
    """The storage layout a cell's arguments give (what the speed depends on)."""
    v = {k: n for k, n in zip(args, args[1:] + [""]) if k.startswith("--")}
    return f"{v['--bits']}b-g{v['--group-size']}" + ("-sym" if "--sym" in args else "")


def tg128(sq, model, reps):
    b = json.loads(run([sq, "bench", "-m", model, "-p", "0", "-n", "128", "-r", str(reps),
                        "--json"]).stdout)
    return b["results"][0]["median_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--squeeze", default=os.path.join(ROOT, "build", "squeeze"))
    ap.add_argument("--model", default=BASE, help="the base model (default SmolLM2's Q4_1 file)")
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--calib-samples", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-speed", action="store_true", help="skip the speed phase")
    ap.add_argument("--keep", action="store_true", help="keep every cell's file (LABEL.gguf)")
    ap.add_argument("--hellaswag-tasks", type=int, default=1000,
                    help="HellaSwag column on the first N tasks (0: skip it)")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "quant_table"))
    a = ap.parse_args()
    base = a.model
    os.makedirs(a.out, exist_ok=True)
    base_logits = os.path.join(a.out, f"base-{a.chunks}.logits")
    res_path = os.path.join(a.out, "results.json")
    res = json.load(open(res_path)) if os.path.exists(res_path) else {}

    if "base" not in res or not os.path.exists(base_logits):
        run([a.squeeze, "perplexity", "-m", base, "-f", TEST, "--chunks", str(a.chunks),
             "--save-logits", base_logits])
        res["base"] = measure(a.squeeze, base, base_logits, a.chunks)
        json.dump(res, open(res_path, "w"), indent=1)
    hs_key = f"hellaswag{a.hellaswag_tasks}"
    if a.hellaswag_tasks > 0 and hs_key not in res["base"]:
        res["base"][hs_key] = squeeze_hellaswag(a.squeeze, base, a.hellaswag_tasks)
        json.dump(res, open(res_path, "w"), indent=1)
    for label, method, bits, group, args in cells(a.calib_samples):
        if a.only and label not in a.only:
            continue
        if label in res:
            # A cell measured before the HellaSwag column: its kept layout file (RTN cells are
            # deterministic) or, failing that, the cell quantized again.
            if a.hellaswag_tasks > 0 and hs_key not in res[label]:
                path = os.path.join(a.out, label + ".gguf")
                if not os.path.exists(path):
                    run([a.squeeze, "quantize", "-m", base, "-o", path] + res[label]["args"])
                res[label][hs_key] = squeeze_hellaswag(a.squeeze, path, a.hellaswag_tasks)
                json.dump(res, open(res_path, "w"), indent=1)
                if not a.keep:
                    os.remove(path)
            continue
        path = os.path.join(a.out, label + ".gguf")
        t0 = time.time()
        p = run([a.squeeze, "quantize", "-m", base, "-o", path] + args)
        secs = time.time() - t0
        bpw = float(re.search(r"([\d.]+) bits per quantized weight", p.stderr).group(1))
        r = measure(a.squeeze, path, base_logits, a.chunks)
        if a.hellaswag_tasks > 0:
            r[hs_key] = squeeze_hellaswag(a.squeeze, path, a.hellaswag_tasks)
        r.update({"method": method, "bits": bits, "group": group, "bpw": bpw,
                  "quantize_s": secs, "args": args, "layout": layout(args)})
        err = re.search(r"gptq ([\d.e-]+), rtn ([\d.e-]+)", p.stderr)
        if err:
            r["rel_err_gptq"], r["rel_err_rtn"] = float(err.group(1)), float(err.group(2))
        res[label] = r
        json.dump(res, open(res_path, "w"), indent=1)
        keep = os.path.join(a.out, "layout-" + r["layout"] + ".gguf")
        if os.path.exists(keep):
            if not a.keep:
                os.remove(path)
        else:
            os.rename(path, keep)
        print(f"{label}: {r}", file=sys.stderr, flush=True)

    if not a.no_speed:
        files = {"base": base}
        for f in sorted(os.listdir(a.out)):
            if f.startswith("layout-") and f.endswith(".gguf"):
                files[f[len("layout-"):-len(".gguf")]] = os.path.join(a.out, f)
        speeds = {k: [] for k in files}
        for rnd in range(a.rounds):
            for k, f in files.items():
                speeds[k].append(tg128(a.squeeze, f, a.reps))
            print(f"speed round {rnd + 1}/{a.rounds}", file=sys.stderr, flush=True)
        res["tg128"] = {k: sorted(v)[len(v) // 2] for k, v in speeds.items()}
        json.dump(res, open(res_path, "w"), indent=1)

    b = res["base"]
    speed = res.get("tg128", {})
    fmt_tg = lambda k: f"{speed[k]:.0f}" if k in speed else "-"
    fmt_hs = lambda r: f"{r[hs_key]['acc']:.1f}" if hs_key in r else "not measured"
    print(f"| method | bits | group | calib samples | bits/weight | file MiB | PPL | mean KLD | "
          f"top-1 % | HellaSwag {a.hellaswag_tasks} acc % | tg128 t/s | quantize s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| base ({os.path.basename(base)}) | | | | | {b['file_mib']:.1f} | {b['ppl']:.3f} | 0 | 100 | "
          f"{fmt_hs(b)} | {fmt_tg('base')} | |")
    for label, *_ in cells(a.calib_samples):
        if label not in res:
            continue
        r = res[label]
        v = {k: n for k, n in zip(r["args"], r["args"][1:] + [""]) if k.startswith("--")}
        samples = v.get("--calib-samples", "")
        print(f"| {r['method']} | {r['bits']} | {r['group']} | {samples} | {r['bpw']:.3f} | "
              f"{r['file_mib']:.1f} | {r['ppl']:.3f} | {r['kld']:.4f} | {r['top1']:.2f} | "
              f"{fmt_hs(r)} | {fmt_tg(r['layout'])} | {r['quantize_s']:.0f} |")


if __name__ == "__main__":
    main()
