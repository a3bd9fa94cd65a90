#!/usr/bin/env python3
"""llama.cpp's perplexity and KL divergence, computed through llama-cpp-python.

The reference side of squeeze's `perplexity` command: same protocol as llama.cpp's
llama-perplexity (tools/perplexity/perplexity.cpp), driven through llama-cpp-python's
low-level API so the model runs inside llama.cpp itself.

How llama.cpp's side is computed:
  * The text file is read as bytes, one trailing newline dropped (as llama.cpp's `-f`), and
    tokenized by llama.cpp with add_special=True, parse_special=False (common_tokenize(..., true)).
  * The tokens are cut into n_chunks = len(tokens) // n_ctx non-overlapping chunks of n_ctx
    (at least 2 * n_ctx tokens are required, as llama-perplexity requires).
  * For each chunk: the KV cache is cleared; if the vocabulary adds BOS, the chunk's first token
    is replaced by BOS; the chunk is decoded in batches of n_batch tokens with output (logits)
    flags set only for positions >= n_ctx / 2, exactly as llama-perplexity sets them.
  * Logits at positions first .. n_ctx - 2 (first = n_ctx // 2) predict the next token; their
    log-softmax is taken in float64 (numpy). NLL is summed over those n_ctx - 1 - first
    positions of every chunk.
  * PPL = exp(mean NLL); its error = PPL * sqrt(var(NLL) / (count - 1)) as llama.cpp prints it.
  * KL divergence (llamacpp_kld): the base and the other model are run chunk by chunk on the
    base model's tokens; per scored position KL(base || model) = sum p_base (log p_base -
    log p_model) in float64 over the whole vocabulary ("exact"); and again the way
    llama-perplexity --kl-divergence does it ("llamacpp_u16": base log-probs quantized to uint16
    over [max - 16, max] with a per-row scale and offset, terms with log p_base <= -16
    dropped). Top-1 agreement compares the argmax of the two models' logits; Δp is
    p_model(correct token) - p_base(correct token).

Usage as a module (bench/vs_llamacpp imports this):
    from llamacpp_ppl import llamacpp_perplexity
    r = llamacpp_perplexity("models/SmolLM2-135M-Instruct.Q4_1.gguf",
                            "../shared/data/wikitext-2-raw/wiki.test.raw", n_ctx=512, n_chunks=10)
    # r == {"ppl": ..., "ppl_err": ..., "n_chunks": 10, "seconds": ..., ...}

CLI:
    python3 bench/llamacpp_ppl.py -m MODEL -f TEXT [--ctx 512] [--chunks N] [--threads 2]
    python3 bench/llamacpp_ppl.py -m MODEL -f TEXT --kl-base BASE_MODEL [--chunks 40]
    python3 bench/llamacpp_ppl.py --quantize IN OUT --type q8_0   # llama.cpp's own quantizer
"""

import argparse
import json
import math
import sys
import time

import numpy as np

try:
    import llama_cpp
except ImportError as e:  # pragma: no cover
    raise SystemExit("error: llama-cpp-python is not installed (pip install llama-cpp-python)") from e


class _Runner:
    """One llama.cpp model + context that returns the scored logits of a chunk."""

    def __init__(self, model_path, n_ctx, n_batch, threads):
        self.llm = llama_cpp.Llama(model_path=model_path, n_ctx=n_ctx, n_batch=n_batch,
                                   n_ubatch=n_batch, n_threads=threads, n_threads_batch=threads,
                                   logits_all=False, verbose=False)
        self.ctx = self.llm._ctx.ctx
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm._model.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self.bos = llama_cpp.llama_vocab_bos(self.vocab)
        if llama_cpp.llama_vocab_get_add_eos(self.vocab):
            raise SystemExit("error: the vocabulary adds EOS; llama-perplexity refuses such models")
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, 1)

    def tokenize(self, text):
        return self.llm._model.tokenize(text, add_bos=True, special=False)

    def chunk_logits(self, chunk):
        """Logits of positions n_ctx//2 .. n_ctx-1 of one chunk: [n_ctx - first, n_vocab]."""
        n_ctx, first = len(chunk), len(chunk) // 2
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        out = np.empty((n_ctx - first, self.n_vocab), dtype=np.float32)
        row = 0
        for b0 in range(0, n_ctx, self.n_batch):
            size = min(self.n_batch, n_ctx - b0)
            n_out = 0
            for k in range(size):
                pos = b0 + k
                tok = self.bos if (pos == 0 and self.add_bos) else chunk[pos]
                self.batch.token[k] = tok
                self.batch.pos[k] = pos
                self.batch.n_seq_id[k] = 1
                self.batch.seq_id[k][0] = 0
                self.batch.logits[k] = pos >= first
                n_out += pos >= first
            self.batch.n_tokens = size
            if llama_cpp.llama_decode(self.ctx, self.batch) != 0:
                raise RuntimeError("llama_decode failed")
            if n_out:
                ptr = llama_cpp.llama_get_logits(self.ctx)
                out[row:row + n_out] = np.ctypeslib.as_array(ptr, shape=(n_out * self.n_vocab,)
                                                             ).reshape(n_out, self.n_vocab)
                row += n_out
        return out

    def close(self):
        llama_cpp.llama_batch_free(self.batch)
        self.llm.close()


