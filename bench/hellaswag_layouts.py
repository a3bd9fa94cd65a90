#!/usr/bin/env python3
"""HellaSwag scores ending by ending: squeeze against llama.cpp in two KV layouts.

llama-perplexity --hellaswag decodes a task as one batch in a unified KV cache: the common
prefix once (shared by four sequences), then ending 0, 1, 2, 3 one after another. squeeze scores
each ending as if its sequence were decoded alone. tools/llama_hellaswag_scores.cpp (built by
`tools/build_llamacpp.sh llama-hellaswag-scores`, against llama.cpp's own libraries) prints
llama's four scores of a task in both layouts: "batch" (llama-perplexity's, scored as there) and
"alone" (each sequence from an empty cache). This script runs it on the tasks of a `squeeze
hellaswag --per-task` table (made here unless --per-task is given) and reports, over all tasks:

- squeeze against llama alone: max |score difference| and tasks with the same ending;
- squeeze against llama batch, and llama batch against llama alone: tasks with the same ending
  (the second is llama-perplexity's own sensitivity to where an ending's cells sit).

Usage:
  bench/hellaswag_layouts.py [-m MODEL] [--tasks 1000] [--threads 2] [--per-task FILE]
      [--llama-scores tools/.llamacpp/build-avx2/bin/llama-hellaswag-scores] [--llama-args='-fa off']
      [-f ../shared/data/hellaswag/hellaswag_val_full.txt] [--out bench/out/hellaswag]
"""
import argparse
import os
import subprocess
import sys

from hellaswag_vs_llamacpp import ROOT, find_shared


def read_per_task(path):
    rows = []
    for line in open(path):
        if line.startswith("#"):
            continue
        r = line.rstrip("\n").split("\t")
        rows.append((int(r[1]), int(r[3]), [float(x) for x in r[5:9]]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model",
                    default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-f", "--file", default=find_shared("hellaswag/hellaswag_val_full.txt"))
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-task", help="an existing squeeze hellaswag --per-task table")
    ap.add_argument("--squeeze", default=os.path.join(ROOT, "build", "squeeze"))
    ap.add_argument("--llama-scores", default=os.path.join(
        ROOT, "tools", ".llamacpp", "build-avx2", "bin", "llama-hellaswag-scores"))
    ap.add_argument("--llama-args", default="-fa off",
                    help="more llama flags (use the = form: --llama-args='-fa on')")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "hellaswag"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    per_task = a.per_task
    if per_task is None:
        per_task = os.path.join(a.out, "squeeze_per_task.tsv")
        subprocess.run([a.squeeze, "hellaswag", "-m", a.model, "-f", a.file, "--tasks",
                        str(a.tasks), "-t", str(a.threads), "--per-task", per_task],
                       check=True, stdout=subprocess.DEVNULL)
    sq = read_per_task(per_task)
    if not os.path.exists(a.llama_scores):
        sys.exit(f"error: {a.llama_scores} is missing: "
                 "LLAMACPP_ISA=avx2 tools/build_llamacpp.sh llama-hellaswag-scores")
    cmd = [a.llama_scores, "-m", a.model, "-f", a.file, "-t", str(a.threads)] + a.llama_args.split()
    p = subprocess.run(cmd, input="\n".join(str(t) for t, _, _ in sq) + "\n",
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed\n{p.stderr[-2000:]}")
    llama = {}
    for line in p.stdout.splitlines():
        r = line.split("\t")
        llama[(int(r[0]), r[1])] = ([float(x) for x in r[2:6]], int(r[6]))
    with open(os.path.join(a.out, "llama_layouts.tsv"), "w") as f:
        f.write("# task\tlayout\tscore0\tscore1\tscore2\tscore3\tchosen\n" + p.stdout)

    n = len(sq)
    max_diff, same_alone, same_batch, batch_alone, first_exact = 0.0, 0, 0, 0, 0
    differ = []
    for task, chosen, scores in sq:
        alone, alone_c = llama[(task, "alone")]
        batch, batch_c = llama[(task, "batch")]
        max_diff = max(max_diff, max(abs(x - y) for x, y in zip(scores, alone)))
        same_alone += chosen == alone_c
        same_batch += chosen == batch_c
        batch_alone += batch_c == alone_c
        first_exact += batch[0] == alone[0]
        if batch_c != alone_c:
            differ.append(task)
    print(f"tasks: {n} (squeeze table {per_task}; llama {' '.join(cmd[1:])})")
    print(f"squeeze vs llama alone: max |score difference| {max_diff:.3g} "
          "(scores printed to 9 digits), "
          f"same ending {same_alone}/{n} ({100 * same_alone / n:.2f}%)")
    print(f"squeeze vs llama batch: same ending {same_batch}/{n} ({100 * same_batch / n:.2f}%)")
    print(f"llama batch vs llama alone: same ending {batch_alone}/{n} "
          f"({100 * batch_alone / n:.2f}%); ending 0 (laid out right after the prefix) "
          f"equal in both layouts on {first_exact}/{n} tasks")
    if differ:
        print("tasks whose ending llama's layout changes (file index): "
              + " ".join(str(t) for t in differ))


if __name__ == "__main__":
    main()
