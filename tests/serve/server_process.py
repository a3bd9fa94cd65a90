"""An OpenAI-compatible server as a child process on a loopback port: `squeeze serve` or
llama.cpp's `llama-server`. Used by tests/serve/openai_client_test.py and bench/serve_load.py."""

import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request


class Server:
    def __init__(self, argv, port=None, ready_timeout=120.0):
        """Starts argv. With port None the command must print its address as
        'http://HOST:PORT' on stderr (squeeze serve --port 0 does); else it listens on port."""
        self.argv = argv
        self.log = []
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        found = threading.Event()
        self.port = port

        def drain():
            for line in self.proc.stderr:
                self.log.append(line)
                if self.port is None:
                    m = re.search(r"http://[^:\s]+:(\d+)", line)
                    if m:
                        self.port = int(m.group(1))
                        found.set()
            found.set()

        self._reader = threading.Thread(target=drain, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + ready_timeout
        if port is None:
            found.wait(ready_timeout)
            if self.port is None:
                self.kill()
                raise RuntimeError("the server printed no address:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n" + "".join(self.log))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("the server did not become healthy:\n" + "".join(self.log))
            time.sleep(0.1)

    def get(self, path, headers=None):
        """(status, body text) of GET path."""
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path, body, headers=None):
        """(status, body text) of POST path with body (bytes, or an object sent as JSON)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metrics(self):
        """GET /metrics as {name or name{labels}: value}."""
        status, text = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self, timeout=60.0):
        """SIGTERM, then the exit status (SIGKILL and an error when it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("the server did not exit after SIGTERM: " + " ".join(self.argv) +
                               "\n" + "".join(self.log[-20:]))
        self._reader.join(5)
        self.proc.stderr.close()
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self._reader.join(5)
            self.proc.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
