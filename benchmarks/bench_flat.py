"""Cost per call in one long cassette block: flat, or growing with the calls already made?

For 10 / 1,000 / 10,000 calls in one ``with dejacache.cassette(...)`` block, each cell in a
fresh interpreter: record the calls (then save the file at the block's exit), and replay
them in another fresh interpreter. Per cell: the median cost of a call in the first tenth of
the block and in the last tenth, and their ratio (goal: <= 1.2, the cost does not grow with
the block; the block's first call, which pays the lazy imports and the file's open, is left
out), plus the block's exit (recording: the save) and the whole block.

Faces:

* ``httpx sync`` / ``httpx async``: a plain ``httpx.Client`` / ``AsyncClient`` (automatic
  interception) posting agent-shaped chat requests (``workload.make_request``, 2 KB, each
  made distinct by ``workload.step``) to the loopback provider the HTTP tests use
  (``tests/http/fake_provider.py``), which answers each with a fresh tool-call id; the next
  request carries that id back, as an agent sends a tool result (so id aliasing is in play).
  Replay runs with the provider stopped: nothing may connect.
* ``@cache``: a decorated function taking the same requests and returning a ~1.2 KB
  ``chat.completion`` (``workload.make_response``) inside the block.

If 10,000 calls of a face would take more than ~60 s (estimated from its 1,000-call
recording), its 10,000 cells use a 200-byte request instead, and the output says so.

    .venv/bin/python benchmarks/bench_flat.py [--quick] [--json PATH] [--src DIR]

``--src DIR`` runs the cells against another copy of ``src/``; ``--before DIR`` runs every
cell against that copy too, interleaved cell by cell (the numbers before a change:
``git archive <commit> src | tar -x -C DIR``, then ``--before DIR/src``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import orjson  # noqa: E402
import xxhash  # noqa: E402
from _timing import md_table, versions, write_json  # noqa: E402

FACES = ("httpx sync", "httpx async", "@cache")
SIZES = (10, 1_000, 10_000)
QUICK_SIZES = (10, 250, 1_000)
GOAL = 1.2  # last tenth / first tenth
BUDGET_S = 60.0  # a 10,000-call cell estimated above this uses the small request
SMALL = "small"  # the smaller per-call workload's name


# ---------------------------------------------------------------- the child (one cell)


def _provider() -> Any:
    """The HTTP tests' loopback provider, its answers sent without Nagle's delay (the
    handler writes headers and body apart: with the client's delayed ACK each JSON answer
    waited ~40 ms, and every cell measured that)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "http")]
    from loopback_provider import fake_provider_module

    base = fake_provider_module().FakeProvider
    handler = type("NoDelayHandler", (base.handler,), {"disable_nagle_algorithm": True})
    return type("FlatProvider", (base,), {"handler": handler})()


def _requests(workload: str) -> Callable[[int, str | None], dict[str, Any]]:
    from workload import make_request, step

    if workload == SMALL:
        base: dict[str, Any] = {"model": "gpt-4o-mini", "tools": [{"type": "function", "function": {
            "name": "search", "parameters": {"type": "object", "properties": {}}}}],
            "messages": [{"role": "user", "content": "find a flight"}]}
    else:
        base = make_request("2KB", 0)

    def request(i: int, prev_id: str | None) -> dict[str, Any]:
        r = step(base, i)
        if prev_id is None:
            return r
        msgs = r["messages"]
        # the previous answer's tool call and its result, before the new question
        call = {"id": prev_id, "type": "function",
                "function": {"name": "search", "arguments": "{}"}}
        return {**r, "messages": [*msgs[:-1],
                                  {"role": "assistant", "content": None, "tool_calls": [call]},
                                  {"role": "tool", "tool_call_id": prev_id,
                                   "content": f"3 flights ({prev_id})"},
                                  msgs[-1]]}

    return request


def _tool_call_id(body: bytes) -> str | None:
    msg = orjson.loads(body)["choices"][0]["message"]
    calls = msg.get("tool_calls") or []
    return str(calls[0]["id"]) if calls else None


