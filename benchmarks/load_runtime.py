"""The runtime face under load: an agent server as a team runs one, the load of many
concurrent sessions, Redis faults, and a check of every read against the version the writer
recorded. Re-run it whenever the runtime face changes.

It starts a Redis (one server, or a 3+3 Cluster with ``--topology cluster``), the loopback
model (``load_model.py``) and the agent server (``load_server.py``: Starlette under uvicorn,
2 workers, an ``AgentPool`` per worker, ``agent_session`` + ``LoopGuard``, four
``tool_cache`` tools and one ``invalidates`` write tool, the real openai SDK). ``--sessions``
concurrent sessions then run turns for ``--seconds``: a fifth of the turns add an item to
a cart and read it back, the others read 1-3 of a cart, a tenant's carts, the catalogue and
a profile. ``--faults`` breaks Redis on a schedule: ``pause@20:3`` (SIGSTOP at 20 s, SIGCONT
3 s later), ``kill@40:2`` (SIGKILL, restarted empty 2 s later), ``failover@20`` (Cluster:
SIGKILL the master of the counters' slot). ``--hold-ms 60`` holds each worker's event loop
60 ms every 200 ms (a saturated worker).

The same load runs once per ``--phases`` (default ``on,off``: with the cache, then with
``DEJACACHE_RUNTIME_CACHE=off``), and one table compares them: turns, latency, how many tool
calls reached their backend, hits, the hit rate, the calls that bypassed the cache (in total
and in the worst second), stale and wrong reads, failed turns, breaker trips, and each
worker's resident memory. ``--soak 1800`` runs one long phase with the cache (``--phases
off``: without it) and samples memory every 10 s (``--tracemalloc``: the fastest-growing
allocation sites after warm-up; ``--diag``: where the memory sits, ``load_memory.py``;
``--malloc-trim``: the allocator's free memory handed back after each sample). ``--think``
sets each session's mean pause between turns (default 0.15 s): 100 sessions on 2 cores need
about 5 s to offer the ~20 turns a second such a machine serves.
``--check-landed`` also runs the tests of the work this harness's first run verified
(concurrent MCP calls without a prior ``list_tools``; ``python -m dejacache``).

    .venv/bin/python benchmarks/load_runtime.py [--sessions 100] [--seconds 60]
        [--faults pause@20:3,kill@40:2] [--hold-ms 60] [--topology cluster] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pathlib
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))
from support_redis import RedisServer, free_port  # noqa: E402

CARTS = 20


def init_db(path: pathlib.Path, tenants: int) -> None:
    """The server's "database": every cart at version 0, nothing published yet."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    for table in ("carts", "published"):
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} (tenant TEXT, cart INTEGER, "
                   "v INTEGER NOT NULL, PRIMARY KEY (tenant, cart))")
        db.executemany(f"INSERT OR IGNORE INTO {table} VALUES (?, ?, 0)",
                       [(f"t{t}", c) for t in range(tenants) for c in range(CARTS)])
    db.close()


# -- processes


def _uvicorn(app: str, port: int, env: dict[str, str], workers: int,
             log: pathlib.Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
             "--workers", str(workers), "--log-level", "warning", "--no-access-log"],
            cwd=HERE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env},
            stdout=out, stderr=subprocess.STDOUT)
    finally:
        out.close()


