"""HTTP cassettes side by side: dejacache vs cassetter vs vcrpy on an LLM-shaped httpx workload.

    .venv/bin/python benchmarks/bench_peers_http.py [--quick] [--json PATH]

Call ``i`` is an httpx POST of an OpenAI chat-completions body (even ``i``: ~2 KB, odd: ~20 KB;
``benchmarks/workload.py``, only the last question differs) to a loopback provider on
127.0.0.1 that answers with the ~1.2 KB ``chat.completion`` of seed ``i``. The floor is that
same POST with no tool (a real loopback round trip), measured in the same run; every ratio
divides by it. Contenders, each with its documented block API:

* dejacache: ``dejacache.cassette(path)`` with its default settings (automatic httpx
  interception; requests matched by their canonical key).
* cassetter 0.16 (Rust core): ``use_cassette(path, match_on=[method, uri, body])``, the setting
  an LLM suite needs, and its default ``[method, uri]``, which replays same-URL calls in
  recorded order.
* vcrpy: ``use_cassette(path, match_on=(..., "body"))``; it diffs the request against every
  recorded body on each call, so its rows are capped by a time budget and say so.

Rows: warm replay of an N-call cassette (the block re-entered each round, untimed; calls in
recorded order; first-tenth vs last-tenth medians show whether a call's cost grows with its
position), a cold start in fresh processes (import, then open + the last call + close), record
+ save of N calls against the live provider, and 20 recorded calls replayed in a shuffled
order with each tool's default settings. Every replayed answer is compared with the one the
provider gave for that request: a wrong one is counted and flagged WRONG, never timed away.
Replays run after the recording provider is shut down, so a call that slips through to the
network fails instead of looking like a hit.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import orjson
from _timing import Cell, machine, md_table, versions, write_json
from workload import make_request, make_response, step

HERE = pathlib.Path(__file__).resolve().parent
PATH = "/v1/chat/completions"
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench-not-a-key"}
_BASES = (make_request("2KB"), make_request("20KB"))
_TAIL = re.compile(rb"\[(\d+)\]\"\}\]\}$")
_ns = time.perf_counter_ns


# ============================================================================ workload
def body(i: int) -> bytes:
    """The bytes of call ``i``: what an SDK would send (compact JSON, keys in order)."""
    return orjson.dumps(step(_BASES[i % 2], i))


_answers: dict[int, bytes] = {}


def answer(i: int) -> bytes:
    """The provider's answer to call ``i`` (made once, shared by the server and the checks)."""
    out = _answers.get(i)
    if out is None:
        out = _answers[i] = orjson.dumps(make_response(i))
    return out


def right(i: int, content: bytes) -> bool:
    """A tool may re-encode the JSON it stored: compare values, not bytes."""
    try:
        return bool(orjson.loads(content) == orjson.loads(answer(i)))
    except orjson.JSONDecodeError:
        return False


class _Server:
    """``POST /v1/chat/completions`` on 127.0.0.1 (HTTP/1.1 keep-alive, TCP_NODELAY): the
    answer is chosen by the ``[i]`` tag that ends the request's last message."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                m = _TAIL.search(raw)
                out = answer(int(m.group(1))) if m else b'{"error": "unknown request"}'
                self.send_response(200 if m else 400)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True


def serve() -> None:
    """The provider process: print the URL, serve until stdin closes."""
    srv = _Server()
    threading.Thread(target=srv.httpd.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{srv.httpd.server_address[1]}{PATH}", flush=True)
    sys.stdin.read()
    srv.httpd.shutdown()


class Provider:
    """The loopback provider in its own process, as a real one is: in-process, its thread
    would take the GIL from the client it answers (the floor ran ~2x slower that way)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.close()
            raise RuntimeError(f"the loopback provider did not start (said {self.url!r})")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def new_client() -> httpx.Client:
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    return httpx.Client(timeout=30, transport=httpx.HTTPTransport(socket_options=nodelay))


def call(client: httpx.Client, url: str, i: int) -> bytes:
    return client.post(url, content=body(i), headers=HEADERS).content