class _Canned:
    """The replay floor's server: hands back the bytes it is given (an httpx
    ``MockTransport``, which interception does not touch)."""

    def __init__(self) -> None:
        import httpx

        self.body = b""
        self.transport = httpx.MockTransport(self.answer)
        self.atransport = httpx.MockTransport(self.aanswer)

    def answer(self, request: Any) -> Any:
        import httpx

        return httpx.Response(200, content=self.body,
                              headers={"content-type": "application/json"})

    async def aanswer(self, request: Any) -> Any:
        return self.answer(request)


def _cell_http_sync(path: str, mode: str, n: int, url: str, request: Any) -> dict[str, Any]:
    import httpx

    import dejacache
    from dejacache.http.transport import handing_on

    ns = time.perf_counter_ns
    times: list[int] = []
    floors: list[int] = []
    prev = None
    canned = _Canned()
    with httpx.Client(timeout=30) as client, httpx.Client(transport=canned.transport) as mock:
        t_block = ns()
        with dejacache.cassette(path, mode=mode):
            for i in range(n):
                body = request(i, prev)
                t0 = ns()
                r = client.post(url, json=body)
                t1 = ns()
                r.raise_for_status()
                if mode == "record":  # the floor: the same live call, let through
                    with handing_on():
                        t2 = ns()
                        client.post(url, json=body).raise_for_status()
                        t3 = ns()
                else:  # the floor: the same call answered with the same bytes, no socket
                    canned.body = r.content
                    t2 = ns()
                    mock.post(url, json=body).raise_for_status()
                    t3 = ns()
                times.append(t1 - t0)
                floors.append(t3 - t2)
                prev = _tool_call_id(r.content)
            t_exit = ns()
        t_end = ns()
    return {"times": times, "floors": floors, "exit_ns": t_end - t_exit,
            "block_ns": t_end - t_block}


def _cell_http_async(path: str, mode: str, n: int, url: str, request: Any) -> dict[str, Any]:
    import httpx

    import dejacache
    from dejacache.http.transport import handing_on

    ns = time.perf_counter_ns

    async def run() -> dict[str, Any]:
        times: list[int] = []
        floors: list[int] = []
        prev = None
        canned = _Canned()
        async with httpx.AsyncClient(timeout=30) as client, \
                httpx.AsyncClient(transport=canned.atransport) as mock:
            t_block = ns()
            async with dejacache.cassette(path, mode=mode):
                for i in range(n):
                    body = request(i, prev)
                    t0 = ns()
                    r = await client.post(url, json=body)
                    t1 = ns()
                    r.raise_for_status()
                    if mode == "record":
                        with handing_on():
                            t2 = ns()
                            (await client.post(url, json=body)).raise_for_status()
                            t3 = ns()
                    else:
                        canned.body = r.content
                        t2 = ns()
                        (await mock.post(url, json=body)).raise_for_status()
                        t3 = ns()
                    times.append(t1 - t0)
                    floors.append(t3 - t2)
                    prev = _tool_call_id(r.content)
                t_exit = ns()
            t_end = ns()
        return {"times": times, "floors": floors, "exit_ns": t_end - t_exit,
                "block_ns": t_end - t_block}

    return asyncio.run(run())


def _cell_cache(path: str, mode: str, n: int, request: Any) -> dict[str, Any]:
    from workload import make_response

    import dejacache

    answers = [make_response(i) for i in range(n)] if mode == "record" else []
    requests = [request(i, None) for i in range(n)]

    # ``answers`` (a list) is all the function captures: a captured ``mode`` (a str) would
    # be keyed with the call, as what a closure was made with is, and no replay would match.
    @dejacache.cache(name="llm", kind="llm")
    def llm(req: dict[str, Any], i: int) -> dict[str, Any]:
        if not answers:
            raise AssertionError("a replay ran the function")
        return answers[i]

    # the floor: a plain orjson(sorted) + xxh3 key of the request and a dict (bench_cassette's)
    table: dict[str, Any] = {}
    opt = orjson.OPT_SORT_KEYS

    def floor(req: dict[str, Any], i: int) -> Any:
        key = xxhash.xxh3_128_hexdigest(orjson.dumps(req, option=opt))
        if mode == "record":
            table[key] = orjson.dumps(answers[i])
        return orjson.loads(table.get(key, b"null"))

    ns = time.perf_counter_ns
    times: list[int] = []
    floors: list[int] = []
    t_block = ns()
    with dejacache.cassette(path, mode=mode):
        for i in range(n):
            req = requests[i]
            t0 = ns()
            llm(req, i)
            t1 = ns()
            floor(req, i)
            t2 = ns()
            times.append(t1 - t0)
            floors.append(t2 - t1)
        t_exit = ns()
    t_end = ns()
    return {"times": times, "floors": floors, "exit_ns": t_end - t_exit,
            "block_ns": t_end - t_block}


