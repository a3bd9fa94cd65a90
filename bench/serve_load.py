#!/usr/bin/env python3
"""Load on OpenAI-compatible servers over loopback: `squeeze serve` against llama.cpp's
`llama-server`, the same model file, threads and requests, interleaved, medians.

  bench/serve_load.py load   [--clients 1,8,32] [--requests 64] [--rounds 3]
      aggregate generated tokens/s and median time to first token at each concurrency, for
      squeeze (dense; with --sparsity S also --act-sparsity S on --sparse-model, its steps of a
      few decodes batched (split never) and split where faster (auto)) and llama-server
  bench/serve_load.py prefix [--requests 16]
      a 1,000-token shared system prompt followed by short user turns: median time to first
      token with squeeze's prefix cache, without it (--no-prefix-cache), and llama-server's
  bench/serve_load.py soak   [--clients-soak 32] [--requests 200] [--warm-requests 6]
      clients x requests on one squeeze server, after a first pass of clients x warm-requests
      of them: failed requests, RSS after the first pass and after the second (growth), every
      greedy response against the same request run alone
  bench/serve_load.py kvmem  [--kv-mib 180] [--clients 16] [--parallel P] [--batch-tokens B]
                             [--out-tokens 64]
      one KV memory (--kv-mib) shared by --clients requests of about --ctx tokens each (prompt
      and output), with an f16 cache and with 4-bit ones: the most sequences running at once
      (polled from /metrics), the peak KV memory, preemptions (--no-prefix-cache: no sharing)

Every request is greedy (temperature 0) over /v1/completions, streamed with usage; prompts are
lines of WikiText-2 validation (../shared/data), of mixed lengths, with mixed max_tokens
(--mix: MIXES).
Tables go to stdout (markdown), the raw figures to --out (JSON). Bounded in count (--requests)
and time (--time-limit per measured run: a run past it is an error)."""

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "tests", "serve"))
from server_process import Server  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def corpus_lines():
    path = os.path.join(root, "..", "shared", "data", "wikitext-2", "valid.txt")
    with open(path, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if len(ln.split()) >= 60 and not ln.strip().startswith("=")]
    if not lines:
        sys.exit(f"serve_load: no text in {path}")
    return lines


# Prompt lengths in words (about 1.35 tokens each) and max_tokens of each mix.
MIXES = {
    # chat-like traffic: prompts of about 20 to 350 tokens, outputs of 16 to 256
    "chat": ([16, 32, 64, 128, 256], [16, 32, 64, 128, 256]),
    # generation-bound: short prompts, long outputs (what batching decodes speeds up)
    "decode": ([8, 16, 32], [128, 192, 256]),
}


def mixed_requests(n, seed, mix="chat"):
    """n (prompt, max_tokens) of the mix: prompt and output lengths drawn uniformly."""
    lengths, outputs = MIXES[mix]
    rng = random.Random(seed)
    words = " ".join(corpus_lines()).split()
    out = []
    for _ in range(n):
        length = rng.choice(lengths)
        start = rng.randrange(0, len(words) - length)
        out.append((" ".join(words[start:start + length]), rng.choice(outputs)))
    return out


