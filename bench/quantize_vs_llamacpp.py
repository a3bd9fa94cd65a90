#!/usr/bin/env python3
"""`squeeze quantize` against llama.cpp's own quantizer, tensor by tensor.

For each type: quantizes MODEL with llama.cpp (llama_model_quantize through llama-cpp-python,
params.pure = True so every weight matrix gets the one type, allow_requantize = True) and with
`squeeze quantize`, then compares every tensor's type, shape and bytes, and the metadata; loads
squeeze's file in llama.cpp and generates a few greedy tokens with both files.

    python3 bench/quantize_vs_llamacpp.py [-m MODEL] [--types q8_0,q4_0] [--squeeze build/squeeze]
        [--out-dir /tmp/squeeze_qcmp] [--threads 2]

Needs llama-cpp-python and its `gguf` package (pip install llama-cpp-python gguf numpy).
"""

import argparse
import os
import subprocess
import sys

import numpy as np

try:
    import llama_cpp
    from gguf import GGUFReader
except ImportError as e:  # pragma: no cover
    raise SystemExit("error: needs llama-cpp-python, gguf and numpy") from e

# llama.h enum llama_ftype
FTYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "bf16": 32}


def llamacpp_quantize(src, dst, type_name, threads):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[type_name]
    params.pure = True
    params.allow_requantize = True
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        raise SystemExit(f"error: llama_model_quantize failed ({rc})")


def tensors(path):
    r = GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


def compare(ref_path, sq_path):
    """Prints and returns (identical, differing) tensor counts."""
    r_ref, ref = tensors(ref_path)
    r_sq, sq = tensors(sq_path)
    same = diff = 0
    if set(ref) != set(sq):
        print(f"  tensor names differ: only llama.cpp {sorted(set(ref) - set(sq))}, "
              f"only squeeze {sorted(set(sq) - set(ref))}")
    for name in sorted(set(ref) & set(sq)):
        a, b = ref[name], sq[name]
        if a.tensor_type != b.tensor_type or list(a.shape) != list(b.shape):
            print(f"  {name}: llama.cpp {a.tensor_type.name} {list(a.shape)}, "
                  f"squeeze {b.tensor_type.name} {list(b.shape)}")
            diff += 1
            continue
        x = np.asarray(a.data).view(np.uint8).ravel()
        y = np.asarray(b.data).view(np.uint8).ravel()
        if x.size == y.size and np.array_equal(x, y):
            same += 1
        else:
            diff += 1
            print(f"  {name}: {a.tensor_type.name}, {int(np.count_nonzero(x != y))} of {x.size} bytes differ")
    def raw(field):
        return b"".join(np.asarray(field.parts[i]).tobytes() for i in field.data)

    keys_ref = {f.name: raw(f) for f in r_ref.fields.values() if not f.name.startswith("GGUF.")}
    keys_sq = {f.name: raw(f) for f in r_sq.fields.values() if not f.name.startswith("GGUF.")}
    print(f"  metadata keys only in llama.cpp's file: {sorted(set(keys_ref) - set(keys_sq))}")
    print(f"  metadata keys only in squeeze's file:   {sorted(set(keys_sq) - set(keys_ref))}")
    changed = sorted(k for k in set(keys_ref) & set(keys_sq) if keys_ref[k] != keys_sq[k])
    print(f"  metadata keys with different values:    {changed}")
    return same, diff


def greedy(path, prompt, n):
    llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=2, verbose=False)
    out = llm(prompt, max_tokens=n, temperature=0.0, top_k=1)
    return out["choices"][0]["text"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--types", default="q8_0,q4_0")
    ap.add_argument("--squeeze", default="build/squeeze")
    ap.add_argument("--out-dir", default="/tmp/squeeze_qcmp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", default="The capital of France is")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    base = os.path.splitext(os.path.basename(a.model))[0]
    all_same = True
    for t in a.types.split(","):
        ref = os.path.join(a.out_dir, f"{base}.llamacpp.{t}.gguf")
        sq = os.path.join(a.out_dir, f"{base}.squeeze.{t}.gguf")
        llamacpp_quantize(a.model, ref, t, a.threads)
        subprocess.run([a.squeeze, "quantize", "-m", a.model, "-o", sq, "--type", t,
                        "--threads", str(a.threads)], check=True, stderr=subprocess.DEVNULL)
        print(f"{t}: {ref} vs {sq}")
        same, diff = compare(ref, sq)
        print(f"  tensors with identical bytes: {same}, differing: {diff}")
        all_same &= diff == 0
        g_ref, g_sq = greedy(ref, a.prompt, 16), greedy(sq, a.prompt, 16)
        print(f"  llama.cpp greedy on llama.cpp's file: {g_ref!r}")
        print(f"  llama.cpp greedy on squeeze's file:   {g_sq!r}")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
