#!/usr/bin/env python3
"""HellaSwag task by task: squeeze's `hellaswag` against llama.cpp's own `llama-perplexity
--hellaswag` on the same model, task file and number of tasks.

Both draw their tasks the same way (std::mt19937 seeded with 1, uniform over the tasks left), so
the i-th task of one run is the i-th of the other. llama-perplexity prints only the running
accuracy after each task ("i<TAB>acc%<TAB>[lo%, hi%]", 8 decimals); the number correct after
task i is round(acc_i * i / 100), so task i was answered correctly iff that count grew. squeeze
prints the same lines and, with --per-task, its chosen ending and four scores.

Reported: the share of tasks with the same outcome (both right or both wrong); tasks both got
right have the same (gold) ending; of those both got wrong the ending may still differ, which
llama's output cannot show, so "same ending" is bounded: at least the both-right tasks, at most
all same-outcome tasks. With --exact-endings llama's chosen ending of every task is recovered
exactly: llama-perplexity runs three more times on copies of the file whose gold lines all say
0, 1 and 2 (the draw depends only on the number of tasks, so the order is the same): a task was
given ending k iff it is "right" in the run with gold k (3 if in none). Both accuracies and their
difference, and each run's wall time.

Usage:
  bench/hellaswag_vs_llamacpp.py [-m MODEL] [--tasks 1000] [--threads 2]
      [--llama tools/.llamacpp/build/bin/llama-perplexity] [--llama-args='-fa off']
      [--squeeze build/squeeze]
      [-f ../shared/data/hellaswag/hellaswag_val_full.txt] [--out bench/out/hellaswag]
      [--exact-endings] [--reuse]
Exit status 1 when agreement < --min-agreement (99.5) or |acc difference| > --max-acc-diff (0.3).
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE = re.compile(r"^(\d+)\t([\d.]+)%\t\[", re.M)


def find_shared(rel):
    """shared/data/REL in the first folder above the repository that holds it."""
    d = os.path.dirname(ROOT)
    while True:
        p = os.path.join(d, "shared", "data", rel)
        if os.path.exists(p) or os.path.dirname(d) == d:
            return p
        d = os.path.dirname(d)


def outcomes(text):
    """Per task (in run order) whether it was right, from the running-accuracy lines."""
    rows = [(int(i), float(acc)) for i, acc in LINE.findall(text)]
    if not rows:
        raise SystemExit("error: no per-task accuracy lines in the output")
    out, prev = [], 0
    for k, (i, acc) in enumerate(rows):
        if i != k + 1:
            raise SystemExit(f"error: task line {i} where {k + 1} was expected")
        n_correct = round(acc * i / 100)
        if n_correct - prev not in (0, 1):
            raise SystemExit(f"error: inconsistent running accuracy at task {i}")
        out.append(n_correct == prev + 1)
        prev = n_correct
    return out


def squeeze_hellaswag(sq, model, tasks=1000, threads=2, extra=()):
    """squeeze's HellaSwag accuracy (%) and standard error on the first `tasks` tasks of
    llama-perplexity's random order (the column of bench/quant_table.py and
    bench/sparsity_table.py)."""
    cmd = [sq, "hellaswag", "-m", model, "-f", find_shared("hellaswag/hellaswag_val_full.txt"),
           "--tasks", str(tasks), "-t", str(threads)] + list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    m = re.search(r"Final result: ([\d.]+) \+/- ([\d.]+) \((\d+) tasks", p.stdout)
    return {"acc": float(m.group(1)), "err": float(m.group(2)), "tasks": int(m.group(3))}


def run(cmd, log):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.time() - t0
    with open(log, "w") as f:
        f.write(" ".join(cmd) + f"\n# seconds {secs:.1f}\n--- stdout\n" + p.stdout +
                "\n--- stderr\n" + p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed ({p.returncode}); see {log}\n"
                         f"{p.stderr[-1500:]}")
    return p.stdout + "\n" + p.stderr, secs


def reuse_or_run(cmd, log, reuse):
    """With reuse, the output of an earlier run of exactly this command (its log) if any."""
    if reuse and os.path.exists(log):
        text = open(log).read()
        first, _, rest = text.partition("\n")
        m = re.search(r"^# seconds (\S+)$", rest, re.M)
        if first == " ".join(cmd) and m:
            print(f"reusing {log}", file=sys.stderr)
            return rest, float(m.group(1))
    return run(cmd, log)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model",
                    default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-f", "--file", default=find_shared("hellaswag/hellaswag_val_full.txt"))
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--squeeze", default=os.path.join(ROOT, "build", "squeeze"))
    ap.add_argument("--llama", default=os.path.join(ROOT, "tools", ".llamacpp", "build", "bin",
                                                    "llama-perplexity"),
                    help="llama-perplexity (tools/build_llamacpp.sh; LLAMACPP_ISA=avx2 for build-avx2)")
    ap.add_argument("--llama-args", default="",
                    help="extra llama-perplexity flags, e.g. --llama-args='-fa off' (no flash attention; "
                         "the = form, as the value starts with -)")
    ap.add_argument("--squeeze-args", default="", help="extra squeeze flags (e.g. '--act-sparsity 0.5')")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "hellaswag"))
    ap.add_argument("--exact-endings", action="store_true",
                    help="recover llama's chosen endings with 3 more runs (gold lines set to 0, 1, 2)")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse a run's output from --out when its command line is the same")
    ap.add_argument("--min-agreement", type=float, default=99.5)
    ap.add_argument("--max-acc-diff", type=float, default=0.3)
    a = ap.parse_args()
    for p in (a.model, a.file, a.squeeze, a.llama):
        if not os.path.exists(p):
            raise SystemExit(f"error: {p} not found")
    os.makedirs(a.out, exist_ok=True)

    per_task = os.path.join(a.out, "squeeze_per_task.tsv")
    sq_cmd = [a.squeeze, "hellaswag", "-m", a.model, "-f", a.file, "--tasks", str(a.tasks),
              "-t", str(a.threads), "--per-task", per_task] + a.squeeze_args.split()
    ll_cmd = [a.llama, "-m", a.model, "-f", a.file, "--hellaswag", "--hellaswag-tasks",
              str(a.tasks), "-t", str(a.threads), "-tb", str(a.threads)] + a.llama_args.split()
    sq_text, sq_s = reuse_or_run(sq_cmd, os.path.join(a.out, "squeeze.log"), a.reuse)
    ll_text, ll_s = reuse_or_run(ll_cmd, os.path.join(a.out, "llama.log"), a.reuse)
    sq, ll = outcomes(sq_text), outcomes(ll_text)
    if len(sq) != len(ll):
        raise SystemExit(f"error: squeeze ran {len(sq)} tasks, llama-perplexity {len(ll)}")
    n = len(sq)
    # squeeze's own table must agree with its running lines.
    rows = [l.split("\t") for l in open(per_task) if not l.startswith("#")]
    if [r[4] == "1" for r in rows] != sq:
        raise SystemExit("error: squeeze's --per-task table disagrees with its running lines")
    same = sum(x == y for x, y in zip(sq, ll))
    both_right = sum(x and y for x, y in zip(sq, ll))
    acc_sq, acc_ll = 100 * sum(sq) / n, 100 * sum(ll) / n
    diff = [(i + 1, rows[i][1]) for i in range(n) if sq[i] != ll[i]]

    print(f"tasks: {n} (random order, mt19937 seed 1), model {os.path.basename(a.model)}, "
          f"{a.threads} threads")
    print(f"squeeze accuracy:          {acc_sq:.2f}%  ({sum(sq)}/{n}, {sq_s:.0f} s)")
    print(f"llama-perplexity accuracy: {acc_ll:.2f}%  ({sum(ll)}/{n}, {ll_s:.0f} s)")
    print(f"accuracy difference:       {acc_sq - acc_ll:+.2f} points")
    print(f"same outcome:              {100 * same / n:.2f}%  ({same}/{n})")
    print(f"same ending:               between {100 * both_right / n:.2f}% (both right) and "
          f"{100 * same / n:.2f}% (llama's output shows only right/wrong)")
    if a.exact_endings:
        lines = open(a.file).read().split("\n")
        right_with = []
        for k in range(3):
            path = os.path.join(a.out, f"gold{k}.txt")
            with open(path, "w") as f:
                f.write("\n".join(str(k) if i % 6 == 1 else l for i, l in enumerate(lines)))
            cmd = ll_cmd[:]
            cmd[cmd.index(a.file)] = path
            text, _ = reuse_or_run(cmd, os.path.join(a.out, f"llama_gold{k}.log"), a.reuse)
            right_with.append(outcomes(text))
        ll_end = [next((k for k in range(3) if right_with[k][i]), 3) for i in range(n)]
        # Consistency: the gold run's outcomes follow from the endings recovered.
        golds = [int(r[2]) for r in rows]
        if [ll_end[i] == golds[i] for i in range(n)] != ll:
            raise SystemExit("error: llama's recovered endings disagree with its gold run")
        sq_end = [int(r[3]) for r in rows]
        same_end = sum(x == y for x, y in zip(sq_end, ll_end))
        print(f"same ending (exact):       {100 * same_end / n:.2f}%  ({same_end}/{n})")
        diff_end = [(i + 1, rows[i][1], sq_end[i], ll_end[i]) for i in range(n)
                    if sq_end[i] != ll_end[i]]
        if diff_end:
            print("differing endings (run position, file index, squeeze, llama): " +
                  ", ".join(f"{i}:{t}:{x}:{y}" for i, t, x, y in diff_end[:50]))
        same = same_end  # the acceptance figure: same ending
    if diff:
        print("differing tasks (run position, file index): " +
              ", ".join(f"{i}:{t}" for i, t in diff[:50]))
    ok = 100 * same / n >= a.min_agreement and abs(acc_sq - acc_ll) <= a.max_acc_diff
    print("PASS" if ok else "FAIL", f"(agreement >= {a.min_agreement}%, |difference| <= "
          f"{a.max_acc_diff} points)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
