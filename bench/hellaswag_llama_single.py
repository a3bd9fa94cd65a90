#!/usr/bin/env python3
"""llama-perplexity --hellaswag's chosen ending of single tasks, next to squeeze's.

For each task index (0-based, in the task file), llama-perplexity runs on a file holding that task
alone, with its gold line set to 0, then 1, then 2: the run whose one task comes out right names
the ending llama chose (3 if none). Once with llama's flash attention on (its default on CPU) and
once off (-fa off). squeeze's choice is read from a `squeeze hellaswag --per-task` table.

  bench/hellaswag_llama_single.py --per-task bench/out/hellaswag/squeeze_per_task.tsv 930 7531 ...
"""
import argparse
import os
import re
import subprocess
import tempfile

from hellaswag_vs_llamacpp import ROOT, find_shared


def llama_choice(llama, model, task_lines, fa, tmp):
    for k in range(3):
        path = os.path.join(tmp, f"g{k}.txt")
        with open(path, "w") as f:
            f.write("\n".join([task_lines[0], str(k)] + task_lines[2:6]) + "\n")
        p = subprocess.run([llama, "-m", model, "-f", path, "--hellaswag", "--hellaswag-tasks", "1",
                            "-t", "2", "-fa", fa], capture_output=True, text=True)
        m = re.search(r"^1\t([\d.]+)%", p.stdout, re.M)
        if m is None:
            raise SystemExit(f"error: no task line from llama-perplexity\n{p.stderr[-1000:]}")
        if float(m.group(1)) > 50:
            return k
    return 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", type=int, nargs="+")
    ap.add_argument("--per-task", required=True)
    ap.add_argument("-m", "--model",
                    default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-f", "--file", default=find_shared("hellaswag/hellaswag_val_full.txt"))
    ap.add_argument("--llama", default=os.path.join(ROOT, "tools", ".llamacpp", "build", "bin",
                                                    "llama-perplexity"))
    a = ap.parse_args()
    lines = open(a.file).read().split("\n")
    sq = {int(r[1]): int(r[3]) for r in (l.split("\t") for l in open(a.per_task))
          if not r[0].startswith("#")}
    same = {"on": 0, "off": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for t in a.tasks:
            got = {fa: llama_choice(a.llama, a.model, lines[6 * t:6 * t + 6], fa, tmp)
                   for fa in ("on", "off")}
            for fa in got:
                same[fa] += got[fa] == sq[t]
            print(f"task {t}: squeeze {sq[t]}, llama -fa on {got['on']}, -fa off {got['off']}",
                  flush=True)
    n = len(a.tasks)
    print(f"same ending as squeeze: -fa on {same['on']}/{n}, -fa off {same['off']}/{n}")


if __name__ == "__main__":
    main()