def _read_text(path):
    with open(path, "rb") as f:
        text = f.read()
    return text[:-1] if text.endswith(b"\n") else text


def _log_softmax(logits):
    x = logits.astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def _chunks(tokens, n_ctx, n_chunks):
    if len(tokens) < 2 * n_ctx:
        raise SystemExit(f"error: the text tokenizes to {len(tokens)} tokens; at least "
                         f"{2 * n_ctx} are needed for ctx {n_ctx}")
    n_max = len(tokens) // n_ctx
    return n_max if n_chunks is None else min(n_chunks, n_max)


def _mean_err(s, s2, n):
    """llama.cpp's mean_and_uncertainty."""
    m = s / n
    v = s2 / n - m * m
    return m, (math.sqrt(v / (n - 1)) if v > 0 and n > 10 else 0.0)


def llamacpp_perplexity(model_path, text_path, n_ctx=512, n_chunks=None, threads=2,
                        n_batch=None, progress=False):
    """llama.cpp's PPL of model_path on text_path (llama-perplexity's protocol).

    Returns dict(ppl, ppl_err, n_chunks, seconds, eval_seconds, n_tokens, count); seconds is the
    whole wall time (load, tokenize, evaluate), eval_seconds the chunk loop alone.
    """
    t0 = time.perf_counter()
    r = _Runner(model_path, n_ctx, n_batch or n_ctx, threads)
    tokens = r.tokenize(_read_text(text_path))
    n = _chunks(tokens, n_ctx, n_chunks)
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    t1 = time.perf_counter()
    for c in range(n):
        chunk = tokens[c * n_ctx:(c + 1) * n_ctx]
        lp = _log_softmax(r.chunk_logits(chunk))[:-1]           # positions first .. n_ctx-2
        target = np.asarray(chunk[first + 1:], dtype=np.int64)  # the tokens they predict
        v = -lp[np.arange(len(target)), target]
        nll += float(v.sum())
        nll2 += float((v * v).sum())
        count += len(v)
        if progress:
            print(f"[{c + 1}/{n}] {math.exp(nll / count):.4f}", file=sys.stderr, flush=True)
    t2 = time.perf_counter()
    r.close()
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    return {"ppl": ppl, "ppl_err": ppl * math.sqrt(var / (count - 1)) if var > 0 else 0.0,
            "n_chunks": n, "seconds": t2 - t0, "eval_seconds": t2 - t1, "n_tokens": len(tokens),
            "count": count}


def _u16_base_logprobs(logits):
    """llama-perplexity's stored base row, decoded: log p quantized to uint16 over [max-16, max]."""
    x = logits.astype(np.float32)
    mx = x.max(axis=1, keepdims=True)
    mn = np.maximum(x.min(axis=1, keepdims=True), mx - 16)
    lse = np.log(np.exp((x - mx).astype(np.float64)).sum(axis=1, keepdims=True)).astype(np.float32)
    min_lp = mn - mx - lse
    scale = (mx - mn) / np.float32(65535)
    q = np.where(x > mn, np.rint((x - mn) / np.where(scale > 0, scale, 1)), 0)
    return (scale * q + min_lp).astype(np.float64)


