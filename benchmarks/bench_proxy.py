"""``dejacache proxy`` replaying, per call, against the floor and against aimock.

One Node client (``benchmarks/node/client.mjs``: sequential keep-alive ``fetch``, one call
timed at a time) sends the same 1,000 chat-completion requests, each a different prompt, to:

- **floor (python)**: a minimal asyncio server answering from memory the bytes the proxy
  answers the first call with (status line, headers and body, captured from the proxy), the
  language the proxy is written in;
- **floor (node)**: the same status, headers and body from Node's ``http`` (the fastest
  loopback answer at hand; Node adds its own ``Connection``/``Keep-Alive`` headers);
- **dejacache**: ``dejacache proxy`` replaying a cassette of those 1,000 calls, recorded
  through it by the same client against the loopback provider of tests/http;
- **aimock** (``@copilotkit/aimock``, its users' setup): one fixture per prompt, matched on
  the last user message, answering the recorded text.

The targets are interleaved in batches in one client process, round after round (a fresh
replay session each round: a cassette answers each recorded call once), so each sees the same
moments of a busy machine. Flatness: the median of each target's first 100 timed calls
against its last 100. ``--json PATH`` writes the results (``benchmarks/results/proxy.json``
in a full run); the Node side is installed with ``npm ci`` in benchmarks/node when missing.
``--baseline SRC`` adds **dejacache (baseline)**: a second proxy running the ``src/`` of
another checkout (``git archive main src | tar -x -C /tmp/base``), replaying the same cassette
in the same interleaved run, for a before/after comparison on a busy machine.

    .venv/bin/python benchmarks/bench_proxy.py [--quick] [--json PATH] [--baseline SRC]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
NODE = HERE / "node"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "http"))

from _timing import write_json  # noqa: E402

PATH = "/v1/chat/completions"
BASELINE = "dejacache (baseline)"


# ---------------------------------------------------------------- the Python floor


class _Floor(asyncio.Protocol):
    """Reads a request (head, Content-Length body) and answers ``ANSWER``: the least a
    server on asyncio does per call."""

    answer = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buf[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            self.transport.write(self.answer)


async def _serve_floor(answer: bytes) -> None:
    _Floor.answer = answer
    server = await asyncio.get_running_loop().create_server(_Floor, "127.0.0.1", 0)
    print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


# ---------------------------------------------------------------- processes


@contextmanager
def _server(argv: list[str], cwd: pathlib.Path | None = None) -> Iterator[tuple[str, int]]:
    """A server process that prints its base URL first: (its URL, its pid); stopped on
    exit."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=cwd)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"{argv[:3]} did not start")
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cpu(pid: int) -> float:
    """Seconds of CPU process ``pid`` has used (Linux's /proc; NaN elsewhere). A server's
    CPU per call does not grow with the machine's load as its latency does."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _node_ready() -> None:
    if shutil.which("node") is None:
        raise SystemExit("bench_proxy needs node (>= 20) on PATH")
    if not (NODE / "node_modules" / "@copilotkit" / "aimock").is_dir():
        subprocess.run(["npm", "ci", "--prefer-offline", "--no-audit", "--no-fund"], cwd=NODE,
                       check=True)


def _client(targets: dict[str, str], bodies: list[str], warmup: int, tmp: pathlib.Path,
            batch: int = 50) -> dict[str, list[float]]:
    spec = tmp / "spec.json"
    spec.write_text(json.dumps({"targets": targets, "bodies": bodies, "warmup": warmup,
                                "batch": batch}))
    out = subprocess.run(["node", str(NODE / "client.mjs"), str(spec)], capture_output=True,
                         text=True, check=False, cwd=NODE)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    got: dict[str, list[float]] = json.loads(out.stdout)
    return got


# ---------------------------------------------------------------- the run


def _record(p: Any, url: str, bodies: list[str], tmp: pathlib.Path) -> list[str]:
    """The cassette of every call, recorded through the proxy; each answer's text."""
    s = p.session("bench.json", mode="record", upstreams={"openai": url})
    _client({"record": s.base_url("openai") + PATH}, bodies, 0, tmp, batch=len(bodies))
    summary = s.close(ok=True)
    assert summary["recorded"] == len(bodies), summary
    doc = json.loads(s.cassette.read_text())
    answers = [_json_of(e["response"], doc.get("values", {})) for e in doc["entries"]]
    return [a["choices"][0]["message"]["content"] for a in answers]


def _wire_answer(url: str, body: str) -> bytes:
    """The bytes ``url`` answers ``body`` with (a POST on a connection of its own): what the
    floors send for every call, so they answer what the proxy answers, byte for byte."""
    import socket
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    data = body.encode()
    with socket.create_connection((u.hostname, u.port), timeout=30) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
                     b"authorization: Bearer sk-bench\r\ncontent-length: %d\r\n"
                     b"connection: close\r\n\r\n%s" % (
                         u.path.encode(), u.netloc.encode(), len(data), data))
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks)
    if not answer.startswith(b"HTTP/1.1 200 "):
        raise RuntimeError(f"the proxy did not replay the first call: {answer[:300]!r}")
    return answer


def _json_of(response: dict[str, Any], values: dict[str, Any]) -> Any:
    body = response["json"]
    if isinstance(body, str) and body.startswith("@ref:"):
        body = values[body[5:]]
    return body


