#!/usr/bin/env python3
"""llama.cpp's greedy continuations of prompts as a test fixture, for models whose reference
does not come from the Python bindings (tools/make_fixtures.py): builds tools/llama_greedy.cpp
against llama.cpp's tree in its AVX2 build (LLAMACPP_ISA=avx2 tools/build_llamacpp.sh
llama-greedy: the build whose summation orders squeeze's kernels follow) and runs it.

  tools/make_greedy_fixture.py --model models/gemma-3-270m-q4_k_m.gguf --n 32 \\
      --out tests/data/greedy_gemma3.json

Prompts: a few short ones of different kinds, and one of more than --long-words words of
WikiText-2 validation text (past a sliding window of 512: local attention layers then see only
part of it).

With --tiny-arch ARCH the model is the tiny random-weight one of that architecture's reference
test (build/tests/util/write_tiny_model writes it: tests/util/tiny_model.h), the prompts are the
first three short ones, and every logit of every step is kept:

  tools/make_greedy_fixture.py --tiny-arch qwen2 --n 6 --out tests/data/tiny_qwen2.json"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHORT = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "The three primary colors are",
    "Water boils at a temperature of",
]


def long_prompt(words):
    path = os.path.join(root, "..", "shared", "data", "wikitext-2", "valid.txt")
    with open(path, encoding="utf-8") as f:
        text = " ".join(ln.strip() for ln in f if ln.strip() and not ln.strip().startswith("="))
    return " ".join(text.split()[:words])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model")
    p.add_argument("--tiny-arch", help="the tiny random-weight model of this architecture")
    p.add_argument("--build", default=os.path.join(root, "build"), help="squeeze's build folder")
    p.add_argument("--n", type=int, default=32, help="greedy tokens per prompt")
    p.add_argument("--long-words", type=int, default=520, help="words of the long prompt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if (a.model is None) == (a.tiny_arch is None):
        sys.exit("give one of --model and --tiny-arch")
    tmp = tempfile.TemporaryDirectory()
    if a.tiny_arch:
        a.model = os.path.join(tmp.name, f"tiny_{a.tiny_arch}.gguf")
        subprocess.run([os.path.join(a.build, "tests", "util", "write_tiny_model"), a.tiny_arch,
                        a.model], check=True)
    bin_dir = subprocess.run([os.path.join(root, "tools", "build_llamacpp.sh"), "llama-greedy"],
                             check=True, capture_output=True, text=True,
                             env={**os.environ, "LLAMACPP_ISA": "avx2"}).stdout.strip().splitlines()[-1]
    prompts = SHORT[:3] if a.tiny_arch else SHORT + [long_prompt(a.long_words)]
    stdin = "".join(pr.replace("\n", "\\n") + "\n" for pr in prompts)
    cmd = [os.path.join(bin_dir, "llama-greedy"), a.model, str(a.n), str(a.threads)]
    run = subprocess.run(cmd + (["all-logits"] if a.tiny_arch else []),
                         input=stdin, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"llama-greedy failed:\n{run.stderr[-2000:]}")
    cases = [json.loads(line) for line in run.stdout.splitlines()]
    with open(a.model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    model = f"tiny {a.tiny_arch} (tests/util/tiny_model.h)" if a.tiny_arch else os.path.basename(a.model)
    fixture = {"model": model, "model_sha256": sha,
               "made_by": "tools/make_greedy_fixture.py (llama.cpp from llama-cpp-python 0.3.36, "
                          "LLAMACPP_ISA=avx2 tools/build_llamacpp.sh build, flash attention off)",
               "n_predict": a.n, "cases": cases}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} cases -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