def llamacpp_kld(base_path, model_path, text_path, n_ctx=512, n_chunks=None, threads=2,
                 progress=False):
    """KL(base || model), top-1 agreement, RMS Δp and both PPLs, all computed by llama.cpp."""
    t0 = time.perf_counter()
    base = _Runner(base_path, n_ctx, n_ctx, threads)
    other = _Runner(model_path, n_ctx, n_ctx, threads)
    if base.n_vocab != other.n_vocab:
        raise SystemExit("error: the two models have different vocabularies")
    tokens = base.tokenize(_read_text(text_path))
    n = _chunks(tokens, n_ctx, n_chunks)
    first = n_ctx // 2
    kld, kld_u16, dp, same, nll_b, nll_q = [], [], [], 0, [], []
    for c in range(n):
        chunk = tokens[c * n_ctx:(c + 1) * n_ctx]
        lb_logits = base.chunk_logits(chunk)[:-1]
        lq_logits = other.chunk_logits(chunk)[:-1]
        lb, lq = _log_softmax(lb_logits), _log_softmax(lq_logits)
        kld.append((np.exp(lb) * (lb - lq)).sum(axis=1))
        lb16 = _u16_base_logprobs(lb_logits)
        keep = lb16 > -16
        kld_u16.append(np.where(keep, np.exp(lb16) * (lb16 - lq), 0.0).sum(axis=1))
        same += int((lb_logits.argmax(axis=1) == lq_logits.argmax(axis=1)).sum())
        target = np.asarray(chunk[first + 1:], dtype=np.int64)
        idx = np.arange(len(target))
        nll_b.append(-lb[idx, target])
        nll_q.append(-lq[idx, target])
        dp.append(np.exp(lq[idx, target]) - np.exp(lb[idx, target]))
        if progress:
            k = np.concatenate(kld)
            print(f"[{c + 1}/{n}] KLD {k.mean():.6f} top-1 {100.0 * same / len(k):.3f}%",
                  file=sys.stderr, flush=True)
    base.close()
    other.close()
    k, k16, d = np.concatenate(kld), np.concatenate(kld_u16), np.concatenate(dp)
    nb, nq = np.concatenate(nll_b), np.concatenate(nll_q)
    cnt = len(k)
    top1 = same / cnt
    km, ke = _mean_err(k.sum(), (k * k).sum(), cnt)
    k16m, k16e = _mean_err(k16.sum(), (k16 * k16).sum(), cnt)
    ks = np.sort(k)
    return {
        "n_chunks": n, "count": cnt, "seconds": time.perf_counter() - t0,
        "kld_mean": km, "kld_err": ke, "kld_median": float(np.median(ks)),
        "kld_p90": float(np.quantile(ks, 0.90)), "kld_p99": float(np.quantile(ks, 0.99)),
        "kld_p999": float(np.quantile(ks, 0.999)), "kld_max": float(ks[-1]),
        "kld_mean_llamacpp_u16": k16m, "kld_err_llamacpp_u16": k16e,
        "top1": top1, "top1_err": math.sqrt(top1 * (1 - top1) / (cnt - 1)),
        "rms_dp": float(math.sqrt((d * d).mean())),
        "ppl_base": math.exp(nb.mean()), "ppl": math.exp(nq.mean()),
        "ppl_ratio": math.exp(nq.mean() - nb.mean()),
    }


def llamacpp_quantize(src, dst, type_name):
    """Quantizes with llama.cpp's own quantizer (llama_model_quantize): one type for every
    weight matrix (pure), requantizing allowed (the shipped model is Q4_1)."""
    ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + type_name.upper())
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.pure = True
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        raise SystemExit(f"error: llama_model_quantize failed ({rc})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("-f", "--file")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kl-base", help="base model: report KL(base || model) instead of PPL")
    ap.add_argument("--quantize", nargs=2, metavar=("IN", "OUT"))
    ap.add_argument("--type", default="q8_0", help="with --quantize: q8_0, q4_0, ...")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    if a.quantize:
        llamacpp_quantize(a.quantize[0], a.quantize[1], a.type)
        return 0
    if not a.model or not a.file:
        ap.error("-m and -f are required")
    if a.kl_base:
        r = llamacpp_kld(a.kl_base, a.model, a.file, a.ctx, a.chunks, a.threads, progress=True)
    else:
        r = llamacpp_perplexity(a.model, a.file, a.ctx, a.chunks, a.threads, a.batch,
                                progress=True)
    if a.json:
        print(json.dumps(r, indent=1))
    elif a.kl_base:
        print(f"chunks {r['n_chunks']} ({r['count']} positions), {r['seconds']:.1f} s")
        print(f"Mean KLD: {r['kld_mean']:.6f} ± {r['kld_err']:.6f} (llama.cpp uint16 method: "
              f"{r['kld_mean_llamacpp_u16']:.6f})")
        print(f"median {r['kld_median']:.6f}  p90 {r['kld_p90']:.6f}  p99 {r['kld_p99']:.6f}  "
              f"p99.9 {r['kld_p999']:.6f}  max {r['kld_max']:.6f}")
        print(f"top-1 agreement: {100 * r['top1']:.3f} ± {100 * r['top1_err']:.3f} %   "
              f"RMS Δp: {100 * r['rms_dp']:.3f} %")
        print(f"PPL base {r['ppl_base']:.4f}  PPL {r['ppl']:.4f}  ratio {r['ppl_ratio']:.6f}")
    else:
        print(f"PPL = {r['ppl']:.4f} +/- {r['ppl_err']:.5f}  ({r['n_chunks']} chunks, "
              f"{r['seconds']:.1f} s wall, {r['eval_seconds']:.1f} s evaluating)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
