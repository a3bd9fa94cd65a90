#!/usr/bin/env python3
"""Two squeeze binaries (or two sets of flags) on the same model, interleaved: A, B, A, B, ...

Each round runs `A bench ARGS --json` then `B bench ARGS --json` (the same bench arguments, plus
--a-args / --b-args for each side) and records every test's avg_ts. Reported per test: each
side's median over rounds and the median over rounds of the ratio B / A within the round, with
the rounds' range (the host's speed drifts between rounds; a within-round ratio does not).

  bench/ab_bench.py --a OLD/squeeze --b NEW/squeeze [--rounds 7] [--b-args ...] -- -m MODEL -p 0 -n 128 -r 3
"""

import argparse
import json
import shlex
import statistics
import subprocess
import sys


def bench(exe, args):
    cmd = [exe, "bench"] + args + ["--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed: {p.stderr.strip()[-400:]}")
    return {r["test"]: r["avg_ts"] for r in json.loads(p.stdout)["results"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="squeeze binary A (the reference)")
    ap.add_argument("--b", required=True, help="squeeze binary B")
    ap.add_argument("--a-args", default="", help="extra bench arguments for A only")
    ap.add_argument("--b-args", default="", help="extra bench arguments for B only")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then squeeze bench arguments")
    a = ap.parse_args()
    if a.rounds < 1:
        sys.exit("error: --rounds must be >= 1")
    args = a.bench_args[1:] if a.bench_args[:1] == ["--"] else a.bench_args
    sa, sb = {}, {}
    for rnd in range(a.rounds):
        ra = bench(a.a, args + shlex.split(a.a_args))
        rb = bench(a.b, args + shlex.split(a.b_args))
        for k, v in ra.items():
            sa.setdefault(k, []).append(v)
        for k, v in rb.items():
            sb.setdefault(k, []).append(v)
        print(f"round {rnd + 1}/{a.rounds}: " + "  ".join(
            f"{k} {ra[k]:.1f} / {rb.get(k, float('nan')):.1f}" for k in ra), file=sys.stderr)
    print(f"A: {a.a} {a.a_args}\nB: {a.b} {a.b_args}\nbench {' '.join(args)}, {a.rounds} rounds\n")
    print("| test | A t/s | B t/s | B / A (range) |\n|---|---:|---:|---:|")
    for k in sa:
        q = [y / x for x, y in zip(sa[k], sb.get(k, []))]
        if not q:
            continue
        print(f"| {k} | {statistics.median(sa[k]):.1f} | {statistics.median(sb[k]):.1f} | "
              f"{statistics.median(q):.3f} ({min(q):.3f}-{max(q):.3f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