def complete(port, prompt, max_tokens, timeout=600):
    """One streamed greedy completion: {ok, ttft, tokens, text, seconds} (ok False: error)."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    res = {"ok": False, "ttft": None, "tokens": 0, "text": "", "seconds": 0.0}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            res["error"] = f"HTTP {r.status}: {r.read()[:200]!r}"
            return res
        done = False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                done = True
                break
            chunk = json.loads(data)
            for c in chunk.get("choices") or []:
                # The first token: its text, or the end of generation when it is one.
                if res["ttft"] is None and (c.get("text") or c.get("finish_reason")):
                    res["ttft"] = time.perf_counter() - t0
                res["text"] += c.get("text") or ""
            if chunk.get("usage"):
                res["tokens"] = chunk["usage"]["completion_tokens"]
                res["prompt_tokens"] = chunk["usage"].get("prompt_tokens", 0)
        conn.close()
        res["ok"] = done
        if not done:
            res["error"] = "the stream ended without [DONE]"
    except (OSError, http.client.HTTPException, ValueError) as e:
        res["error"] = repr(e)
    res["seconds"] = time.perf_counter() - t0
    return res


def drive(port, requests, clients, time_limit):
    """Sends requests from `clients` threads, each taking the next request when its last ends."""
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda rq: complete(port, *rq), requests))
    wall = time.perf_counter() - t0
    if wall > time_limit:
        raise RuntimeError(f"a run took {wall:.0f} s, past --time-limit {time_limit} s")
    ok = [r for r in results if r["ok"]]
    ttfts = [r["ttft"] for r in ok if r["ttft"] is not None]
    return {"requests": len(results), "failed": len(results) - len(ok),
            "errors": sorted({r.get("error", "") for r in results if not r["ok"]})[:3],
            "tokens": sum(r["tokens"] for r in ok), "wall_s": wall,
            "tokens_per_s": sum(r["tokens"] for r in ok) / wall,
            "ttft_median_s": statistics.median(ttfts) if ttfts else None,
            "texts": [r["text"] if r["ok"] else None for r in results]}


def squeeze_server(a, clients, extra=(), model=None):
    return Server([a.squeeze, "serve", "-m", model or a.model, "--port", "0", "-t", str(a.threads),
                   "--ctx", str(a.ctx), "--parallel", str(clients),
                   "--kv-tokens", str(a.ctx * clients), "--queue", str(max(64, 2 * clients)),
                   *extra])


def llama_server(a, clients):
    port = free_port()
    return Server([a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
                   "-t", str(a.threads), "-tb", str(a.threads), "-np", str(clients),
                   "-c", str(a.ctx * clients), "--no-webui"], port=port)


def engines(a):
    out = [("squeeze", lambda c: squeeze_server(a, c))]
    if a.sparsity:
        # The sparse model's batches dense (never split), and split where measured faster (auto).
        for split in ("never", "auto"):
            out.append((f"squeeze --act-sparsity {a.sparsity} --act-sparsity-split {split}",
                        lambda c, split=split: squeeze_server(
                            a, c, ("--act-sparsity", str(a.sparsity), "--act-sparsity-split", split),
                            model=a.sparse_model or a.model)))
    if a.llama_server:
        out.append(("llama-server", lambda c: llama_server(a, c)))
    return out


def warm(port, clients):
    drive(port, [("Warm up the server with this short prompt.", 4)] * clients, clients, 600)


def cmd_load(a):
    clients = [int(c) for c in a.clients.split(",")]
    requests = mixed_requests(a.requests, a.seed, a.mix)
    rows = {}  # (engine, clients) -> runs
    for rnd in range(a.rounds):
        for c in clients:
            for name, start in engines(a):
                with start(c) as s:
                    warm(s.port, c)
                    run = drive(s.port, requests, c, a.time_limit)
                    s.stop()
                run.pop("texts")
                rows.setdefault((name, c), []).append(run)
                print(f"round {rnd + 1} {name} clients {c}: {run['tokens_per_s']:.1f} tok/s, "
                      f"TTFT {run['ttft_median_s']:.3f} s, failed {run['failed']}", file=sys.stderr)
    print(f"| engine | clients | generated tok/s (median of {a.rounds}) | median TTFT s | failed |")
    print("|---|---|---|---|---|")
    summary = []
    for (name, c), runs in rows.items():
        tps = statistics.median(r["tokens_per_s"] for r in runs)
        ttft = statistics.median(r["ttft_median_s"] for r in runs)
        failed = sum(r["failed"] for r in runs)
        summary.append({"engine": name, "clients": c, "tokens_per_s": tps, "ttft_median_s": ttft,
                        "failed": failed, "runs": runs})
        print(f"| {name} | {c} | {tps:.1f} | {ttft:.3f} | {failed} |")
    base = {s["clients"]: s for s in summary if s["engine"] == "squeeze"}
    for s in summary:
        if s["engine"] == "llama-server" and s["clients"] in base:
            b = base[s["clients"]]
            print(f"\nclients {s['clients']}: squeeze / llama-server tokens/s "
                  f"{b['tokens_per_s'] / s['tokens_per_s']:.2f}x, TTFT "
                  f"{s['ttft_median_s'] / b['ttft_median_s']:.2f}x lower")
    if 1 in base:
        for c, b in base.items():
            if c != 1:
                print(f"squeeze {c} clients / 1 client tokens/s: "
                      f"{b['tokens_per_s'] / base[1]['tokens_per_s']:.2f}x")
    return summary


def cmd_prefix(a):
    words = " ".join(corpus_lines()).split()
    system = "Answer questions about this text.\n\n" + " ".join(words[:760]) + "\n\n"
    rng = random.Random(a.seed)
    turns = [system + "Question: what is said about " + " ".join(rng.sample(words[760:5000], 6)) + "?\nAnswer:"
             for _ in range(a.requests)]
    variants = [("squeeze, prefix cache", lambda: squeeze_server(a, 1)),
                ("squeeze --no-prefix-cache", lambda: squeeze_server(a, 1, ("--no-prefix-cache",)))]
    if a.llama_server:
        variants.append(("llama-server", lambda: llama_server(a, 1)))
    summary = []
    for name, start in variants:
        with start() as s:
            warm(s.port, 1)
            first = complete(s.port, turns[0], 8)  # fills the cache
            run = drive(s.port, [(t, 8) for t in turns[1:]], 1, a.time_limit)
            s.stop()
        run.pop("texts")
        run["first_ttft_s"] = first["ttft"]
        summary.append({"engine": name, **run})
    print(f"| engine | median TTFT s, {a.requests - 1} turns after the first | first turn s | failed |")
    print("|---|---|---|---|")
    for r in summary:
        print(f"| {r['engine']} | {r['ttft_median_s']:.4f} | {r['first_ttft_s']:.4f} | {r['failed']} |")
    print(f"\nsqueeze TTFT without / with the prefix cache: "
          f"{summary[1]['ttft_median_s'] / summary[0]['ttft_median_s']:.1f}x")
    return summary


def cmd_soak(a):
    specs = mixed_requests(64, a.seed, a.mix)
    rng = random.Random(a.seed + 1)
    requests = [rng.choice(specs) for _ in range(a.clients_soak * a.requests)]
    with squeeze_server(a, a.clients_soak) as s:
        alone = {}
        for spec in specs:  # each distinct request alone, one at a time
            r = complete(s.port, *spec)
            if not r["ok"]:
                raise RuntimeError(f"a request alone failed: {r.get('error')}")
            alone[spec] = r["text"]
        # A first pass of the same requests brings the allocators (one arena per HTTP thread)
        # and the prefix cache to their steady size; the second pass must not grow it.
        warm_n = a.clients_soak * (a.warm_requests if a.warm_requests > 0 else a.requests)
        drive(s.port, requests[:warm_n], a.clients_soak, a.time_limit)
        rss_before = s.rss_bytes()
        run = drive(s.port, requests, a.clients_soak, a.time_limit)
        time.sleep(1)
        rss_after = s.rss_bytes()
        m = s.metrics()
        rc = s.stop()
    texts = run.pop("texts")
    differing = [(spec, t) for spec, t in zip(requests, texts) if t is not None and t != alone[spec]]
    for i, (spec, t) in enumerate(zip(requests, texts)):
        if t is not None and t != alone[spec]:
            print(f"request {i} of spec {specs.index(spec)} differs", file=sys.stderr)
    differ = len(differing)
    for spec, t in differing[:3]:
        a_text = alone[spec]
        at = next((i for i, (x, y) in enumerate(zip(a_text, t)) if x != y), min(len(a_text), len(t)))
        print(f"differs: prompt of {len(spec[0].split())} words, max_tokens {spec[1]}, from char {at}: "
              f"alone {a_text[at:at + 40]!r} vs {t[at:at + 40]!r}", file=sys.stderr)
    out = {**run, "preemptions": m["squeeze:preemptions_total"], "rss_before_mb": rss_before / 2**20, "rss_after_mb": rss_after / 2**20,
           "rss_growth_mb": (rss_after - rss_before) / 2**20, "greedy_differing_from_alone": differ,
           "kv_blocks_used_after": m["squeeze:kv_blocks_used"], "exit_status": rc}
    print("| clients | requests | failed | tok/s | RSS before / after MB | growth MB "
          "| greedy != alone | KV blocks used after | exit |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {a.clients_soak} | {run['requests']} | {run['failed']} | {run['tokens_per_s']:.1f} | "
          f"{out['rss_before_mb']:.1f} / {out['rss_after_mb']:.1f} | {out['rss_growth_mb']:+.1f} | "
          f"{differ} | {out['kv_blocks_used_after']:.0f} | {rc} |")
    return out


KVMEM_CACHES = [("f16", []),
                ("q4, g64, R 128", ["--kv-type", "q4"]),
                ("q4, g64, R 0", ["--kv-type", "q4", "--kv-recent", "0"])]


def cmd_kvmem(a):
    clients = int(a.clients.split(",")[-1])
    out_tokens = a.out_tokens
    # Prompts of about ctx - out_tokens tokens (WikiText runs about 1.24 tokens a word with
    # SmolLM2), cut further where they do not fit (fitted).
    words = " ".join(corpus_lines()).split()
    n_words = int((a.ctx - out_tokens) / 1.2)
    rng = random.Random(a.seed)
    requests = []
    for _ in range(clients):
        start = rng.randrange(0, len(words) - n_words)
        requests.append((" ".join(words[start:start + n_words]), out_tokens))
    rows = []
    for name, extra in KVMEM_CACHES:
        srv = Server([a.squeeze, "serve", "-m", a.model, "--port", "0", "-t", str(a.threads),
                      "--ctx", str(a.ctx), "--parallel", str(a.parallel or clients), "--kv-mib", str(a.kv_mib),
                      "--queue", str(2 * clients), "--no-prefix-cache",
                      *(["--batch-tokens", str(a.batch_tokens)] if a.batch_tokens else []), *extra])
        try:
            peak = {"running": 0, "kv_bytes_peak": 0}
            stop = False

            def poll():
                while not stop:
                    m = srv.metrics()
                    peak["running"] = max(peak["running"], m.get("squeeze:sequences_running", 0))
                    peak["kv_bytes_peak"] = m.get("squeeze:kv_bytes_peak", 0)
                    time.sleep(0.1)

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            def fitted(rq):
                # A prompt whose tokens and max_tokens pass --ctx is refused (400) before any
                # work: shortened by 2% until it fits, so sequences end just under --ctx.
                prompt, max_tokens = rq
                for _ in range(20):
                    r = complete(srv.port, prompt, max_tokens)
                    if r["ok"] or "HTTP 400" not in r.get("error", ""):
                        return r
                    w = prompt.split()
                    prompt = " ".join(w[:len(w) * 49 // 50])
                return r

            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                results = list(pool.map(fitted, requests))
            wall = time.perf_counter() - t0
            stop = True
            poller.join()
            m = srv.metrics()
            capacity = next((ln for ln in srv.log if "KV cache" in ln), "").strip()
            cap = re.search(r"KV cache (\d+) tokens", capacity)
        finally:
            srv.kill()
        ok = [r for r in results if r["ok"]]
        lengths = [r.get("prompt_tokens", 0) + r["tokens"] for r in ok]
        rows.append({"cache": name, "failed": len(results) - len(ok),
                     "errors": sorted({r.get("error", "") for r in results if not r["ok"]})[:3],
                     "kv_tokens": int(cap.group(1)) if cap else None,
                     "peak_running": int(peak["running"]), "kv_mib_peak": m.get("squeeze:kv_bytes_peak", 0) / 2**20,
                     "preemptions": int(m.get("squeeze:preemptions_total", 0)),
                     "mean_tokens": statistics.mean(lengths) if lengths else 0, "wall_s": wall})
        print(f"{name}: {rows[-1]}", file=sys.stderr, flush=True)
    base = rows[0]["peak_running"] or 1
    print(f"| KV cache (--kv-mib {a.kv_mib}, --parallel {a.parallel or clients}, --batch-tokens "
          f"{a.batch_tokens or 'default'}) | tokens of room | sequences at once | vs f16 | peak KV MiB "
          f"| preemptions | tokens per sequence | failed | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['cache']} | {r['kv_tokens']} | {r['peak_running']} | {r['peak_running'] / base:.2f}x "
              f"| {r['kv_mib_peak']:.1f} | {r['preemptions']} | {r['mean_tokens']:.0f} | {r['failed']} "
              f"| {r['wall_s']:.0f} |")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=["load", "prefix", "soak", "kvmem"])
    p.add_argument("--squeeze", default=os.path.join(root, "build", "squeeze"))
    p.add_argument("--llama-server", default="",
                   help="llama-server binary (tools/build_llamacpp.sh llama-server); empty: squeeze only")
    p.add_argument("-m", "--model", default=os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=2048, help="context per sequence")
    p.add_argument("--clients", default="1,8,32", help="load: concurrency levels")
    p.add_argument("--clients-soak", type=int, default=32, help="soak: concurrent clients")
    p.add_argument("--requests", type=int, default=64,
                   help="load: requests per run; prefix: turns; soak: requests per client")
    p.add_argument("--warm-requests", type=int, default=0,
                   help="soak: requests per client of the first pass (0: --requests), after which "
                        "RSS is read; the second pass sends all of them")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mix", choices=sorted(MIXES), default="chat", help="load, soak: request lengths")
    p.add_argument("--sparsity", type=float, default=0.0,
                   help="load: also squeeze --act-sparsity S, batches dense and split where faster")
    p.add_argument("--sparse-model", default="", help="the model with the sparsity table (squeeze sparsify)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-mib", type=float, default=180,
                   help="kvmem: the KV memory (180: 4 f16 sequences of 2048 tokens of SmolLM2)")
    p.add_argument("--parallel", type=int, default=0,
                   help="kvmem: serve's --parallel (0: the clients); a quantized cache sets aside "
                        "half blocks per slot, so slots past the sequences that fit cost room")
    p.add_argument("--out-tokens", type=int, default=64,
                   help="kvmem: tokens generated per request (the prompt fills the rest of --ctx); "
                        "long outputs keep every admitted sequence alive together")
    p.add_argument("--batch-tokens", type=int, default=0,
                   help="kvmem: serve's --batch-tokens (0: its default); a quantized cache sets "
                        "aside the half blocks one step fills")
    p.add_argument("--time-limit", type=float, default=1800, help="seconds per measured run")
    p.add_argument("--out", default="", help="JSON of the figures")
    a = p.parse_args()
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"serve_load {a.scenario}: {os.path.basename(a.model)}, {a.threads} threads, commit {commit}, "
          f"{' '.join(sys.argv[1:])}\n")
    result = {"load": cmd_load, "prefix": cmd_prefix, "soak": cmd_soak, "kvmem": cmd_kvmem}[a.scenario](a)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"scenario": a.scenario, "commit": commit, "args": vars(a), "result": result}, f,
                      indent=1)


if __name__ == "__main__":
    main()
