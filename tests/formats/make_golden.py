#!/usr/bin/env python3
"""Prints the golden hashes of tests/formats/golden_test.cpp, computed with gguf-py.

gguf-py (llama.cpp's Python package) re-implements ggml's reference quantizers and decoders in
numpy, independently of squeeze's C++; matching its bytes checks our layouts and rounding
against an outside reference. Not run by the test suite. To regenerate:

    python3 -m venv /tmp/gguf-venv && /tmp/gguf-venv/bin/pip install gguf numpy
    /tmp/gguf-venv/bin/python tests/formats/make_golden.py

The inputs are made by the same 32-bit LCG on both sides, as exact float32 values, so no
float formatting or parsing is involved.
"""
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

N = 1024  # elements per golden row: 32 blocks of 32, 4 super-blocks of 256


class Lcg:
    def __init__(self, seed):
        self.state = seed

    def next(self):
        self.state = (self.state * 1664525 + 1013904223) & 0xFFFFFFFF
        return self.state


def golden_input(seed):
    """N floats in [-1, 1) * 2^(block % 5 - 2), each exactly representable."""
    rng = Lcg(seed)
    out = np.empty(N, dtype=np.float32)
    for i in range(N):
        v = ((rng.next() >> 8) - (1 << 23)) * 2.0**-23
        out[i] = v * 2.0 ** ((i // 32) % 5 - 2)
    return out


# Byte offsets of the half-float scale fields in each block.
SCALE_FIELDS = {
    T.Q4_0: (18, [0]), T.Q4_1: (20, [0, 2]), T.Q5_0: (22, [0]), T.Q5_1: (24, [0, 2]),
    T.Q8_0: (34, [0]), T.Q4_K: (144, [0, 2]), T.Q6_K: (210, [208]),
}
BLOCK = {T.Q4_0: 32, T.Q4_1: 32, T.Q5_0: 32, T.Q5_1: 32, T.Q8_0: 32, T.Q4_K: 256, T.Q6_K: 256}


def golden_blocks(qtype, seed):
    """Random bytes for N elements; scale fields set to halves of magnitude [0.125, 0.25)."""
    rng = Lcg(seed)
    block_bytes, fields = SCALE_FIELDS[qtype]
    n_bytes = N // BLOCK[qtype] * block_bytes
    data = bytearray(rng.next() >> 24 for _ in range(n_bytes))
    for off in range(0, n_bytes, block_bytes):
        for f in fields:
            s = rng.next()
            h = ((s >> 31) << 15) | 0x3000 | ((s >> 16) & 0x3FF)
            data[off + f] = h & 0xFF
            data[off + f + 1] = h >> 8
    return np.frombuffer(bytes(data), dtype=np.uint8)


def fnv1a(data):
    h = 0xCBF29CE484222325
    for b in bytes(data):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    x = golden_input(2024)
    print("// Quantized bytes of golden_input(2024).")
    for qtype in (T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        q = quants.quantize(x.reshape(1, N), qtype)
        print(f"    {{DType::{qtype.name}, 0x{fnv1a(q.tobytes()):016x}ull}},")
    print("// Decoded floats of golden_blocks(type, 77).")
    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q6_K):
        y = quants.dequantize(golden_blocks(qtype, 77), qtype).astype("<f4")
        print(f"    {{DType::{qtype.name}, 0x{fnv1a(y.tobytes()):016x}ull}},")


if __name__ == "__main__":
    main()