def child(face: str, mode: str, n: int, path: str, workload: str) -> dict[str, Any]:
    request = _requests(workload)
    if face == "@cache":
        out = _cell_cache(path, mode, n, request)
    else:
        server = _provider()
        if mode == "record":
            server.start()
        # replay: the provider is not started (nothing listens), so a call that went live
        # would fail the cell
        url = (server.url if mode == "record" else "http://127.0.0.1:9") + \
            "/v1/chat/completions"
        try:
            cell = _cell_http_sync if face == "httpx sync" else _cell_http_async
            out = cell(path, mode, n, url, request)
        finally:
            if mode == "record":
                server.stop()
    return out


# ---------------------------------------------------------------- the parent


def _summary(face: str, mode: str, n: int, workload: str, raw: dict[str, Any],
             path: pathlib.Path) -> dict[str, Any]:
    # The block's first call is left out: it pays the lazy imports and the file's open,
    # which a block pays once whatever its length.
    times, floors = raw["times"][1:], raw["floors"][1:]
    k = max(1, len(times) // 10)
    first = statistics.median(times[:k]) / 1000
    last = statistics.median(times[-k:]) / 1000
    f_first = statistics.median(floors[:k]) / 1000
    f_last = statistics.median(floors[-k:]) / 1000
    per = [t / max(f, 1) for t, f in zip(times, floors, strict=True)]
    return {"face": face, "mode": mode, "n": n, "workload": workload,
            "first_tenth_us": round(first, 1), "last_tenth_us": round(last, 1),
            "ratio": round(last / first, 3),
            "floor_first_tenth_us": round(f_first, 1), "floor_last_tenth_us": round(f_last, 1),
            # each call divided by the floor timed right after it, medians of a tenth: load
            # that slows both (this machine is shared) cancels call by call
            "ratio_vs_floor": round(statistics.median(per[-k:]) / statistics.median(per[:k]), 3),
            # dejacache's own cost: the call less its floor (the provider's time left out)
            "own_ratio": round((last - f_last) / (first - f_first), 3) if first > f_first
            else None,
            "median_us": round(statistics.median(times) / 1000, 1),
            "exit_ms": round(raw["exit_ns"] / 1e6, 1),
            "block_s": round(raw["block_ns"] / 1e9, 3),
            "file_bytes": path.stat().st_size if path.exists() else 0}


def run_cell(face: str, mode: str, n: int, path: pathlib.Path, workload: str,
             src: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, __file__, "--child", face, mode, str(n), str(path),
                           workload], capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"cell {face} {mode} {n} failed:\n{proc.stderr[-3000:]}")
    return _summary(face, mode, n, workload, orjson.loads(proc.stdout.strip().splitlines()[-1]),
                    path)


def _workload_for(face: str, n: int, cells: list[dict[str, Any]], budget: float) -> str:
    """The 2 KB request, unless ``n`` calls of ``face`` would take more than ``budget``
    seconds (estimated from its largest recording so far)."""
    done = [c for c in cells if c["face"] == face and c["mode"] == "record"]
    if not done:
        return "2KB"
    big = max(done, key=lambda c: c["n"])
    estimate = big["block_s"] * n / big["n"]
    return SMALL if estimate > budget else "2KB"


