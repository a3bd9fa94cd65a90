"""`squeeze serve` on SmolLM2, driven by the official `openai` Python client: completions, chat,
streaming, n = 2, stop strings, logprobs, seed reproducibility, the prefix cache, every error
status (400, 401, 404, 413, 429, 503), a client that disconnects mid-stream (its blocks freed),
and SIGTERM (the stream in flight finishes, exit 0).

Run by tests/serve/openai_client_test.sh: python openai_client_test.py SQUEEZE MODEL."""

import concurrent.futures
import json
import os
import signal
import sys
import threading
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import Server  # noqa: E402

BINARY = MODEL = None
KEY = "sk-squeeze-test"
CTX = 512
server = client = None
MODEL_ID = None
PROMPT = "The capital of France is"
LONG_PROMPT = ("Once upon a time, in a small village by the sea, there lived an old fisherman "
               "who went out every morning before dawn and came back at dusk with his nets. ") * 2


def start(*extra):
    return Server([BINARY, "serve", "-m", MODEL, "--port", "0", "--ctx", str(CTX), "-t", "2",
                   "--parallel", "2", "--kv-tokens", "2048", "--queue", "2", "--seed", "7", *extra])


def setUpModule():
    global server, client, MODEL_ID
    server = start("--api-key", KEY)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    MODEL_ID = os.path.basename(MODEL)


def tearDownModule():
    rc = server.stop()
    if rc != 0:
        raise RuntimeError(f"squeeze serve exited {rc} after SIGTERM:\n" + "".join(server.log))


def auth():
    return {"Authorization": "Bearer " + KEY}


def wait_idle(timeout=10.0):
    """The metrics once no sequence runs or waits and no KV block is referenced."""
    deadline = time.monotonic() + timeout
    while True:
        m = server.metrics()
        if m["squeeze:kv_blocks_used"] == 0 and m["squeeze:sequences_running"] == 0 \
                and m["squeeze:sequences_waiting"] == 0:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"the server is not idle: {m}")
        time.sleep(0.02)