def _stats(samples: list[list[float]], cpu_s: float, served: int) -> dict[str, float]:
    every = [x for run in samples for x in run]
    first = [x for run in samples for x in run[:100]]
    last = [x for run in samples for x in run[-100:]]
    ordered = sorted(every)
    return {"median_us": round(statistics.median(every), 1),
            "p99_us": round(ordered[round(0.99 * (len(ordered) - 1))], 1),
            "first100_median_us": round(statistics.median(first), 1),
            "last100_median_us": round(statistics.median(last), 1), "n": len(every),
            "server_cpu_us": round(cpu_s / served * 1e6, 1)}


def run(calls: int, rounds: int, warmup: int = 50, baseline: str | None = None
        ) -> dict[str, Any]:
    from fake_provider import FakeProvider

    import dejacache

    _node_ready()
    bodies = [json.dumps({"model": "gpt-4o-mini",
                          "messages": [{"role": "user", "content": f"Question {i:04d}."}]})
              for i in range(warmup + calls)]
    samples: dict[str, list[list[float]]] = {}
    cpu: dict[str, float] = {}  # each server's CPU seconds while the client ran
    with tempfile.TemporaryDirectory(prefix="dejacache-bench-proxy-") as d:
        tmp = pathlib.Path(d)
        env = {**os.environ, "DEJACACHE_SECRET_KEY": "dejacache-bench",
               "DEJACACHE_DIR": str(tmp / ".dejacache")}
        env.pop("CI", None)
        fake = FakeProvider().start()
        try:
            with dejacache.proxy(cassette_dir=tmp, env=env) as p:
                texts = _record(p, fake.url, bodies, tmp)
                s = p.session("bench.json", mode="replay",
                              upstreams={"openai": "http://127.0.0.1:9"})
                (tmp / "answer.http").write_bytes(_wire_answer(s.base_url("openai") + PATH,
                                                               bodies[0]))
                s.close(ok=False)
                fixtures = [[f"Question {i:04d}.", t] for i, t in enumerate(texts)]
                (tmp / "fixtures.json").write_text(json.dumps(fixtures))
                fake.stop()
                with _server([sys.executable, __file__, "--floor", str(tmp / "answer.http")]) \
                        as (floor_py, py_pid), \
                        _server(["node", str(NODE / "floor_server.mjs"),
                                 str(tmp / "answer.http")]) as (floor_node, node_pid), \
                        _server(["node", str(NODE / "aimock_server.mjs"),
                                 str(tmp / "fixtures.json")], cwd=NODE) as (aimock, mock_pid), \
                        contextlib.ExitStack() as stack:
                    proxies = {"dejacache": p}
                    if baseline is not None:
                        proxies[BASELINE] = stack.enter_context(dejacache.proxy(
                            cassette_dir=tmp, env={**env, "PYTHONPATH": baseline}))
                    pids = {"floor (python)": py_pid, "floor (node)": node_pid,
                            "aimock": mock_pid, **{n: q.proc.pid for n, q in proxies.items()}}
                    for _ in range(rounds):
                        sessions = {n: q.session("bench.json", mode="replay",
                                                 upstreams={"openai": "http://127.0.0.1:9"})
                                    for n, q in proxies.items()}
                        before = {n: _cpu(pid) for n, pid in pids.items()}
                        got = _client({"floor (python)": floor_py + PATH,
                                       "floor (node)": floor_node + PATH,
                                       **{n: s.base_url("openai") + PATH
                                          for n, s in sessions.items()},
                                       "aimock": aimock + PATH}, bodies, warmup, tmp)
                        for n, pid in pids.items():
                            cpu[n] = cpu.get(n, 0.0) + _cpu(pid) - before[n]
                        for s in sessions.values():
                            summary = s.close(ok=False)
                            assert summary["missed"] == 0, summary["misses"][:1]
                        for name, xs in got.items():
                            samples.setdefault(name, []).append(xs)
        finally:
            fake.stop()
    served = rounds * len(bodies)  # warm-up calls included: the CPU counts them too
    targets = {name: _stats(runs, cpu[name], served) for name, runs in samples.items()}
    d = targets["dejacache"]
    ratios = {f"dejacache / {name}": round(d["median_us"] / t["median_us"], 2)
              for name, t in targets.items() if name != "dejacache"}
    ratios.update({f"dejacache / {name}, server CPU": round(
        d["server_cpu_us"] / t["server_cpu_us"], 2)
        for name, t in targets.items() if name != "dejacache" and t["server_cpu_us"] > 0})
    return {"calls": calls, "rounds": rounds, "warmup": warmup, "targets": targets,
            "ratios": ratios, "versions": _versions()}


def _versions() -> str:
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    lock = json.loads((NODE / "package-lock.json").read_text())
    aimock = lock["packages"]["node_modules/@copilotkit/aimock"]["version"]
    import dejacache

    return f"dejacache {dejacache.__version__}, node {node}, @copilotkit/aimock {aimock}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 calls, one round (smoke run)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--baseline", default=None, metavar="SRC",
                    help="also measure a proxy running this src/ directory (before/after)")
    ap.add_argument("--floor", default=None, help=argparse.SUPPRESS)  # the floor's process
    a = ap.parse_args(argv)
    if a.floor:
        asyncio.run(_serve_floor(pathlib.Path(a.floor).read_bytes()))
        return 0
    result = run(calls=200 if a.quick else 1000, rounds=1 if a.quick else 5,
                 baseline=str(pathlib.Path(a.baseline).resolve()) if a.baseline else None)
    doc = write_json(a.json, "proxy", result, quick=a.quick)
    import render

    print("## The proxy (`benchmarks/bench_proxy.py`)\n")
    print(render.block_proxy({"proxy": doc}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