def _wait_up(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 300  # (two workers importing openai at load 12: > 60 s)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer at {url}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown: lifespans end
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Redis:
    """The Redis the server uses, and the faults the schedule applies to it."""

    def __init__(self, topology: str, root: pathlib.Path) -> None:
        self.topology = topology
        if topology == "cluster":
            from support_redis_topologies import ClusterTopology

            self.cluster = ClusterTopology(root=root / "cluster")
            self.cluster.start()
            self.url = self.cluster.store_url
        else:
            self.server = RedisServer(port=free_port(), workdir=str(root))
            self.server.start()
            self.url = self.server.url

    async def apply(self, fault: str, at: float, length: float, t0: float,
                    log: list[str]) -> None:
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        log.append(f"{time.monotonic() - t0:.1f}s {fault}")
        if fault == "failover":
            self.cluster.kill_master_for("{cart}")
            return
        if fault == "pause":
            self.server.pause()
        else:
            assert self.server.proc is not None
            self.server.proc.kill()
            self.server.proc.wait()
        await asyncio.sleep(length)
        if fault == "pause":
            self.server.resume()
        else:
            self.server.start()
        log.append(f"{time.monotonic() - t0:.1f}s {fault} over")

    def restore(self) -> None:
        if self.topology == "cluster":
            self.cluster.restore()
            self.cluster.flushall()
        else:
            self.server.resume()
            if self.server.proc is None or self.server.proc.poll() is not None:
                self.server.start()

    def stop(self) -> None:
        if self.topology == "cluster":
            self.cluster.stop()
        else:
            self.server.stop()


def parse_faults(spec: str) -> list[tuple[str, float, float]]:
    out = []
    for part in filter(None, spec.split(",")):
        kind, _, when = part.partition("@")
        at, _, length = when.partition(":")
        if kind not in ("pause", "kill", "failover"):
            raise SystemExit(f"unknown fault {kind!r} (pause, kill, failover)")
        out.append((kind, float(at), float(length or 0)))
    return out


# -- the load


def plan_of(rnd: random.Random) -> list[Any]:
    """One turn's tool calls: a fifth write an item into a cart and read it back."""
    cart = min(int(rnd.expovariate(0.3)), CARTS - 1)  # a few hot carts
    if rnd.random() < 0.2:
        return [["add_item", {"cart": cart, "sku": f"s{rnd.randrange(99)}"}],
                ["get_cart", {"cart": cart}]]
    reads = [["get_cart", {"cart": cart}], ["list_carts", {}],
             ["get_catalog", {"category": f"c{rnd.randrange(5)}"}],
             ["get_profile", {"user": f"u{rnd.randrange(8)}"}]]
    return rnd.sample(reads, rnd.randint(1, 3))


class Load:
    """``sessions`` concurrent sessions sending turns to the server until ``stop``."""

    def __init__(self, url: str, sessions: int, tenants: int, think: float = 0.15) -> None:
        self.url, self.sessions, self.tenants = url, sessions, tenants
        self.think = think
        self.latencies: list[float] = []
        self.failed = 0
        self.errors: list[str] = []
        self.stop = asyncio.Event()

    async def session(self, client: httpx.AsyncClient, n: int) -> None:
        rnd = random.Random(n)
        body = {"tenant": f"t{n % self.tenants}", "session": f"s{n}-{rnd.randrange(10**6)}"}
        turns = 0
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                r = await client.post("/turn", content=orjson.dumps(
                    {**body, "plan": plan_of(rnd)}))
                ok = r.status_code == 200
            except httpx.HTTPError as exc:
                ok, r = False, None
                if len(self.errors) < 5:
                    self.errors.append(repr(exc))
            self.latencies.append(time.perf_counter() - t0)
            if not ok:
                self.failed += 1
                if r is not None and len(self.errors) < 5:
                    self.errors.append(r.text[:300])
            turns += 1
            if turns % 8 == 0:  # a conversation ends; a new one starts in its place
                body["session"] = f"s{n}-{rnd.randrange(10**6)}"
            await asyncio.sleep(rnd.uniform(self.think / 3, self.think * 5 / 3))  # reads, types

    async def run(self, seconds: float) -> None:
        # Idle connections are dropped before uvicorn's 5 s keep-alive closes them: with
        # ~5 s between a session's turns, a turn sent on a connection the server was closing
        # failed with ReadError (6 of 7,095 turns).
        limits = httpx.Limits(max_connections=self.sessions + 10, keepalive_expiry=2.0)
        async with httpx.AsyncClient(base_url=self.url, timeout=60, limits=limits) as client:
            tasks = [asyncio.ensure_future(self.session(client, n))
                     for n in range(self.sessions)]
            await asyncio.sleep(seconds)
            self.stop.set()
            await asyncio.gather(*tasks)


def read_stats(folder: pathlib.Path) -> dict[int, dict[str, Any]]:
    out = {}
    for f in folder.glob("*.json"):
        with contextlib.suppress(ValueError, OSError):
            got = orjson.loads(f.read_bytes())
            out[got["pid"]] = got
    return out


class Sampler:
    """The workers' reports, once a second: totals and their per-second changes."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        self.series: list[tuple[float, dict[str, int]]] = []
        self.rss: dict[int, list[tuple[float, float]]] = {}
        self.conns: dict[int, list[tuple[float, int]]] = {}
        self.memory: dict[int, list[tuple[float, dict[str, Any]]]] = {}

    def sample(self, t: float) -> None:
        stats = read_stats(self.folder)
        total: dict[str, int] = {}
        for pid, s in stats.items():
            for k, v in s["runtime"].items():
                if isinstance(v, int) and not isinstance(v, bool):
                    total[k] = total.get(k, 0) + v
            self.rss.setdefault(pid, []).append((t, s["rss_mib"]))
            self.conns.setdefault(pid, []).append((t, s.get("redis_connections", 0)))
            if "memory" in s:
                self.memory.setdefault(pid, []).append((t, s["memory"]))
        self.series.append((t, total))

    async def run(self, stop: asyncio.Event, every: float = 1.0) -> None:
        t0 = time.monotonic()
        while not stop.is_set():
            self.sample(time.monotonic() - t0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), every)

    def worst_second(self) -> tuple[float, int]:
        """The largest share of calls that bypassed the cache in one second, and how many
        seconds had more than a fifth of their calls bypass it."""
        worst, bad = 0.0, 0
        for (_, a), (_, b) in zip(self.series, self.series[1:], strict=False):
            calls = b.get("calls", 0) - a.get("calls", 0)
            if calls >= 10:
                share = (b.get("bypassed", 0) - a.get("bypassed", 0)) / calls
                worst = max(worst, share)
                bad += share > 0.2
        return worst, bad


# -- a phase: the server started with or without the cache, the load, the faults


def _summary(name: str, load: Load, sampler: Sampler, final: dict[int, dict[str, Any]],
             seconds: float, faults: list[str], warm_s: float | None = None
             ) -> dict[str, Any]:
    def total(key: str, within: str | None = None) -> int:
        return sum(int((s[within] if within else s).get(key, 0)) for s in final.values())

    lat = sorted(load.latencies) or [0.0]
    worst, bad = sampler.worst_second()
    calls = total("calls", "runtime")
    served = total("hits", "runtime") + total("coalesced", "runtime")
    warm_at = min(30.0, seconds / 3) if warm_s is None else warm_s
    warm = {pid: next((r for t, r in rows if t >= warm_at), rows[-1][1])
            for pid, rows in sampler.rss.items() if rows}
    return {
        "phase": name, "seconds": seconds, "faults": faults,
        "turns": len(load.latencies), "turns_per_s": round(len(load.latencies) / seconds, 1),
        "turn_p50_ms": round(statistics.median(lat) * 1000, 1),
        "turn_p99_ms": round(lat[int(len(lat) * 0.99) - 1] * 1000, 1),
        "failed_turns": load.failed,
        "tool_calls": total("tool_calls"), "backend_runs": total("backend"),
        "hits": total("hits", "runtime"), "misses": total("misses", "runtime"),
        "bypassed": total("bypassed", "runtime"), "off": total("off", "runtime"),
        "hit_rate": round(served / calls, 3) if calls else 0.0,
        "bypassed_worst_second": round(worst, 3), "seconds_over_20pct_bypassed": bad,
        "reads_checked": total("reads_checked"), "stale": total("stale"),
        "wrong": total("wrong"), "writes": total("writes"),
        "breaker_trips": total("breaker_trips"),
        "rss_mib": {str(pid): {"warm": warm.get(pid), "end": s["rss_mib"],
                               "max": max(r for _, r in sampler.rss.get(pid, [(0, 0.0)]))}
                    for pid, s in final.items()},
        "redis_connections": {str(pid): max((c for _, c in rows), default=0)
                              for pid, rows in sampler.conns.items()},
        "rss_series": {str(pid): rows for pid, rows in sampler.rss.items()},
        "warm_s": warm_at,
        "memory_series": {str(pid): rows for pid, rows in sampler.memory.items()},
        "errors": load.errors + [e for s in final.values() for e in s.get("errors", [])][:10],
        "growth": [g for s in final.values() for g in s.get("growth", [])][:20],
    }


async def _drive(name: str, args: argparse.Namespace, redis: Redis, url: str,
                 folder: pathlib.Path, seconds: float) -> dict[str, Any]:
    load = Load(url, args.sessions, args.tenants, args.think)
    sampler = Sampler(folder)
    done = asyncio.Event()
    sampling = asyncio.ensure_future(sampler.run(done, 10.0 if args.soak else 1.0))
    log: list[str] = []
    t0 = time.monotonic()
    faults = [asyncio.ensure_future(redis.apply(kind, at, length, t0, log))
              for kind, at, length in parse_faults(args.faults) if at < seconds]
    await load.run(seconds)
    await asyncio.gather(*faults)
    await asyncio.sleep(1.5)  # the workers' last reports
    done.set()
    await sampling
    sampler.sample(time.monotonic() - t0)
    return {"load": load, "sampler": sampler, "log": log}


def run_phase(name: str, args: argparse.Namespace, redis: Redis, model_url: str,
              root: pathlib.Path, seconds: float) -> dict[str, Any]:
    folder = pathlib.Path(tempfile.mkdtemp(prefix=f"stats-{name}-", dir=root))
    port = free_port()
    env = {"LOAD_REDIS_URL": redis.url, "LOAD_DB": str(root / "data.db"),
           "LOAD_MODEL_URL": model_url, "LOAD_STATS_DIR": str(folder),
           "LOAD_HOLD_MS": str(args.hold_ms),
           "DEJACACHE_RUNTIME_CACHE": "off" if name.endswith("off") else "on",
           "LOAD_TRACEMALLOC": "1" if args.tracemalloc else "0",
           "LOAD_DIAG": "1" if args.diag else "0",
           "LOAD_MALLOC_TRIM": "1" if args.malloc_trim else "0"}
    log = folder / "server.log"
    server = _uvicorn("load_server:app", port, env, 2, log)
    try:
        _wait_up(f"http://127.0.0.1:{port}/health", server, "the agent server")
        got = asyncio.run(_drive(name, args, redis, f"http://127.0.0.1:{port}", folder,
                                 seconds))
    finally:
        _stop(server)
        redis.restore()
    out = _summary(name, got["load"], got["sampler"], read_stats(folder), seconds, got["log"],
                   args.warm)
    out["server_log"] = log.read_text(errors="replace").splitlines()[-20:]
    return out


# -- the report


_ROWS = [("turns (per s)", lambda r: f"{r['turns']:,} ({r['turns_per_s']:g})"),
         ("turn p50 / p99 ms", lambda r: f"{r['turn_p50_ms']:g} / {r['turn_p99_ms']:g}"),
         ("failed turns", lambda r: f"{r['failed_turns']}"),
         ("tool calls / reached their backend",
          lambda r: f"{r['tool_calls']:,} / {r['backend_runs']:,}"),
         ("hits / misses / bypassed / off",
          lambda r: f"{r['hits']:,} / {r['misses']:,} / {r['bypassed']:,} / {r['off']:,}"),
         ("hit rate", lambda r: f"{r['hit_rate']:.1%}"),
         ("bypassed: worst second / seconds over 20%",
          lambda r: f"{r['bypassed_worst_second']:.0%} / {r['seconds_over_20pct_bypassed']}"),
         ("reads checked / stale / wrong",
          lambda r: f"{r['reads_checked']:,} / {r['stale']} / {r['wrong']}"),
         ("writes", lambda r: f"{r['writes']:,}"),
         ("breaker trips", lambda r: f"{r['breaker_trips']}"),
         ("worker RSS MiB after warm-up -> end (max)",
          lambda r: "; ".join(f"{v['warm']} -> {v['end']} ({v['max']})"
                              for v in r["rss_mib"].values())),
         ("Redis connections per worker (max)",
          lambda r: ", ".join(str(v) for v in r["redis_connections"].values()))]


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = (f"## The runtime face under load ({args.topology}, {args.sessions} sessions, "
            f"{results[0]['seconds']:g} s per phase, faults: {args.faults or 'none'}, "
            f"event loop held {args.hold_ms:g} ms every 200 ms)\n")
    cols = [f"cache {r['phase']}" for r in results]
    lines = [head, "| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(fmt(r) for r in results) + " |"
              for label, fmt in _ROWS]
    for r in results:
        if r["faults"]:
            lines.append(f"\nFaults ({r['phase']}): {'; '.join(r['faults'])}")
        if r["errors"]:
            lines.append(f"Errors ({r['phase']}): {r['errors']}")
        if r["growth"]:
            lines.append(f"Fastest-growing allocations ({r['phase']}):\n  " +
                         "\n  ".join(r["growth"]))
        for pid, rows in r.get("memory_series", {}).items():
            lines.append(f"Memory ({r['phase']}, worker {pid}): " + memory_line(rows, r["warm_s"]))
    return "\n".join(lines)


def memory_line(rows: list[Any], warm_s: float) -> str:
    """Where one worker's memory sat after warm-up -> at the end, and the library's tables
    that grew in that time."""
    first = next((m for t, m in rows if t >= warm_s), rows[-1][1])
    last = rows[-1][1]

    def pair(get: Any) -> str:
        a, b = get(first), get(last)
        return f"{a} -> {b}"

    def arenas(m: dict[str, Any]) -> str:
        return f"{len(m['malloc'].get('arenas', []))}"

    parts = [f"RSS {pair(lambda m: m['rss_mib'])} MiB"]
    if "rss_after_trim_mib" in last:
        parts.append(f"after malloc_trim {pair(lambda m: m['rss_after_trim_mib'])}")
    parts += [f"threads {pair(lambda m: m['threads'])}",
              f"fds {pair(lambda m: m['fds'])} (sockets {pair(lambda m: m['sockets'])})",
              f"malloc in use {pair(lambda m: m['malloc'].get('in_use_mib'))} MiB, "
              f"free but kept {pair(lambda m: m['malloc'].get('free_kept_mib'))} MiB, "
              f"mmapped {pair(lambda m: m['malloc'].get('mmapped_mib'))} MiB, "
              f"arenas {pair(arenas)}",
              f"pymalloc arenas {pair(lambda m: m['pymalloc'].get('arenas'))}"]
    grew = sorted(((last["tables"][k] - first["tables"].get(k, 0), k)
                   for k in last["tables"]), reverse=True)
    grown = [f"{k} {first['tables'].get(k, 0)} -> {last['tables'][k]}"
             for d, k in grew[:6] if d > 0]
    parts.append("tables grown: " + ("; ".join(grown) if grown else "none"))
    return "; ".join(parts)


# -- the work already landed, verified in the same run


LANDED = ["tests/mcp_face/test_proxy.py::"
          "test_gathered_calls_replay_however_often_the_session_listed_the_tools",
          "tests/test_cli.py::test_python_m_dejacache_is_the_console_script"]


def check_landed() -> dict[str, Any]:
    """Concurrent MCP calls without a prior ``list_tools`` (stdio and streamable HTTP), and
    ``python -m dejacache`` answering as the console script does."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                           *LANDED], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    module = subprocess.run([sys.executable, "-m", "dejacache", "--help"],
                            capture_output=True, text=True, timeout=60)
    return {"tests": done.stdout.strip().splitlines()[-1:], "passed": done.returncode == 0,
            "python_m_help": module.returncode == 0 and "usage: dejacache" in module.stdout}