def bench(sizes: tuple[int, ...], tmp: pathlib.Path, src: str | None,
          before: str | None = None, budget: float = BUDGET_S
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The cells for ``src`` and, interleaved cell by cell, for ``before`` (another copy of
    src/, when given): both see the same moments of a shared machine."""
    cells: list[dict[str, Any]] = []
    old: list[dict[str, Any]] = []
    for n in sizes:
        for face in FACES:
            workload = _workload_for(face, n, cells, budget) if n >= 10_000 else "2KB"
            name = f"{face.replace(' ', '-').strip('@')}-{n}"
            for mode in ("record", "replay"):
                print(f"  {face} {mode} {n:,} ...", file=sys.stderr, flush=True)
                if before is not None:
                    old.append(run_cell(face, mode, n, tmp / f"before-{name}.json", workload,
                                        before))
                cells.append(run_cell(face, mode, n, tmp / f"{name}.json", workload, src))
    return cells, old


def _fmt(c: dict[str, Any]) -> list[str]:
    n = f"{c['n']:,}" + (" (200 B requests)" if c["workload"] == SMALL else "")
    return [c["face"], c["mode"], n, f"{c['first_tenth_us']:,.0f}", f"{c['last_tenth_us']:,.0f}",
            f"{c['ratio']:.2f}", f"{c['floor_first_tenth_us']:,.0f} → "
            f"{c['floor_last_tenth_us']:,.0f}", f"{c['ratio_vs_floor']:.2f}",
            "-" if c.get("own_ratio") is None else f"{c['own_ratio']:.2f}",
            f"{c['exit_ms']:,.1f}", f"{c['block_s']:,.2f}"]


HEADERS = ["face", "mode", "calls", "first tenth", "last tenth", "ratio", "floor, first → last",
           "ratio vs floor", "own cost ratio", "exit ms", "block s"]


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        face, mode, n, path, workload = sys.argv[2:7]
        print(orjson.dumps(child(face, mode, int(n), path, workload)).decode())
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_SIZES} calls (smoke run)")
    ap.add_argument("--json", default=None, help="write machine-readable results here")
    ap.add_argument("--src", default=None, help="run the cells against this copy of src/")
    ap.add_argument("--before", default=None,
                    help="also run every cell against this copy of src/, interleaved")
    a = ap.parse_args(argv)
    sizes = QUICK_SIZES if a.quick else SIZES
    with tempfile.TemporaryDirectory(prefix="dejacache-bench-flat-") as tmp:
        cells, old = bench(sizes, pathlib.Path(tmp), a.src, a.before)
    biggest = max(sizes)
    saves = {c["face"]: c["block_s"] for c in cells if c["n"] == biggest and c["mode"] == "record"}
    print("## Cost per call in one long cassette block\n")
    print(f"{versions('httpx', 'orjson')}; src: {a.src or 'this checkout'}\n")
    print(f"Median µs per call in the first and the last tenth of one block (goal: ratio ≤ "
          f"{GOAL}); the floor is timed right after each call (recording: the same live call "
          "let through; replay: the same call answered with the same bytes by a MockTransport;"
          " @cache: orjson + xxh3 + dict), and the ratio vs floor compares the tenths' medians "
          "of each call divided by its floor, so load that slows both cancels; the own cost "
          "ratio compares the tenths' medians less their floors' (dejacache's own cost, the "
          "goal's measure); exit = the "
          "block's exit (recording: the save); block = the whole block (floors included). "
          "Every cell is a fresh interpreter.\n")
    print(md_table(HEADERS, [_fmt(c) for c in cells]))
    print(f"\nRecord + save of {biggest:,} calls: "
          + ", ".join(f"{f} {s:,.1f} s" for f, s in saves.items()))
    if old:
        print(f"\nBefore ({a.before}), interleaved cell by cell with the rows above:\n")
        print(md_table(HEADERS, [_fmt(c) for c in old]))
    write_json(a.json, "flat", {
        "versions": versions("httpx", "orjson"), "goal_ratio": GOAL, "sizes": list(sizes),
        "workload": {"2KB": "agent-shaped chat request (~2 KB) carrying the previous "
                            "tool-call id back; answers from the loopback provider (HTTP) "
                            "or a ~1.2 KB chat.completion (@cache)",
                     SMALL: "a 200-byte chat request (used where 10,000 calls of 2 KB would "
                            f"take over {BUDGET_S:.0f} s)"},
        "cells": cells, "record_save_s": saves,
        **({"before": {"src": a.before, "cells": old}} if old else {})}, quick=a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