class Api(unittest.TestCase):
    def greedy(self, **kw):
        args = dict(model=MODEL_ID, prompt=PROMPT, max_tokens=12, temperature=0)
        args.update(kw)
        return client.completions.create(**args)

    def test_models_and_health(self):
        self.assertEqual([m.id for m in client.models.list().data], [MODEL_ID])
        self.assertEqual(server.get("/health"), (200, '{"status":"ok"}'))

    def test_completion(self):
        r = self.greedy()
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertIn("Paris", r.choices[0].text)
        self.assertEqual(r.usage.completion_tokens, 12)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 12)
        self.assertEqual(self.greedy().choices[0].text, r.choices[0].text, "greedy is deterministic")

    def test_chat(self):
        r = client.chat.completions.create(
            model=MODEL_ID, max_tokens=16, temperature=0,
            messages=[{"role": "system", "content": "You answer in one word."},
                      {"role": "user", "content": "What is the capital of France?"}])
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn("Paris", r.choices[0].message.content)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 10)

    def test_streaming_gives_the_same_text(self):
        whole = self.greedy(max_tokens=20).choices[0].text
        chunks = list(self.greedy(max_tokens=20, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        self.assertEqual(text, whole)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1], "length")
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 20)

        chat = dict(model=MODEL_ID, max_tokens=20, temperature=0,
                    messages=[{"role": "user", "content": "Name a colour."}])
        whole = client.chat.completions.create(**chat).choices[0].message.content
        chunks = list(client.chat.completions.create(stream=True, **chat))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks), whole)
        self.assertIsNone(chunks[-1].usage, "no usage chunk unless asked")

    def test_two_choices_and_seeds(self):
        args = dict(max_tokens=16, temperature=1.0, seed=42)
        two = self.greedy(n=2, **args)
        self.assertEqual(sorted(c.index for c in two.choices), [0, 1])
        self.assertEqual(two.usage.completion_tokens, 32)
        again = self.greedy(n=2, **args)
        self.assertEqual([c.text for c in again.choices], [c.text for c in two.choices],
                         "the same seed gives the same choices")
        self.assertNotEqual(two.choices[0].text, two.choices[1].text)
        # Choice i draws with seed + i.
        self.assertEqual(self.greedy(max_tokens=16, temperature=1.0, seed=43).choices[0].text,
                         two.choices[1].text)
        streamed = {}
        for c in self.greedy(n=2, stream=True, **args):
            for ch in c.choices:
                streamed[ch.index] = streamed.get(ch.index, "") + ch.text
        self.assertEqual([streamed[0], streamed[1]], [c.text for c in two.choices])

    def test_stop_strings(self):
        full = self.greedy(max_tokens=24).choices[0].text
        stop = full[10:14]
        r = self.greedy(max_tokens=24, stop=["no such text", stop])
        self.assertEqual(r.choices[0].text, full[:full.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_logprobs(self):
        r = self.greedy(max_tokens=6, logprobs=2)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 6)
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        for chosen, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(logprob, 0.0)
            self.assertEqual(len(top), 2)
            self.assertAlmostEqual(max(top.values()), logprob, places=4, msg="greedy takes the top")
        c = client.chat.completions.create(model=MODEL_ID, max_tokens=4, temperature=0, logprobs=True,
                                           top_logprobs=3, messages=[{"role": "user", "content": "Hi"}])
        content = c.choices[0].logprobs.content
        self.assertEqual(len(content), c.usage.completion_tokens)
        self.assertTrue(all(len(t.top_logprobs) == 3 for t in content))

    def test_prefix_cache(self):
        first = self.greedy(prompt=LONG_PROMPT, max_tokens=4)
        second = self.greedy(prompt=LONG_PROMPT, max_tokens=4)
        n = first.usage.prompt_tokens
        self.assertGreater(n, 32)
        self.assertEqual(second.usage.prompt_tokens_details.cached_tokens, (n - 1) // 16 * 16)
        self.assertEqual(second.choices[0].text, first.choices[0].text)
        m = server.metrics()
        self.assertGreaterEqual(m["squeeze:prefix_cache_hit_tokens_total"], (n - 1) // 16 * 16)

    def expect_error(self, status, body, headers=None, path="/v1/completions"):
        got, text = server.post(path, body, {**auth(), **(headers or {})})
        self.assertEqual(got, status, text)
        err = json.loads(text)["error"]
        self.assertTrue(err["message"])
        return err

    def test_bad_requests(self):
        self.assertEqual(self.expect_error(400, b'{"prompt": ')["type"], "invalid_request_error")
        self.expect_error(400, b"[1, 2]")
        self.expect_error(400, {"messages": "hi"}, path="/v1/chat/completions")
        with self.assertRaises(openai.BadRequestError) as e:
            self.greedy(temperature="hot")
        self.assertIn("temperature", str(e.exception))
        with self.assertRaises(openai.BadRequestError):
            self.greedy(n=0)
        with self.assertRaises(openai.NotFoundError) as e:
            self.greedy(model="gpt-4")
        self.assertEqual(e.exception.code, "model_not_found")
        with self.assertRaises(openai.BadRequestError) as e:
            self.greedy(max_tokens=CTX)
        self.assertEqual(e.exception.code, "context_length_exceeded")
        self.assertIn(str(CTX), str(e.exception))
        with self.assertRaises(openai.BadRequestError):
            self.greedy(n=3)  # more choices than --parallel
        self.expect_error(413, b'{"prompt": "' + b"a" * (9 << 20) + b'"}')
        self.assertEqual(server.post("/v1/nothing", {}, auth())[0], 404)

    def test_api_key(self):
        bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=1)
        with self.assertRaises(openai.AuthenticationError):
            bad.models.list()
        status, text = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
        self.assertEqual(status, 401, text)
        self.assertEqual(json.loads(text)["error"]["type"], "authentication_error")

    def test_a_full_queue_answers_429(self):
        wait_idle()

        def one(_):
            try:
                self.greedy(max_tokens=48, temperature=1.0)
                return 200
            except openai.RateLimitError:
                return 429

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            statuses = list(pool.map(one, range(10)))
        # At most 2 wait (--queue 2) besides the 2 running (--parallel 2).
        self.assertGreater(statuses.count(429), 0, statuses)
        self.assertGreaterEqual(statuses.count(200), 2, statuses)
        self.assertGreater(server.metrics()['squeeze:requests_total{status="429"}'], 0)
        wait_idle()

    def test_a_client_that_goes_away_frees_its_blocks(self):
        before = wait_idle()
        stream = self.greedy(prompt=LONG_PROMPT, max_tokens=CTX - 100, stream=True)
        for i, _ in enumerate(stream):
            if i == 3:
                break
        self.assertGreater(server.metrics()["squeeze:kv_blocks_used"], 0)
        stream.close()
        after = wait_idle(timeout=5)
        generated = after["squeeze:generated_tokens_total"] - before["squeeze:generated_tokens_total"]
        self.assertLess(generated, CTX - 100, "the sequence was cancelled, not run to its end")


class Shutdown(unittest.TestCase):
    def test_sigterm_finishes_the_stream_in_flight_and_exits_0(self):
        with start() as s:
            c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
            stream = c.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=40, temperature=0,
                                          stream=True)
            it = iter(stream)
            text = next(it).choices[0].text
            rc = {}
            stopper = threading.Thread(target=lambda: rc.setdefault("rc", s.stop()))
            stopper.start()
            time.sleep(0.2)
            try:
                late, _ = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 1})
            except OSError:
                late = None  # already closed
            self.assertNotEqual(late, 200, "a request after SIGTERM is refused")
            chunks = list(it)
            text += "".join(ch.choices[0].text for ch in chunks)
            self.assertEqual(chunks[-1].choices[0].finish_reason, "length")
            stopper.join()
            self.assertEqual(rc["rc"], 0, "".join(s.log))
            self.assertEqual(text, client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=40,
                                                             temperature=0).choices[0].text)


    def test_a_second_sigterm_cancels_the_requests_in_flight(self):
        with start() as s:
            c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
            got = {}

            def long_request():
                try:
                    c.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=CTX - 20, temperature=0)
                    got["status"] = 200
                except openai.APIStatusError as e:
                    got["status"] = e.status_code

            t = threading.Thread(target=long_request)
            t.start()
            deadline = time.monotonic() + 30
            while s.metrics()["squeeze:sequences_running"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            s.proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            self.assertEqual(s.stop(), 0, "".join(s.log))  # the second SIGTERM
            t.join()
            self.assertEqual(got["status"], 503)


if __name__ == "__main__":
    BINARY, MODEL = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