# ============================================================================ contenders
class Contender:
    """One tool's record and replay blocks around the same httpx calls."""

    name = ""
    key = ""
    requires = ""  # the distribution the tool ships as ("" for the floor)
    ext = "json"
    by_key = True  # answers a call by its request, whatever the order (not by position)

    def missing(self) -> str | None:
        """Why this contender cannot run here, or None."""
        if not self.requires:
            return None
        from importlib.metadata import PackageNotFoundError, version
        try:
            version(self.requires)
            __import__(self.module())
        except (PackageNotFoundError, ImportError) as exc:
            return f"{self.requires} is not installed here ({exc})"
        return None

    def module(self) -> str:
        return self.requires

    def client(self) -> httpx.Client:
        return new_client()

    def load(self) -> None:
        """What a user's ``import`` line costs: the module and the block function it names."""
        __import__(self.module())

    def recording(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def replaying(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def preparing(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        """The block that writes the cassette the replay rows read (same file format)."""
        return self.recording(path)


class Floor(Contender):
    name = "httpx alone (floor)"
    key = "floor"


def _canned(request: httpx.Request) -> httpx.Response:
    m = _TAIL.search(request.content)
    assert m is not None, "not a benchmark request"
    return httpx.Response(200, headers={"content-type": "application/json"},
                          content=answer(int(m.group(1))))


class MockFloor(Floor):
    """The same httpx call answered in-process by a MockTransport: no socket, no scheduler.
    On a loaded 2-core box the loopback floor is mostly waiting for the provider process to be
    scheduled; this one is what httpx itself costs."""

    name = "httpx + MockTransport (in-process floor)"
    key = "mock_floor"

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(_canned))


class Dejacache(Contender):
    name = "dejacache"
    key = "dejacache"
    requires = "dejacache"

    def load(self) -> None:
        # ``import dejacache`` is lazy (~1 ms); the cassette machinery (~150 ms of imports)
        # loads when the name is first used, so the import phase resolves it.
        from dejacache import cassette  # noqa: F401

    def recording(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        import dejacache
        return dejacache.cassette(path, mode="record")

    def replaying(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        import dejacache
        return dejacache.cassette(path, mode="replay")


class Cassetter(Contender):
    name = "cassetter (body matching)"
    key = "cassetter_body"
    requires = "cassetter"
    # TOML, which cassetter's docs advise "when you have thousands of interactions": its default
    # YAML stores each JSON body as YAML nodes, and a YAML cassette of 1,000 of these calls does
    # not load again (its parser's 250,000-node budget; ``yaml_check`` shows it in every run).
    ext = "toml"
    match_on: ClassVar[list[str] | None] = ["method", "uri", "body"]

    def _kw(self) -> dict[str, Any]:
        return {} if self.match_on is None else {"match_on": self.match_on}

    def recording(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        import cassetter
        return cassetter.use_cassette(path, record_mode="all", **self._kw())

    def replaying(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        import cassetter
        return cassetter.use_cassette(path, record_mode="none", **self._kw())


class CassetterDefault(Cassetter):
    name = "cassetter (default matching)"
    key = "cassetter_default"
    match_on = None
    by_key = False


class Vcrpy(Contender):
    name = "vcrpy (body matching)"
    key = "vcrpy_body"
    requires = "vcrpy"
    ext = "yaml"
    match_on: ClassVar[tuple[str, ...] | None] = (
        "method", "scheme", "host", "port", "path", "query", "body")

    def module(self) -> str:
        return "vcr"

    def _vcr(self, match_on: tuple[str, ...] | None) -> Any:
        import vcr
        return vcr.VCR(**({} if match_on is None else {"match_on": match_on}))

    def recording(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        return self._vcr(self.match_on).use_cassette(str(path), record_mode="all")  # type: ignore[no-any-return]

    def replaying(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        return self._vcr(self.match_on).use_cassette(str(path), record_mode="none")  # type: ignore[no-any-return]

    def preparing(self, path: pathlib.Path) -> contextlib.AbstractContextManager[Any]:
        # With body in match_on, recording diffs each new request against every recorded one
        # (O(n^2): capped in the record row); the file is the same with the default matchers.
        return self._vcr(None).use_cassette(str(path), record_mode="all")  # type: ignore[no-any-return]


class VcrpyDefault(Vcrpy):
    name = "vcrpy (default matching)"
    key = "vcrpy_default"
    match_on = None
    by_key = False


TOOLS = (Dejacache, Cassetter, CassetterDefault, Vcrpy)
DEFAULTS = (Dejacache, CassetterDefault, VcrpyDefault, Cassetter, Vcrpy)


# ============================================================================ measurements
class Tally:
    """Per-call samples of one contender in one row, with its wrong answers and misses."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, int]] = []  # (call index, ns)
        self.wrong = 0
        self.errors: list[str] = []
        self.capped = ""

    def summary(self, n: int) -> dict[str, Any]:
        tenth = max(1, n // 10)
        first = [t for i, t in self.samples if i < tenth]
        last = [t for i, t in self.samples if i >= n - tenth]
        return {"all": Cell([t for _, t in self.samples]).as_dict(),
                "first_tenth": Cell(first).as_dict(), "last_tenth": Cell(last).as_dict(),
                "wrong": self.wrong, "errors": len(self.errors),
                "first_error": self.errors[0] if self.errors else None,
                "capped": self.capped or None}


def timed_calls(client: httpx.Client, url: str, order: list[int], tally: Tally,
                cap: float) -> None:
    """Time each call of ``order`` and check its answer; stop past ``cap`` seconds."""
    start = time.perf_counter()
    for i in order:
        try:
            t0 = _ns()
            content = call(client, url, i)
            tally.samples.append((i, _ns() - t0))
        except Exception as exc:  # a miss or a refused connection: counted, never timed
            tally.errors.append(f"call {i}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        if not right(i, content):
            tally.wrong += 1
        if time.perf_counter() - start > cap:
            tally.capped = f"stopped after {cap:.0f} s"
            return


def warm_replay(cs: list[Contender], paths: dict[str, pathlib.Path], url: str, floor_url: str,
                n: int, budget: float, cap: float) -> dict[str, Any]:
    """Round-robin rounds (order rotated each round): each contender opens its block (untimed),
    replays the N calls in recorded order, closes it. A contender whose round passes ``cap`` is
    retired; if it matches by body, one more capped pass times the last tenth on its own."""
    tallies = {c.key: Tally() for c in cs}
    clients = {c.key: c.client() for c in cs}
    for c in cs:  # one untimed round each: imports, connections, lazy state
        with c.replaying(paths.get(c.key, pathlib.Path())):
            timed_calls(clients[c.key], floor_url if isinstance(c, Floor) else url,
                        list(range(min(n, 10))), Tally(), cap)
    gc.collect()
    deadline = time.perf_counter() + budget
    rnd = 0
    while True:
        live = [c for c in cs if not tallies[c.key].capped]
        if not live or (rnd >= 3 and time.perf_counter() > deadline):
            break
        k = rnd % len(live)
        for c in live[k:] + live[:k]:
            with c.replaying(paths.get(c.key, pathlib.Path())):
                timed_calls(clients[c.key], floor_url if isinstance(c, Floor) else url,
                            list(range(n)), tallies[c.key], cap)
        rnd += 1
    for c in cs:
        t = tallies[c.key]
        if t.capped and c.by_key and n >= 20:
            late = Tally()
            with c.replaying(paths[c.key]):
                timed_calls(clients[c.key], url, list(range(n - n // 10, n)), late, cap)
            t.samples += late.samples
            t.wrong += late.wrong
            t.errors += late.errors
            t.capped += "; then a capped pass over the last tenth"
        clients[c.key].close()
    return {c.key: {"rounds": rnd, **tallies[c.key].summary(n)} for c in cs}


def record_row(c: Contender, url: str, path: pathlib.Path, n: int, cap: float,
               prepare: bool = False) -> dict[str, Any]:
    """Record ``n`` live calls into a fresh file, the save at block exit included."""
    if path.exists():
        path.unlink()
    client = new_client()
    done = wrong = 0
    gc.collect()
    t0 = time.perf_counter()
    with c.preparing(path) if prepare else c.recording(path):
        for i in range(n):
            if not right(i, call(client, url, i)):
                wrong += 1
            done += 1
            if time.perf_counter() - t0 > cap:
                break
    secs = time.perf_counter() - t0
    client.close()
    return {"n": n, "recorded": done, "seconds": round(secs, 3), "wrong": wrong,
            "capped": None if done == n else f"stopped after {cap:.0f} s at {done:,} calls",
            "file_bytes": path.stat().st_size if path.exists() else None}


def yaml_check(toml_path: pathlib.Path, n: int) -> dict[str, Any]:
    """Does cassetter load its default (YAML) format of the same ``n``-call cassette?"""
    import cassetter
    from cassetter.cli import convert_file

    yaml_path = toml_path.with_suffix(".yaml")
    convert_file(toml_path, yaml_path, scrub=False)
    out: dict[str, Any] = {"n": n, "file_bytes": yaml_path.stat().st_size}
    try:
        with cassetter.use_cassette(yaml_path, record_mode="none"):
            pass
    except Exception as exc:  # what a user of the default format gets
        first = str(exc).splitlines()[0].replace(str(yaml_path.parent) + "/", "")
        return {**out, "loads": False, "error": f"{type(exc).__name__}: {first[:300]}"}
    finally:
        yaml_path.unlink(missing_ok=True)
    return {**out, "loads": True, "error": None}


_CHILD = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import bench_peers_http as b
c = {k.key: k for k in (x() for x in b.DEFAULTS)}[sys.argv[2]]
path, url, i = b.pathlib.Path(sys.argv[3]), sys.argv[4], int(sys.argv[5])
client = b.new_client()
t1 = time.perf_counter()
c.load()
t2 = time.perf_counter()
with c.replaying(path):
    t3 = time.perf_counter()
    try:
        content, err = b.call(client, url, i), None
    except Exception as exc:
        content, err = b"", f"{type(exc).__name__}: {str(exc)[:200]}"
    t4 = time.perf_counter()
t5 = time.perf_counter()
print(json.dumps({"bench_import_ms": (t1 - t0) * 1e3, "import_ms": (t2 - t1) * 1e3,
                  "open_ms": (t3 - t2) * 1e3, "call_ms": (t4 - t3) * 1e3,
                  "close_ms": (t5 - t4) * 1e3, "total_ms": (t5 - t2) * 1e3,
                  "right": err is None and b.right(i, content), "error": err}))
"""


def cold(c: Contender, path: pathlib.Path, url: str, n: int, runs: int,
         timeout: float) -> dict[str, Any]:
    """Fresh processes: import the tool, open the N-call cassette, make call N-1, close."""
    out: list[dict[str, Any]] = []
    # Bytecode cached, as on a developer's machine: the first child (discarded) writes it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for k in range(runs + 1):
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD, str(HERE), c.key, str(path), url,
                                   str(n - 1)], capture_output=True, text=True, timeout=timeout,
                                  env=env)
        except subprocess.TimeoutExpired:
            return {"capped": f"> {timeout:.0f} s (child killed)", "runs": out}
        if proc.returncode != 0:
            return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1], "runs": out}
        if k:
            out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"runs": out, **{k: sorted(r[k] for r in out)[len(out) // 2]
                            for k in ("import_ms", "open_ms", "call_ms", "close_ms", "total_ms")},
            "wrong": sum(not r["right"] for r in out if r["error"] is None),
            "errors": sum(r["error"] is not None for r in out)}


def reordered(c: Contender, url: str, tmp: pathlib.Path, n: int = 20) -> dict[str, Any]:
    """Record ``n`` calls in order, replay them in one seeded shuffle; count wrong answers."""
    path = tmp / f"reorder-{c.key}.{c.ext}"
    rec = record_row(c, url, path, n, cap=60)
    order = list(range(n))
    random.Random(f"dejacache-bench-reorder/{n}").shuffle(order)
    tally = Tally()
    with new_client() as client, c.replaying(path):
        timed_calls(client, url, order, tally, cap=60)
    return {"n": n, "order": order, "fixed_points": sum(i == k for k, i in enumerate(order)),
            "wrong": tally.wrong, "errors": len(tally.errors),
            "first_error": tally.errors[0] if tally.errors else None,
            "recorded_wrong": rec["wrong"]}


# ============================================================================ report
def _us(cell: dict[str, Any]) -> str:
    m = cell.get("median_us")
    if m is None or m != m:
        return "-"
    return f"{m:,.0f}" if m >= 100 else f"{m:.1f}"


def _flag(d: dict[str, Any]) -> str:
    notes = []
    if d.get("wrong"):
        notes.append(f"WRONG x{d['wrong']}")
    if d.get("errors"):
        notes.append(f"{d['errors']} errors")
    return f" ({', '.join(notes)})" if notes else ""


def markdown(doc: dict[str, Any]) -> str:
    names = doc["names"]
    lines = ["## HTTP cassettes: dejacache vs cassetter vs vcrpy (httpx, loopback provider)\n",
             f"{doc['machine']}; {doc['versions']}\n"]
    for row in doc["replay"]:
        fl = row["results"]["floor"]["all"]["median_us"]
        mf = row["results"]["mock_floor"]["all"]["median_us"]
        rows = []
        for key, d in row["results"].items():
            m = d["all"]["median_us"]
            rows.append([names[key], _us(d["all"]) + _flag(d), _us(d["first_tenth"]),
                         _us(d["last_tenth"]), f"{m / fl:.2f}x" if m == m and fl else "-",
                         f"{m / mf:.2f}x" if m == m and mf else "-",
                         d["all"]["n"], d.get("capped") or ""])
        lines += [f"### Warm replay, N = {row['n']:,} calls in one cassette (µs per call)\n",
                  md_table(["contender", "median", "first tenth", "last tenth", "vs floor",
                            "vs in-process floor", "calls timed", "note"], rows), ""]
    rows = []
    for key, d in doc["cold"]["results"].items():
        if "total_ms" in d:
            rows.append([names[key], f"{d['import_ms']:.0f}", f"{d['open_ms']:.1f}",
                         f"{d['call_ms']:.1f}", f"{d['close_ms']:.1f}",
                         f"{d['total_ms']:.1f}{_flag(d)}"])
        else:
            rows.append([names[key], "-", "-", "-", "-", d.get("capped") or d.get("error")])
    lines += [f"### Cold start, N = {doc['cold']['n']:,} (fresh processes, median ms)\n",
              md_table(["contender", "import", "open", "late call", "close",
                        "open + call + close"], rows), ""]
    for row in doc["record"]:
        rows = [[names[k], "skipped" if d.get("skipped") else
                 (f"> {d['seconds']:.1f}" if d.get("capped") else f"{d['seconds']:.2f}"),
                 d.get("skipped") or d.get("capped") or ""] for k, d in row["results"].items()]
        lines += [f"### Record + save, N = {row['n']:,} calls (s)\n",
                  md_table(["contender", "seconds", "note"], rows), ""]
    rows = [[names[k], f"{d['wrong']} / {d['n']}", d["errors"]]
            for k, d in doc["reorder"].items()]
    fixed = next(iter(doc["reorder"].values()))["fixed_points"]
    lines += [f"### 20 recorded calls replayed in a shuffled order ({fixed} left in place)\n",
              md_table(["contender", "wrong answers", "errors"], rows), ""]
    y = doc.get("cassetter_yaml")
    if y:
        lines += [f"cassetter's default YAML format, same {y['n']:,}-call cassette: "
                  + ("loads." if y["loads"] else f"does not load ({y['error']})."), ""]
    return "\n".join(lines)


# ============================================================================ main
def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {"replay_n": (10, 100), "budget": 2.0, "cap": 3.0, "cold_n": 100, "cold_runs": 1,
                "cold_timeout": 30.0, "record_n": (100, 1_000), "record_cap": 6.0}
    return {"replay_n": (10, 1_000), "budget": 20.0, "cap": 15.0, "cold_n": 1_000,
            "cold_runs": 3, "cold_timeout": 120.0, "record_n": (1_000, 10_000),
            "record_cap": 180.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller N, shorter budgets (< 2 min)")
    ap.add_argument("--json", default=None, help="write machine-readable results here")
    ap.add_argument("--keep", default=None, help="keep the cassettes in this directory")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="only cProfile one dejacache replay of an N-call cassette")
    a = ap.parse_args(argv)
    if a.serve:
        serve()
        return 0
    if a.profile:
        profile(a.profile)
        return 0
    p = plan(a.quick)
    tmp = pathlib.Path(a.keep or tempfile.mkdtemp(prefix="dejacache-bench-peers-"))
    tmp.mkdir(parents=True, exist_ok=True)
    every = [k() for k in (Floor, MockFloor, *TOOLS, VcrpyDefault)]
    skipped = {c.key: why for c in every if (why := c.missing())}
    for key, why in skipped.items():
        print(f"skipping {key}: {why}", file=sys.stderr)
    tools = [c for c in (k() for k in TOOLS) if c.key not in skipped]
    defaults = [c for c in (k() for k in DEFAULTS) if c.key not in skipped]
    try:
        doc = run(p, tmp, tools, defaults)
    finally:
        if a.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    doc.update(names={c.key: c.name for c in every}, skipped=skipped, machine=machine(),
               versions=versions("dejacache", "cassetter", "vcrpy", "httpx", "orjson"))
    print(markdown(doc))
    write_json(a.json, "peers_http", doc, quick=a.quick)
    return 0


def profile(n: int) -> None:
    """cProfile one dejacache replay round of an ``n``-call cassette (open, n calls, close)."""
    import cProfile
    import pstats

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="dejacache-bench-peers-profile-"))
    c = Dejacache()
    rec = Provider()
    try:
        record_row(c, rec.url, tmp / "p.json", n, cap=3600)
    finally:
        rec.close()
    client = new_client()
    with c.replaying(tmp / "p.json"):  # warm: imports and lazy state
        timed_calls(client, rec.url, list(range(n)), Tally(), cap=3600)
    tally = Tally()
    prof = cProfile.Profile()
    prof.enable()
    with c.replaying(tmp / "p.json"):
        timed_calls(client, rec.url, list(range(n)), tally, cap=3600)
    prof.disable()
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"dejacache replay of {n} calls: median {Cell([t for _, t in tally.samples]).median:.0f}"
          f" µs/call under cProfile, {tally.wrong} wrong, {len(tally.errors)} errors")
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(15)
    stats.sort_stats("tottime").print_stats(10)


def run(p: dict[str, Any], tmp: pathlib.Path, tools: list[Contender],
        defaults: list[Contender]) -> dict[str, Any]:
    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    rec = Provider()
    url = rec.url
    doc: dict[str, Any] = {"url_port_fixed_per_run": url, "plan": p, "record": [], "replay": []}
    paths: dict[int, dict[str, pathlib.Path]] = {}
    try:
        for n in p["replay_n"]:  # the cassettes the replay rows read (untimed)
            paths[n] = {}
            for c in tools:
                paths[n][c.key] = tmp / f"replay-{n}-{c.key}.{c.ext}"
                log(f"preparing {c.key} N={n}")
                r = record_row(c, url, paths[n][c.key], n, cap=3600, prepare=True)
                assert r["wrong"] == 0 and r["capped"] is None, r
        timed = [Floor(), *tools]
        for n in p["record_n"]:
            results: dict[str, Any] = {}
            order = timed[:]
            random.Random(n).shuffle(order)
            for c in order:
                prev = doc["record"][-1]["results"].get(c.key) if doc["record"] else None
                if prev and prev.get("capped"):
                    results[c.key] = {"n": n, "skipped": f"capped at N = {prev['n']:,}"}
                    continue
                log(f"record {c.key} N={n}")
                path = tmp / f"record-{n}-{c.key}.{c.ext}"
                results[c.key] = record_row(c, url, path, n, p["record_cap"])
                path.unlink(missing_ok=True)
            doc["record"].append({"n": n, "results": {c.key: results[c.key] for c in timed}})
        log("reordered replay")
        doc["reorder"] = {c.key: reordered(c, url, tmp) for c in defaults}
    finally:
        rec.close()  # from here on, a call that reaches the network fails
    floor = Provider()
    try:
        for n in p["replay_n"]:
            log(f"warm replay N={n}")
            doc["replay"].append({"n": n, "results": warm_replay(
                [Floor(), MockFloor(), *tools], paths[n], url, floor.url, n, p["budget"],
                p["cap"])})
    finally:
        floor.close()
    n = p["cold_n"]
    log(f"cold N={n}")
    doc["cold"] = {"n": n, "results": {c.key: cold(c, paths[n][c.key], url, n, p["cold_runs"],
                                                   p["cold_timeout"]) for c in tools}}
    if "cassetter_body" in paths[n]:
        doc["cassetter_yaml"] = yaml_check(paths[n]["cassetter_body"], n)
    return doc


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
