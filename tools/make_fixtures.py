#!/usr/bin/env python3
"""Writes squeeze's reference fixtures from llama.cpp (through llama-cpp-python).

  tests/data/tokenizer_smollm2.json  token ids of 200+ strings (see fixtures_tokenizer.py)
  tests/data/forward_smollm2.json    for 5 prompts: prompt ids, top-20 logits at the last prompt
                                     position, the logit range there, and the greedy continuation
                                     of 64 tokens with each step's top-2 logit gap

Run through tools/make_fixtures.sh, which makes the virtual environment. llama-cpp-python is a
reference for fixtures and benchmarks only, never a dependency of squeeze.
"""
import argparse
import json
import os
import sys

import numpy as np
from llama_cpp import Llama, __version__ as llama_cpp_version

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures_tokenizer  # noqa: E402

CHATML = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village at the edge of a great forest, there lived",
    CHATML + "<|im_start|>user\nWhat are three tips for staying healthy?<|im_end|>\n<|im_start|>assistant\n",
    CHATML + "<|im_start|>user\nTranslate to French: The weather is nice today.<|im_end|>\n<|im_start|>assistant\n",
]
N_GEN = 64
TOP = 20


def last_logits(llm):
    """Logits of the last evaluated token (the only row llama.cpp keeps without logits_all)."""
    ptr = llm._ctx.get_logits()
    return np.array(np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)), dtype=np.float64)


def forward_fixture(model_path, path, threads):
    llm = Llama(model_path=model_path, n_ctx=512, n_batch=512, n_threads=threads,
                logits_all=False, verbose=False, seed=0)
    cases = []
    for prompt in PROMPTS:
        llm.reset()
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        llm.eval(ids)
        logits = last_logits(llm)
        top = np.argsort(-logits, kind="stable")[:TOP]
        case = {
            "prompt": prompt,
            "prompt_ids": ids,
            "top_ids": [int(i) for i in top],
            "top_logits": [float(logits[i]) for i in top],
            "logit_min": float(logits.min()),
            "logit_max": float(logits.max()),
            "greedy": [],
            "greedy_top2_gap": [],
        }
        for _ in range(N_GEN):
            order = np.argsort(-logits, kind="stable")[:2]
            tok = int(order[0])
            case["greedy"].append(tok)
            case["greedy_top2_gap"].append(float(logits[order[0]] - logits[order[1]]))
            llm.eval([tok])
            logits = last_logits(llm)
        cases.append(case)
        print(f"forward: {prompt[:40]!r}... -> {llm.detokenize(case['greedy'])[:60]!r}",
              file=sys.stderr)
    meta = {"llama_cpp_python": llama_cpp_version, "ggml_build": "AVX2+FMA+F16C, AVX-512 off",
            "n_ctx": 512, "flash_attn": False, "kv_type": "f16", "threads": threads}
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "cases": cases}, f, ensure_ascii=False, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, help="folder for the fixture files (tests/data)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    vocab = Llama(model_path=args.model, vocab_only=True, verbose=False)
    fixtures_tokenizer.write_tokenizer_fixture(vocab, os.path.join(args.out, "tokenizer_smollm2.json"))
    forward_fixture(args.model, os.path.join(args.out, "forward_smollm2.json"), args.threads)


if __name__ == "__main__":
    main()