@contextlib.contextmanager
def _model(root: pathlib.Path) -> Iterator[str]:
    port = free_port()
    proc = _uvicorn("load_model:app", port, {}, 1, root / "model.log")
    try:
        _wait_up(f"http://127.0.0.1:{port}/served", proc, "the loopback model")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--tenants", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--faults", default="", help="e.g. pause@20:3,kill@40:2 or failover@20")
    ap.add_argument("--hold-ms", type=float, default=0.0)
    ap.add_argument("--topology", choices=["server", "cluster"], default="server")
    ap.add_argument("--phases", default="on,off")
    ap.add_argument("--soak", type=float, default=0.0,
                    help="one phase this long, cache on (--phases off: cache off)")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--diag", action="store_true", help="where the workers' memory sits")
    ap.add_argument("--malloc-trim", action="store_true",
                    help="malloc_trim(0) in the workers after each sample")
    ap.add_argument("--think", type=float, default=0.15,
                    help="mean seconds a session waits between turns")
    ap.add_argument("--warm", type=float, default=None,
                    help="seconds of warm-up before the RSS figure (default min(30, run/3))")
    ap.add_argument("--check-landed", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    # A soak runs one phase: with the cache, or without it (``--phases off``).
    phases = (["soak-off" if args.phases == "off" else "soak"] if args.soak
              else args.phases.split(","))
    seconds = args.soak or args.seconds
    with tempfile.TemporaryDirectory(prefix="dejacache-load-") as d:
        root = pathlib.Path(d)
        init_db(root / "data.db", args.tenants)
        redis = Redis(args.topology, root)
        try:
            with _model(root) as model_url:
                results = [run_phase(p, args, redis, model_url, root, seconds)
                           for p in phases]
        finally:
            redis.stop()
    print(report(results, args))
    out: dict[str, Any] = {"args": vars(args), "phases": results}
    if args.check_landed:
        out["landed"] = check_landed()
        print(f"\nLanded work, verified: {out['landed']}")
    if args.json:
        pathlib.Path(args.json).write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    broken = any(r["stale"] or r["wrong"] or r["failed_turns"] for r in results)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
