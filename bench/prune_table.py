#!/usr/bin/env python3
"""The pruning table of docs/PRUNING.md: prunes the base model with each method x pattern
(`squeeze prune`), plus the dense references in the same storage, then measures every file
the same way as bench/quant_table.py:

  * PPL, mean KLD and top-1 agreement against the base model (`squeeze perplexity
    --kl-divergence`, the first --chunks chunks of wiki.test.raw, ctx 512);
  * the mean relative output error on the calibration inputs and the prune wall time, from
    `squeeze prune`'s summary;
  * HellaSwag accuracy (%) on the first --hellaswag-tasks tasks, in a second phase after every
    cell's PPL (the slow column: about 8 minutes a row on 2 idle threads), cells in table order.

Results are cached per cell in --out (JSON), so an interrupted run resumes where it stopped.

Usage: bench/prune_table.py [--squeeze build/squeeze] [--model BASE] [--chunks 40]
                            [--calib-samples 128] [--hellaswag-tasks 1000] [--only LABEL...]
                            [--out bench/out/prune_table] [--table-only]
"""
import argparse
import json
import os
import re
import sys
import time

from hellaswag_vs_llamacpp import squeeze_hellaswag
from quant_table import BASE, ROOT, TEST, measure, run


def cells(samples):
    """(label, command, description, args) of every row, in table order."""
    calib = ["--calib-samples", str(samples)]
    out = [("dense-q8_0", "quantize", "dense, q8_0 (the pruned rows' storage)",
            ["--method", "rtn", "--bits", "8", "--sym"])]
    for pattern, pargs in (("50%", ["--sparsity", "0.5"]), ("2:4", ["--pattern", "2:4"]),
                           ("4:8", ["--pattern", "4:8"])):
        tag = pattern.replace("%", "").replace(":", "of")
        for method in ("magnitude", "wanda", "sparsegpt"):
            out.append((f"{method}-{tag}", "prune", f"{method} {pattern}, q8_0",
                        ["--method", method] + pargs + (calib if method != "magnitude" else [])))
    q4 = ["--bits", "4", "--group-size", "32"]
    out.append(("gptq-q4_0", "quantize", "GPTQ 4-bit g32 sym (q4_0), dense",
                ["--method", "gptq", "--sym"] + q4 + calib))
    out.append(("sparsegpt-50-q4_0", "prune", "sparsegpt 50% joint with 4-bit g32 (q4_0)",
                ["--method", "sparsegpt", "--sparsity", "0.5"] + q4 + calib))
    for method in ("magnitude", "wanda", "sparsegpt"):
        out.append((f"{method}-16of32", "prune", f"{method} 16:32, q8_0",
                    ["--method", method, "--pattern", "16:32"] + (calib if method != "magnitude" else [])))
    out.append(("wanda-50-q4_0", "prune", "wanda 50% then RTN 4-bit g32 (q4_0)",
                ["--method", "wanda", "--sparsity", "0.5"] + q4 + calib))
    for method in ("wanda", "sparsegpt"):
        out.append((f"{method}-50-owl", "prune", f"{method} 50% OWL (M 5, lambda 0.08), q8_0",
                    ["--method", method, "--sparsity", "0.5", "--owl"] + calib))
    # Structured, about 20% of the parameters each (docs/PRUNING.md): FFN neurons by each
    # criterion, whole layers by block influence; KV groups (a third: 6.6%) beside them.
    for method in ("magnitude", "wanda", "flap", "taylor"):
        out.append((f"ffn35-{method}", "prune", f"{method}: 35% of the FFN neurons (n_ff 992)",
                    ["--method", method, "--structure", "ffn", "--sparsity", "0.35"] +
                    (calib if method != "magnitude" else [])))
    out.append(("layers8-bi", "prune", "ShortGPT block influence: 8 of 30 layers",
                ["--method", "bi", "--structure", "layers", "--sparsity", "0.267"] + calib))
    for method in ("magnitude", "wanda", "flap"):
        out.append((f"heads33-{method}", "prune", f"{method}: 1 of 3 KV groups (3 of 9 heads)",
                    ["--method", method, "--structure", "heads", "--sparsity", "0.34"] +
                    (calib if method != "magnitude" else [])))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--squeeze", default=os.path.join(ROOT, "build", "squeeze"))
    ap.add_argument("--model", default=BASE)
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--calib-samples", type=int, default=128)
    ap.add_argument("--hellaswag-tasks", type=int, default=1000,
                    help="HellaSwag column on the first N tasks (0: skip it)")
    ap.add_argument("--keep", action="store_true", help="keep every cell's file (LABEL.gguf)")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--table-only", action="store_true",
                    help="print the table of the cached results, measuring nothing")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "prune_table"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    base_logits = os.path.join(a.out, f"base-{a.chunks}.logits")
    res_path = os.path.join(a.out, "results.json")
    res = json.load(open(res_path)) if os.path.exists(res_path) else {}
    save = lambda: json.dump(res, open(res_path, "w"), indent=1)
    if "base" not in res or not os.path.exists(base_logits):
        run([a.squeeze, "perplexity", "-m", a.model, "-f", TEST, "--chunks", str(a.chunks),
             "--save-logits", base_logits])
        res["base"] = measure(a.squeeze, a.model, base_logits, a.chunks)
        save()
    chosen = [c for c in cells(a.calib_samples) if not a.only or c[0] in a.only]
    if a.table_only:
        chosen = []

    def make(label, command, args):
        path = os.path.join(a.out, label + ".gguf")
        if not os.path.exists(path):
            t0 = time.time()
            p = run([a.squeeze, command, "-m", a.model, "-o", path] + args)
            return path, time.time() - t0, p.stderr
        return path, None, ""

    for label, command, desc, args in chosen:  # phase 1: the files and their PPL
        if label in res:
            continue
        path, secs, err = make(label, command, args)
        r = measure(a.squeeze, path, base_logits, a.chunks)
        r.update({"desc": desc, "command": command, "args": args, "seconds": secs})
        e = re.search(r"calibration inputs: \w+ ([\d.e-]+), (\w+) ([\d.e-]+)", err)
        if e:
            r["rel_err"], r["rel_err_base"] = float(e.group(1)), float(e.group(3))
        e = re.search(r"([\d.]+)% of the parameters removed", err)
        if e:
            r["params_removed"] = float(e.group(1))
        res[label] = r
        save()
        print(f"{label}: {r}", file=sys.stderr, flush=True)
    hs_key = f"hellaswag{a.hellaswag_tasks}"
    if a.hellaswag_tasks > 0 and not a.table_only:  # phase 2: HellaSwag, base and the 50% rows first
        first = ("base", "magnitude-50", "wanda-50", "sparsegpt-50", "gptq-q4_0",
                 "sparsegpt-50-q4_0")
        order = sorted([("base", None, None, None)] + chosen,
                       key=lambda c: first.index(c[0]) if c[0] in first else len(first))
        for label, command, _, args in order:
            if hs_key in res[label]:
                continue
            path = a.model if label == "base" else make(label, command, args)[0]
            res[label][hs_key] = squeeze_hellaswag(a.squeeze, path, a.hellaswag_tasks)
            save()
            print(f"{label}: HellaSwag {res[label][hs_key]}", file=sys.stderr, flush=True)
    if not a.keep:
        for label, *_ in chosen:
            path = os.path.join(a.out, label + ".gguf")
            if os.path.exists(path):
                os.remove(path)

    b = res["base"]
    fmt_hs = lambda r: f"{r[hs_key]['acc']:.1f}" if hs_key in r else "not measured"
    gap = lambda ppl, mag: f"{100 * (mag - ppl) / (mag - b['ppl']):.0f}" if mag else ""
    print(f"| model | file MiB | PPL | mean KLD | top-1 % | HellaSwag {a.hellaswag_tasks} acc % "
          "| rel. output error (baseline) | magnitude's gap closed % | prune s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| base ({os.path.basename(a.model)}) | {b['file_mib']:.1f} | {b['ppl']:.3f} | 0 | "
          f"100 | {fmt_hs(b)} | | | |")
    for label, *_ in cells(a.calib_samples):
        if label not in res:
            continue
        r = res[label]
        mag = None
        for method in ("wanda", "sparsegpt"):
            if label.startswith(method + "-") and not label.endswith("q4_0"):
                mag = res.get("magnitude-" + label[len(method) + 1:].replace("-owl", ""),
                              {}).get("ppl")
        base_name = "rtn" if r["command"] == "quantize" else "magnitude"
        err = f"{r['rel_err']:.4f} ({base_name} {r['rel_err_base']:.4f})" if "rel_err" in r else ""
        secs = f"{r['seconds']:.0f}" if r.get("seconds") else ""
        desc = r["desc"] + (f" ({r['params_removed']:.1f}% of the parameters)" if "params_removed" in r else "")
        print(f"| {desc} | {r['file_mib']:.1f} | {r['ppl']:.3f} | {r['kld']:.4f} | "
              f"{r['top1']:.2f} | {fmt_hs(r)} | {err} | {gap(r['ppl'], mag)} | {secs} |")


if __name__ == "__main__":
    main()
