"""Turn the benchmark results (``benchmarks/results/*.json``) into Markdown: the sections the
scripts print, and the blocks of README.md and docs/benchmarks.md between
``<!-- bench:NAME -->`` and ``<!-- /bench -->``. No number in those blocks is typed by hand;
``tests/test_benchmark_docs.py`` fails when a block differs from what this file renders.

    .venv/bin/python benchmarks/render.py [--check] [--results DIR]

Every ratio divides by the floor its row names (a plain orjson + xxh3 key and a dict, a plain
SQLite SELECT, a raw redis-py GET, an SDK call answered by a MockTransport), measured in the
same run and interleaved with the contender, never by dejacache's own key or store.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
DOCS = (ROOT / "README.md", ROOT / "docs" / "benchmarks.md")
BLOCK = re.compile(r"(<!-- bench:([a-z0-9-]+) -->\n)(.*?)(<!-- /bench -->)", re.S)
NA = "not available"

Results = dict[str, dict[str, Any]]


# ============================================================================ helpers
def load(results: pathlib.Path = RESULTS) -> Results:
    out: Results = {}
    for p in sorted(results.glob("*.json")):
        out[p.stem] = json.loads(p.read_text(encoding="utf-8"))
    return out


def us(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    if x >= 10_000:
        return f"{x / 1000:,.1f} ms"
    if x >= 100:
        return f"{x:,.0f} µs"
    if x >= 10:
        return f"{x:.1f} µs"
    return f"{x:.2f} µs"


def num(x: float | None) -> str:
    """A bare µs number for table cells whose header carries the unit (in µs however large:
    "10.8 ms" under a µs header read as 10.8 µs)."""
    if x is not None and x == x and x >= 10_000:
        return f"{x:,.0f}"
    return us(x).removesuffix(" µs")


def ms(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f} ms" if x < 100 else f"{x:,.0f} ms")


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n / 1e3:,.1f} KB"


def times(a: float | None, b: float | None, digits: int = 2) -> str:
    return f"{a / b:.{digits}f}x" if a is not None and b else "-"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def source(R: Results, *names: str) -> str:
    """Where a block's numbers come from, when, and whether they are a smoke run."""
    found = [n for n in names if n in R]
    if not found:
        return f"_{NA}: no results yet (`make bench`)._"
    dates = sorted({str(R[n].get("date", "?")) for n in found})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    quick = [n for n in found if R[n].get("quick")]
    files = ", ".join(f"`{n}.json`" for n in found)
    note = ""
    if quick:
        note = ("; **quick run, provisional**" if len(quick) == len(found)
                else "; quick run (provisional): " + ", ".join(quick))
    return f"_Rendered from `benchmarks/results/`: {files} ({when}{note})._"


def med(cell: dict[str, Any] | None) -> float | None:
    return None if not cell else cell.get("median_us")


def p99(cell: dict[str, Any] | None) -> float | None:
    return None if not cell else cell.get("p99_us")


def _fn_result(R: Results, name: str) -> Any:
    """The value a helper function returned (``run.py`` stores it under ``result``)."""
    d = R.get(name)
    if not d or not d.get("available", True):
        return None
    return d.get("result")


# ============================================================================ core
SIZES = ("2KB", "20KB", "200KB")


def _hit(core: dict[str, Any], role: str, size: str) -> float | None:
    """A row's median by its role; None for a role an older result file does not have."""
    name = core["rows"].get(role)
    return None if name is None else med(core["hits"].get(name, {}).get(size))


def block_core_hits(R: Results) -> str:
    core = R.get("core")
    if not core:
        return source(R, "core")
    rows_ = core["rows"]
    floors = {rows_["mem_floor"], rows_["sqlite_floor"], rows_.get("peer_sqlite_floor")}
    copy_floor = rows_.get("mem_copy_floor")
    persistent = {rows_["sqlite"], rows_["sqlite_floor"], rows_.get("sqlite_frozen")}
    peers = {"diskcache Cache.memoize", rows_["joblib_path"]}  # on disk too
    # the disk peers are timed in their own group, with their own run of the SQLite floor
    peer_floor = "peer_sqlite_floor" if rows_.get("peer_sqlite_floor") else "sqlite_floor"
    rows = []
    for name, cells in core["hits"].items():
        floor_role = ("sqlite_floor" if name in persistent else
                      peer_floor if name in peers else "mem_floor")
        label = name if name not in floors and name != copy_floor else f"_{name}_"
        row = [label]
        for s in SIZES:
            m = med(cells.get(s))
            f = _hit(core, floor_role, s)
            cell = num(m) if name in floors else f"{num(m)} ({times(m, f, 1)}"
            if name == rows_["memory"] and copy_floor in core["hits"]:
                # the default hit hands each caller its own copy: also divided by the floor
                # that pays for one
                cell += f"; {times(m, _hit(core, 'mem_copy_floor', s), 1)} vs floor + copy"
            row.append(cell if name in floors else cell + ")")
        row.append(num(p99(cells.get("2KB"))))
        rows.append(row)
    wl = core["workload"]
    sizes = ", ".join(f"{s.replace('KB', ' KB')}: {wl['request_bytes'][s]:,} B" for s in SIZES)
    text = [
        f"Warm hit, median µs per call (lower is better). Requests: {sizes}; responses "
        f"{wl['response_bytes']:,} B. Every contender wraps the same free \"LLM call\", so the "
        "time is all cache overhead. In brackets: the median divided by the floor of its kind, "
        "measured in the same interleaved batches (in-memory rows: orjson(sorted) + xxh3 key "
        "and a dict; persistent rows: the same key, a SQLite WAL SELECT and orjson.loads).",
        *([] if not rows_.get("peer_sqlite_floor") else [
            "",
            "Three groups are timed apart, each interleaved with its floor: the in-memory rows, "
            "the SQLite rows, and diskcache and joblib with their own run of the SQLite floor "
            "(their file I/O and unpickling leave the CPU caches cold for whatever runs next: "
            "in one rotation with them the dict floor itself ran ~1.8x slower and every "
            "in-memory ratio looked smaller than it is)."]),
        *([] if copy_floor not in core["hits"] else [
            "",
            "The default `@cache` hands every caller a fresh copy of the result; its "
            "MemoryStore row is also divided by the floor + fresh copy (the dict floor plus one "
            "orjson.loads of the stored body: what any cache that hands out copies pays at "
            "least; its own bracket divides it by the plain floor). `@cache(frozen=True)` "
            "hands every caller one shared read-only value instead (mutating it raises "
            "`ReadOnlyResult`); its rows are divided by the plain floor of their kind."]),
        "",
        table(["warm hit, median µs", "2 KB", "20 KB", "200 KB", "2 KB p99"], rows),
    ]
    if core.get("skipped"):
        text += ["", "Skipped: " + "; ".join(f"{k} ({v})" for k, v in core["skipped"].items())]
    return "\n".join([*text, "", source(R, "core")])


def block_core_keys(R: Results) -> str:
    core = R.get("core")
    if not core:
        return source(R, "core")
    floor = core["rows"]["key_floor"]
    order = list(core["keys"]["2KB"])
    rows = []
    for r in order:
        cells = [core["keys"][s].get(r) for s in SIZES]
        fl = [core["keys"][s].get(floor) for s in SIZES]
        rows.append([r, *(num(med(c)) if r == floor else f"{num(med(c))} "
                          f"({times(med(c), med(f), 1)})" for c, f in zip(cells, fl, strict=True))])
    return "\n".join([
        "Key building, median µs (in brackets: divided by the floor, a plain orjson(sorted) + "
        "xxh3 of the request, timed in the same interleaved batches):", "",
        table(["operation", "2 KB", "20 KB", "200 KB"], rows), "", source(R, "core")])


def _conc_ratio(core: dict[str, Any], n: str) -> float | None:
    c = core.get("concurrency", {})
    d, f = c.get("dejacache", {}).get(n), c.get("floor", {}).get(n)
    return d["ops_per_s"] / f["ops_per_s"] if d and f and f["ops_per_s"] else None


def block_concurrency(R: Results) -> str:
    core = R.get("core")
    if not core or not core.get("concurrency"):
        return source(R, "core")
    conc = core["concurrency"]
    rows = []
    for kind, r in conc.items():
        rows.append([kind, f"{r['1p']['ops_per_s']:,.0f}", f"{r['2p']['ops_per_s']:,.0f}",
                     times(r["2p"]["ops_per_s"], conc.get("floor", {}).get("2p", {})
                           .get("ops_per_s")),
                     r["1p"]["lost"] + r["2p"]["lost"], r["1p"]["bad_hits"] + r["2p"]["bad_hits"]])
    return "\n".join([
        f"Two processes sharing one SQLite file, 2 KB requests, 90 % hits / 10 % new writes, "
        f"{core['conc_seconds']:g} s per cell; throughput vs the plain-SQLite floor of the same "
        "run (higher is better):", "",
        table(["store", "1 process ops/s", "2 processes ops/s", "2 processes vs floor",
               "lost entries", "wrong hits"], rows), "", source(R, "core")])


def block_breakdown(R: Results) -> str:
    core = R.get("core")
    if not core or not core.get("breakdown"):
        return source(R, "core")
    parts = core["breakdown"]
    whole = med(next(iter(parts.values())))
    rows = [[k, num(med(c)), f"{med(c) / whole:.0%}" if whole else "-"]
            for k, c in parts.items()]
    return "\n".join([
        "Where a 2 KB in-memory hit goes (each part timed alone; they do not add up exactly):",
        "", table(["part", "median µs", "share of the whole hit"], rows), "",
        source(R, "core")])


def core_markdown(doc: dict[str, Any]) -> str:
    R = {"core": doc}
    return "\n\n".join(["## Core: keys, hits, two processes (`benchmarks/bench_core.py`)",
                        f"Machine: {doc.get('machine')}. Versions: {doc.get('versions')}.",
                        block_core_hits(R), block_core_keys(R), block_breakdown(R),
                        block_concurrency(R), "### Targets", block_targets(R)]) + "\n"


# ============================================================================ cassettes
def block_cassette(R: Results) -> str:
    cas = R.get("cassette")
    if not cas:
        return source(R, "cassette")
    out = []
    cold = cas.get("cold")
    if cold:
        rows = [[f"{label} entry", ms(cold[label]["open_hit_ms"]), ms(cold[label]["close_ms"]),
                 ms(cold[label]["total_ms"]), ms(cold[label]["max_total_ms"]),
                 ms(cold[label]["import_ms"]),
                 ms(cold[label].get("with_imports_ms",
                                    cold[label]["import_ms"] + cold[label]["total_ms"]))]
                for label in ("first", "last", "random") if label in cold]
        out += [f"A fresh interpreter opens a {cold['entries']:,}-entry cassette (20 KB agent "
                "steps) in a `with dejacache.cassette(...)` block, serves one recorded call and "
                f"closes the block; medians of {cold['repeats']} process"
                f"{'es' if cold['repeats'] != 1 else ''} each, the three "
                "positions interleaved, file in the page cache. Imports (dejacache and its "
                "cassette modules, bytecode cached) are timed apart, and counted in the last "
                "column, what a test pays:", "",
                table(["served", "open + hit", "close", "total", "worst total", "imports",
                       "with imports"], rows), "",
                f"File: {cold['file_bytes'] / 1e6:.1f} MB, {cold['size_ratio']:.3f}x the naive "
                f"JSON of the same calls ({cold['raw_bytes'] / 1e6:.1f} MB)."]
        inp = cold.get("in_pytest")
        if inp:
            rows = [[f"{label} entry", ms(inp[label]["total_ms"]), ms(inp[label]["import_ms"]),
                     ms(inp[label]["with_imports_ms"])]
                    for label in ("first", "last", "random") if label in inp]
            out += ["", "The same in processes that loaded pytest first, untimed (what a test "
                    "process has loaded before its first block: typing, dataclasses, inspect, "
                    "pathlib, re), interleaved with the rows above:", "",
                    table(["served", "open + hit + close", "imports", "with imports"], rows)]
        if "floor_ms" in cold:
            out += ["", f"Floor of the fresh rows: `import orjson, xxhash` in a fresh "
                    f"interpreter, {ms(cold['floor_ms'])} (orjson imports dataclasses, "
                    "inspect, uuid and datetime when it loads)."]
        ac = cold.get("agentcassette")
        if ac:
            out[-1] += (f" agentcassette: {ac['file_bytes'] / 1e6:.1f} MB "
                        f"({ac['size_ratio']:.2f}x), first replayed call {ms(ac['first_ms'])}.")
    scale = cas.get("scale")
    if scale:
        rows = [[f"{int(n):,}", us(s["mean_us"]), us(s["p99_us"]), us(s["max_us"]),
                 us(s["open_us"]), us(s["close_us"])] for n, s in scale.items()]
        out += ["", "Replay against cassette size (2 KB requests, every entry served once in a "
                "random order from one block, warm process):", "",
                table(["entries", "mean", "p99", "worst call", "open", "close"], rows)]
    rep = cas.get("replay")
    if rep:
        rows = [[r["request"], us(r["floor_us"]), us(r["dejacache_us"]),
                 times(r["dejacache_us"], r["floor_us"]), us(r["agentcassette_us"]),
                 times(r["agentcassette_us"], r["floor_us"])] for r in rep]
        out += ["", "Replay of a decorated call, median per call; floor: orjson(sorted) + xxh3 "
                "of the request and a dict lookup, interleaved round by round:", "",
                table(["request", "floor", "dejacache cassette", "vs floor",
                       "agentcassette replay", "vs floor"], rows)]
    return "\n".join([*out, "", source(R, "cassette")])


def _split_scale(result: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """``cassette_scale``'s rows by size, and its growing-conversation row (if any)."""
    if not isinstance(result, list):
        return [], None
    sizes = [r for r in result if isinstance(r, dict) and "shape" not in r]
    growing = next((r for r in result if isinstance(r, dict)
                    and r.get("shape") == "growing"), None)
    return sizes, growing


def _growing_text(g: dict[str, Any]) -> str:
    return (f"Growing conversations (each request resends its history plus one new message, "
            f"as an agent loop does): {g['entries']:,} entries, {mb(g['file_bytes'])}, fresh "
            f"processes: open + hit of the last entry {ms(g['late_open_hit_ms'])} (imports "
            f"{ms(g['import_ms'])}, apart; that block's close "
            f"{ms(g['late_close_ms'])}), an auto-mode miss {ms(g['auto_miss_ms'])}, and "
            f"the save of that one new entry {ms(g['save_one_ms'])} (medians).")


def block_cassette_scale(R: Results) -> str:
    rows_, growing = _split_scale(_fn_result(R, "cassette_scale"))
    if not rows_ or "entries" not in rows_[0]:
        return _missing(R, "cassette_scale")
    rows = [[f"{r['entries']:,}", mb(r["file_bytes"]),
             " / ".join(ms(r[f"{k}_open_hit_ms"]).removesuffix(" ms")
                        for k in ("first", "last", "random")),
             f"{ms(r['random_close_ms'])} (worst {ms(r['max_close_ms'])})",
             " / ".join(num(r[k]) for k in ("mean_us", "p99_us", "max_us"))]
            for r in rows_]
    return "\n".join([
        "Cassettes of the 20 KB agent run, every figure from a fresh interpreter: open a "
        "`with dejacache.cassette(...)` block, serve the first, the last or a random entry, "
        "close the block (medians over several processes; imports excluded); then one process "
        "replays every entry once in a random order:", "",
        table(["entries", "file", "open + hit, first / last / random (ms)", "close",
               "replay per call, mean / p99 / worst (µs)"], rows), "",
        *([_growing_text(growing), ""] if growing else []),
        source(R, "cassette_scale")])


def cassette_markdown(doc: dict[str, Any]) -> str:
    return "\n\n".join(["## Cassettes (`benchmarks/bench_cassette.py`)",
                        f"Machine: {doc.get('machine')}. Versions: {doc.get('versions')}.",
                        block_cassette({"cassette": doc})]) + "\n"


# ============================================================================ other sections
def block_http(R: Results) -> str:
    h = R.get("http")
    if not h:
        return source(R, "http")
    rows = [[r["call"], r["served_by"], num(med(r["floor"])), num(med(r["dejacache"])),
             num(p99(r["dejacache"])), times(med(r["dejacache"]), med(r["floor"]))]
            for r in h["rows"]]
    return "\n".join([
        "Replay through the real openai SDK, µs per call. Floor: the same SDK call answered by "
        "an httpx2 `MockTransport` with canned bytes, timed alternately with the dejacache "
        "call.", "",
        table(["call", "served by", "floor median", "median", "p99", "vs floor"], rows), "",
        source(R, "http")])


def block_proxy(R: Results) -> str:
    d = R.get("proxy")
    if not d:
        return source(R, "proxy")
    t = d["targets"]
    names = ["floor (python)", "floor (node)", "dejacache", "dejacache (baseline)", "aimock"]
    rows = [[n, num(t[n]["median_us"]), num(t[n]["p99_us"]), num(t[n]["first100_median_us"]),
             num(t[n]["last100_median_us"]),
             times(t["dejacache"]["median_us"], t[n]["median_us"]) if n != "dejacache"
             else "-", num(t[n]["server_cpu_us"]) if "server_cpu_us" in t[n] else NA]
            for n in names if n in t]
    cpu = [f"{n}: {times(t['dejacache']['server_cpu_us'], t[n]['server_cpu_us'])}"
           for n in names if n in t and n != "dejacache" and t[n].get("server_cpu_us")
           and "server_cpu_us" in t["dejacache"]]
    return "\n".join([
        f"A chat completion replayed through `dejacache proxy` to a Node client (sequential "
        f"keep-alive `fetch`), µs per call, {d['calls']:,} different calls per round, "
        f"{d['rounds']} rounds, the targets interleaved in one client. Floors: a minimal "
        "server answering from memory the bytes the proxy answers the first call with "
        "(status line, headers, body), in Python (asyncio) and in Node (`http`); aimock: one "
        "fixture per prompt. First and last 100: the medians of each round's first and last "
        "100 calls (flat when they agree). Server CPU: the serving process's CPU time per "
        "call while the client ran (unlike latency, it does not grow with the machine's "
        "load).", "",
        table(["served by", "median", "p99", "first 100", "last 100", "dejacache vs it",
               "server CPU µs/call"], rows), "",
        *([f"Server CPU per call, dejacache vs {'; vs '.join(cpu)}.", ""] if cpu else []),
        f"Versions: {d.get('versions', '?')}. " + source(R, "proxy")])


def block_redis(R: Results) -> str:
    r = R.get("redis")
    if not r or not r.get("sync"):
        return source(R, "redis") if not r else f"_{NA}: {r.get('why')}._"
    raw = r["sync"][r["rows"]["raw"]]
    rows = [[k, num(med(c)), num(p99(c)), times(med(c), med(raw))] for k, c in r["sync"].items()]
    araw = next(iter(r["async"].values()))
    rows += [[k, num(med(c)), num(p99(c)), times(med(c), med(araw))]
             for k, c in r["async"].items()]
    return "\n".join([
        "Warm hits on a loopback redis-server, ~1.2 KB responses, interleaved; each row divided "
        "by the raw redis-py `GET` + `orjson.loads` of its kind (sync or asyncio):", "",
        table(["operation", "median µs", "p99 µs", "vs raw GET + loads"], rows), "",
        *_redis_cluster_block(r), source(R, "redis")])


def _redis_cluster_block(r: dict[str, Any]) -> list[str]:
    """The cluster rows and the hits per second by client processes, when measured: lines
    for :func:`block_redis`, each paragraph followed by a blank one."""
    c = r.get("cluster")
    if not c:
        why = r.get("cluster_why_not")
        return [f"_Redis Cluster rows {NA}: {why}._", ""] if why else []
    raw = c["cells"][c["rows"]["raw"]]
    rows = [[k, num(med(v)), num(p99(v)), times(med(v), med(raw))]
            for k, v in c["cells"].items()]
    out = [
        "On a Redis Cluster (3 masters + 3 replicas on loopback), each row divided by a raw "
        "redis-py `RedisCluster` `GET` + `orjson.loads`, whose client routes by slot as the "
        "store's does:", "",
        table(["operation", "median µs", "p99 µs", "vs raw cluster GET + loads"], rows), ""]
    t = r.get("throughput")
    if t:
        trows = [[n, f"{t['server'][n]:,.0f}", f"{t['cluster'][n]:,.0f}",
                  times(t["cluster"][n], t["server"][n])] for n in t["server"]]
        out += ["`@cache` hits per second (2 KB request argument) from client processes "
                "running at once, one server and the cluster alternating, median of the "
                "rounds. The clients share the machine's cores with the servers, so this "
                "shows how the client side scales, not what a cluster serves:", "",
                table(["processes", "one server", "cluster", "cluster / one server"], trows),
                ""]
    return out


def _tool_redis_rows(rd: dict[str, Any] | None) -> list[list[str]]:
    """Targets rows: a ``tool_cache`` hit through Redis (one server, the cluster) against a
    raw GET + loads of the same run; "not measured" for a results file older than them."""
    out = []
    for job, cells, goal in (
            ("`tool_cache` hit through Redis (counters read every call)",
             rd, "≤ 1.5x raw GET + loads"),
            ("`tool_cache` hit through a Redis Cluster (counters read every call)",
             rd.get("cluster") if rd else None, "≤ 1.5x raw RedisCluster GET + loads")):
        if not cells:
            out.append([job, goal, NA, "-"])
            continue
        table_ = cells.get("sync") or cells.get("cells") or {}
        rows = cells["rows"]
        if "tool" not in rows or rows["tool"] not in table_:
            out.append([job, goal, NA, "-"])
            continue
        m, f = med(table_[rows["tool"]]), med(table_[rows["raw"]])
        out.append([job, goal, f"{times(m, f)} ({us(m)} vs {us(f)})",
                    _met(m / f <= 1.5) if m and f else "-"])
    return out


def block_runtime(R: Results) -> str:
    rt = R.get("runtime")
    if not rt:
        return source(R, "runtime")
    base = med(rt["hits"]["core @cache hit"])
    rows = [[k, num(med(c)), times(med(c), base)] for k, c in rt["hits"].items()]
    inv = rt["invalidation"]
    n = rt["entries"]
    return "\n".join([
        "Warm hits in memory of the same tool, timed interleaved in one run (round-robin "
        "batches), each divided by the core `@cache` hit of the same batches:", "",
        table(["in memory", "median µs", "vs core @cache hit"], rows), "",
        f"Invalidation with 10 vs {n:,} cached entries: entity "
        f"{us(med(inv['entity']['10']))} vs {us(med(inv['entity']['many']))}, whole resource "
        f"{us(med(inv['resource']['10']))} vs {us(med(inv['resource']['many']))}.", "",
        source(R, "runtime")])


def block_sqlite_size(R: Results) -> str:
    r = _fn_result(R, "sqlite_size")
    if not isinstance(r, dict) or "size" not in r:
        return _missing(R, "sqlite_size")
    s = r["size"]
    rows = [[f"{size} ({h['request_bytes']:,} B)", us(h["floor_us"]), us(h["cache_hit_us"]),
             times(h["cache_hit_us"], h["floor_us"]), us(h["store_get_us"])]
            for size, h in r.get("hits", {}).items()]
    return "\n".join([
        f"{s['calls']:,} calls of a growing 20 KB conversation: raw JSON "
        f"{s['raw_bytes'] / 1e6:.1f} MB, SQLite file {s['store_bytes'] / 1e6:.1f} MB = "
        f"**{s['ratio']:.3f}x**. Hits, interleaved with the plain-SQLite floor (orjson+xxh3 key, "
        "SELECT, orjson.loads):", "",
        table(["request", "floor", "@cache hit", "vs floor", "SQLiteStore.get + decode"], rows),
        "", source(R, "sqlite_size")])


def block_keys_growth(R: Results) -> str:
    r = _fn_result(R, "keys_growth")
    if not isinstance(r, list) or not r or not all(isinstance(x, dict) for x in r):
        return _missing(R, "keys_growth")
    if all({"N", "path", "ours_us", "floor_us"} <= set(x) for x in r):
        rows = [[x.get("workload", "agent"), f"{x['N']:,}", x["path"], us(x["ours_us"]),
                 us(x["floor_us"]), times(x["ours_us"], x["floor_us"])] for x in r]
        cols = ["workload", "messages resent", "key", "dejacache", "floor: orjson + xxh3",
                "vs floor"]
    else:  # an unknown shape: show it as it is rather than nothing
        cols = list(dict.fromkeys(k for row in r for k in row))
        rows = [[_fmt_any(row.get(c)) for c in cols] for row in r]
    return "\n".join([
        "Keying one new turn of a conversation that resends its whole history (the previous "
        "turn keyed first, untimed, as an agent loop does), each sample followed by the floor "
        "on the same request; `full` is the key a miss stores under, `miss` what `@cache` pays "
        "for the key on a miss, `decorated miss` the whole `@cache` miss of a free function "
        "in a `MemoryStore` (key, run, encode, the stored request scrubbed, store, count). "
        "Workloads: `agent` (an agent's turns: user text of 10-30 words, tool calls, tool "
        "results, replies of 15-45 words) and `filler` (~200-character chat messages of "
        "filler prose with a URL and the words a secret scan looks for, no secret):",
        "", table(cols, rows), "", source(R, "keys_growth")])


def block_import(R: Results) -> str:
    r = _fn_result(R, "import")
    if not isinstance(r, dict):
        return _missing(R, "import")
    names = [k.removesuffix(" import ms") for k in r if k.endswith(" import ms")]
    floor = next((n for n in names if n.startswith("floor")), None)
    rows = [[f"`{n}`" if not n.startswith("floor") else n, ms(r[f"{n} import ms"]),
             times(r[f"{n} import ms"], r.get(f"{floor} import ms")) if floor else "-",
             ms(r.get(f"{n} process ms"))] for n in names]
    return "\n".join([
        f"Fresh interpreter, bytecode cached, median of {int(r.get('rounds', 0))} interleaved "
        "runs each:", "", table(["statement", "import", "vs floor", "whole process"], rows), "",
        source(R, "import")])


def block_learn(R: Results) -> str:
    r = _fn_result(R, "learn")
    if not isinstance(r, dict) or not r.get("suites"):
        return _missing(R, "learn")
    rows = []
    for s in r["suites"]:
        spans = s["volatile_spans"]
        calls = s["calls"]
        rows.append([
            s["suite"], calls,
            f"{s['found']} of {spans} ({s['found'] / spans:.0%})" if spans else "-",
            s["rules"], s["refused"], s["false_rules"],
            f"{s['hits_before']} of {calls} ({s['hits_before'] / calls:.0%})",
            f"{s['hits_after']} of {calls} ({s['hits_after'] / calls:.0%})"])
    return "\n".join([
        "`dejacache learn --write` on agent suites whose prompts carry clocks, ids, temp "
        "paths, ports and nonces (`benchmarks/bench_learn.py`): volatile spans the learned "
        "rules mask, rules written, candidates its check refused, false rules (calls "
        "answered differently given one key, counted independently), and calls replayed from "
        "the recording before and after, with fresh values:", "",
        table(["suite", "calls", "volatile spans masked", "rules", "refused", "false rules",
               "replayed before", "replayed after"], rows), "", source(R, "learn")])


def block_shared_writers(R: Results) -> str:
    r = R.get("shared_writers")
    if not r or "alone" not in r:
        return source(R, "shared_writers")
    rows = [[kind, f"{r[kind]['wall_s']:.2f} s", ms(r[kind]["first_tenth_save_ms"]),
             ms(r[kind]["last_tenth_save_ms"]), ms(r[kind]["max_save_ms"]),
             f"{r[kind]['file_bytes'] / 1e6:.2f} MB", r[kind]["wrong_or_lost"]]
            for kind in ("alone", "writers")]
    return "\n".join([
        f"Many writers on one shared cassette (`benchmarks/bench_shared_writers.py`): one "
        f"process records {r['calls']:,} calls in blocks of {r['block']} (`cassette(path, "
        f"shared=True)`, mode `auto`: a suite's tests), against {r['procs']} processes at once "
        f"recording {r['calls'] // r['procs']:,} each into one file; ~2 KB requests, medians "
        f"of {r['rounds']} interleaved rounds. Writers / alone: "
        f"**{r['ratio']:.2f}x** (goal ≤ 1.5x); a save's median in the first and the last tenth "
        "of each process's saves shows whether it grows with the file:", "",
        table(["contender", "wall", "save, first tenth", "save, last tenth", "slowest save",
               "file", "calls lost or wrong"], rows), "", source(R, "shared_writers")])


# ============================================================================ pytest plugin
# (cost key, what the table calls the suite), in the order bench_plugin's table shows them
_PLUGIN_SUITES = (("plain", "one test, no cassette"), ("cassette", "one test replaying a cassette"))


def _plugin_instructions(ins: dict[str, Any]) -> str:
    """How the instructions were counted and the rate that turns them into ms."""
    if not ins.get("available"):
        return f"Instructions not counted: {ins.get('why', NA)}."
    return (f"Instructions: one `valgrind --tool=callgrind` process per suite, in the timed "
            f"processes' environment (`PYTHONHASHSEED=0`, a sitecustomize that calls "
            f"`gc.disable()`: with the collector on, one fixed suite moves by a whole full "
            f"collection with a few hundred allocations more or less). Rate: the floor's "
            f"{ins['plain without'] / 1e6:,.1f}M instructions over its median CPU time, "
            f"{ins['floor cpu ms']:.0f} ms, in {ins['rate runs']} runs of the same process "
            f"interleaved with the others: **{ins['rate per ms'] / 1e6:.2f}M instructions per "
            f"ms**{_fastest(ins)}. The collector's average share: the same suites with a "
            f"conftest that first makes K objects of cyclic garbage, counted with the "
            f"collector on at {ins['phases']} K spread over one 70,000-allocation period of "
            f"its decision on a full collection; their mean cost less the collector-off one.")


def _fastest(ins: dict[str, Any]) -> str:
    """The rate of the floor's fastest run: how far a busy box moved the median's."""
    low = ins.get("floor cpu min ms")
    if not low:
        return ""
    return f" (its fastest run, {low:.0f} ms: {ins['plain without'] / low / 1e6:.2f}M per ms)"


def _instr(ins: dict[str, Any], cost: str) -> str:
    if not ins.get("available"):
        return "-"
    return f"{ins[f'{cost} M']:+.1f}M ({ins[f'{cost} ms']:+.1f} ms)"


def _collector(ins: dict[str, Any], cost: str) -> str:
    """A goal's counted cost with the collector on, averaged over its phases, and the
    collector's share of it."""
    if not ins.get("available"):
        return "-"
    return (f"{ins[f'{cost} averaged M']:+.1f}M ({ins[f'{cost} averaged ms']:+.1f} ms), of "
            f"which the collector {ins[f'{cost} collector M']:+.1f}M "
            f"({ins[f'{cost} collector ms']:+.1f} ms)")


def plugin_markdown(results: dict[str, dict[str, Any]]) -> str:
    """The table ``bench_plugin`` prints, one set of rows per measured ``src/``."""
    rows = []
    for label, r in results.items():
        ins = r.get("instructions", {})

        def count(key: str, ins: dict[str, Any] = ins) -> str:
            return f"{ins[key] / 1e6:,.1f}M" if ins.get("available") else "-"

        def pair(key: str, r: dict[str, Any] = r) -> str:
            return f"{r[f'{key} wall']:+.0f} / {r[f'{key} cpu']:+.0f}"

        def both(key: str, r: dict[str, Any] = r) -> str:
            return f"{r[f'{key} wall']:.0f} / {r[f'{key} cpu']:.0f}"

        rows.append([label, "one test, `-p no:dejacache`", both("plain without"), "(the floor)",
                     count("plain without"), "(the floor)"])
        rows += [[label, text, both(f"{name} with"), pair(f"{name} cost"),
                  count(f"{name} with"), _instr(ins, f"{name} cost")]
                 for name, text in _PLUGIN_SUITES]
        rows.append([label, "the same test, its own `dejacache.cassette` block, "
                     "`-p no:dejacache`", both("block without"),
                     f"(the library's: {pair('block cost')})", count("block without"),
                     f"(the library's: {_instr(ins, 'block cost')})"])
        rows.append([label, "the fixture against that block", "", pair("over block"), "",
                     _instr(ins, "over block")])
        rows += [[label, f"{text}, the collector on (its average over its phase)", "", "",
                  "", _collector(ins, f"{name} cost")] for name, text in _PLUGIN_SUITES]
    first = next(iter(results.values()))
    notes = [f"{label}: {_plugin_instructions(r.get('instructions', {}))}" if len(results) > 1
             else _plugin_instructions(r.get("instructions", {}))
             for label, r in results.items()]
    return "\n".join([
        f"Whole `python -m pytest` processes with the automatic collector off, median of "
        f"{int(first['rounds'])} each, the variants interleaved round by round; costs are "
        "medians of the paired differences within a round (`benchmarks/bench_plugin.py`):", "",
        table(["src", "suite", "wall / cpu ms", "cost: wall / cpu ms", "instructions",
               "cost: instructions (ms at the rate)"], rows), "", *notes])


def block_plugin(R: Results) -> str:
    r = _fn_result(R, "plugin")
    if not isinstance(r, dict) or not r:
        return _missing(R, "plugin")
    return "\n".join([plugin_markdown(r), "", source(R, "plugin")])


# the targets: (cost key, job, goal in ms)
_PLUGIN_GOALS = (("plain cost", "pytest plugin, one-test suite, no cassette", 20.0),
                 ("cassette cost", "pytest plugin, one-test suite replaying one cassette "
                  "through the fixture", 40.0))


def _plugin_target_rows(R: Results) -> list[list[str]]:
    """Met only when the instruction count (the collector on, averaged over its phase) at the
    rate bench_plugin states and the paired CPU time (the collector off) plus the collector's
    counted share both are within the goal. The count is exact but the rate is the floor's,
    an average over pytest's own start-up; the timing is direct but on this shared box varies
    more than the goals (the row gives its median's interval, which shows by how much). When
    they disagree the goal is unsettled: not claimed."""
    r = _fn_result(R, "plugin")
    res = next(iter(r.values()), None) if isinstance(r, dict) else None
    rows = []
    for cost, job, goal in _PLUGIN_GOALS:
        if not res:
            rows.append([job, f"≤ {goal:.0f} ms", NA, "-"])
            continue
        ins = res.get("instructions", {})
        timed = (f"timed with the collector off, wall / cpu paired medians "
                 f"{res[f'{cost} wall']:+.0f} / {res[f'{cost} cpu']:+.0f} ms")
        if f"{cost} cpu interval" in res:  # (results before it was kept have none)
            lo, hi = res[f"{cost} cpu interval"]
            timed += f" (the cpu median's 95% interval {lo:+.0f} to {hi:+.0f} ms)"
        if not ins.get("available"):
            rows.append([job, f"≤ {goal:.0f} ms", f"instructions {NA}; {timed}", "-"])
            continue
        share = ins[f"{cost} collector ms"]
        rows.append([job, f"≤ {goal:.0f} ms",
                     f"{ins[f'{cost} averaged M']:+.1f}M instructions with the collector on "
                     f"(averaged over {ins['phases']} of its phases) = "
                     f"{ins[f'{cost} averaged ms']:.1f} ms at {ins['rate per ms'] / 1e6:.2f}M "
                     f"per ms (the floor's rate); {timed}, + the collector's {share:.1f} ms = "
                     f"{res[f'{cost} cpu'] + share:.1f} ms cpu",
                     _plugin_met(ins[f"{cost} averaged ms"] <= goal,
                                 res[f"{cost} cpu"] + share <= goal)])
    return rows


def _plugin_met(counted: bool, timed: bool) -> str:
    return _met(counted) if counted == timed else "**unsettled** (not claimed)"


def _fmt_any(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "-" if v is None else str(v)


def _missing(R: Results, name: str) -> str:
    d = R.get(name)
    why = d.get("why") if d else "no results yet (`make bench`)"
    return f"_{NA}: {why}._"


def _flat_cells(R: Results) -> list[dict[str, Any]] | None:
    f = R.get("flat")
    cells = f.get("cells") if f else None
    return cells if isinstance(cells, list) and cells else None


def block_flat(R: Results) -> str:
    cells = _flat_cells(R)
    if cells is None:
        return source(R, "flat")
    f = R["flat"]
    goal = f.get("goal_ratio", 1.2)
    by = {(c["face"], c["n"], c["mode"]): c for c in cells}
    rows = []
    for face, n in dict.fromkeys((c["face"], c["n"]) for c in cells):
        rec, rep = by.get((face, n, "record")), by.get((face, n, "replay"))
        calls = f"{n:,}" + (" (200 B requests)" if (rec or rep or {}).get("workload") == "small"
                            else "")
        row = [face, calls]
        for c in (rec, rep):
            o = _overhead(c) if c is not None else None
            row += (["-", "-"] if c is None else
                    [f"{_own(o[0])} → {_own(o[1])}" if o else "-",
                     f"{_growth(c):.2f} ({num(c['first_tenth_us'])} → "
                     f"{num(c['last_tenth_us'])}: {c['ratio']:.2f})"])
        row.append(ms(rec["exit_ms"]) if rec else "-")
        row.append(f"{rec['block_s']:,.1f} s" if rec else "-")
        rows.append(row)
    biggest = max(c["n"] for c in cells)
    return "\n".join([
        "Cost per call in one long `with dejacache.cassette(...)` block, each cell a fresh "
        "interpreter: the median µs of a call in the first and in the last tenth of the block "
        "(the block's first call left out). dejacache's own cost is the call's median less "
        "its floor's, the floor timed right after each call (recording: the same live call "
        "let through; replay: the same call answered with the same bytes by an httpx "
        "`MockTransport`; `@cache`: an orjson + xxh3 key and a dict), so the provider's time "
        "and load that slows both leave it out. Goal: last tenth / first tenth of that cost "
        f"≤ {goal} (it does not grow with the calls already made); in brackets the whole "
        "calls' medians and their ratio. "
        "HTTP: plain httpx clients (automatic "
        "interception) posting ~2 KB agent-shaped chat requests, each carrying the previous "
        "answer's tool-call id back, to the tests' loopback provider (replayed with it "
        "stopped); `@cache`: the same requests, ~1.2 KB answers. Save: the recording block's "
        "exit; record + save: the whole recording block.", "",
        table(["face", "calls", "record: own µs, first → last tenth", "ratio (whole call)",
               "replay: own µs, first → last tenth", "ratio (whole call)", "save",
               "record + save"], rows), "",
        f"Goal met at {biggest:,} calls: " + _met(all(
            _growth(c) <= goal for c in cells if c["n"] == biggest)) + ".", "",
        source(R, "flat")])


def _overhead(c: dict[str, Any]) -> tuple[float, float] | None:
    """dejacache's own cost in the first and the last tenth: the call's median less its
    floor's (None for results without a floor)."""
    if "floor_first_tenth_us" not in c:
        return None
    return (c["first_tenth_us"] - c["floor_first_tenth_us"],
            c["last_tenth_us"] - c["floor_last_tenth_us"])


def _own(x: float) -> str:
    # below its floor: the two calls' noise is larger than dejacache's cost (a 10-call
    # block's tenth is one call)
    return num(x) if x > 0 else "< floor"


def _growth(c: dict[str, Any]) -> float:
    """Last tenth / first tenth of dejacache's own cost (the raw ratio without a floor)."""
    o = _overhead(c)
    if o is None or o[0] <= 0 or o[1] <= 0:
        return float(c["ratio"])
    return o[1] / o[0]


def _flat_target(R: Results) -> list[str]:
    job = "cost per call in a long cassette block (httpx sync / async, `@cache`; record and " \
          "replay): last tenth / first tenth"
    cells = _flat_cells(R)
    if cells is None:
        return [job, "≤ 1.2", NA, "-"]
    biggest = max(c["n"] for c in cells)
    big = [c for c in cells if c["n"] == biggest]
    worst = max(big, key=_growth)
    saves = ", ".join(f"{c['face']} {c['block_s']:,.1f} s" for c in big if c["mode"] == "record")
    return [job + " of dejacache's own cost (the call less its floor)", "≤ 1.2",
            f"{biggest:,} calls: worst {_growth(worst):.2f} ({worst['face']} {worst['mode']}); "
            f"record + save {saves}", _met(_growth(worst) <= 1.2)]


# ============================================================================ targets
def _growing_rows(g: dict[str, Any]) -> list[list[str]]:
    """The growing-conversation cassette's targets (``cassette_scale.bench_growing``)."""
    size = f"{g['entries']:,} entries, {mb(g['file_bytes'])}"
    return [
        ["10k-entry cassette of growing conversations, fresh process: open + late hit",
         "≤ 5 ms", f"{size}: {ms(g['late_open_hit_ms'])} (imports {ms(g['import_ms'])} "
         f"and the close, {ms(g['late_close_ms'])}, apart)", _met(g["late_open_hit_ms"] <= 5)],
        ["the same, an auto-mode miss (runs live; no whole-file parse)", "no whole-file "
         "parse", ms(g["auto_miss_ms"]), "-"],
        ["the same, saving one new entry (appended in place: a new segment and the last "
         "member; nothing before them is written)", "cost of what changed, not of the file",
         ms(g["save_one_ms"]), "-"],
    ]


def _scale_rows(result: list[dict[str, Any]]) -> list[list[str]]:
    """The cassette targets from ``cassette_scale.bench_scale`` (fresh processes)."""
    sc, growing = _split_scale(result)
    extra = _growing_rows(growing) if growing else []
    if not sc:
        return extra
    big = sc[-1]
    n = f"{big['entries']:,} entries: " if big["entries"] != 10_000 else ""
    late = max(big["last_open_hit_ms"], big["random_open_hit_ms"])
    close = max(big[f"{k}_close_ms"] for k in ("first", "last", "random"))
    lo = sc[0]
    flat = big["mean_us"] <= 1.5 * lo["mean_us"] and big["p99_us"] <= 1.5 * lo["p99_us"]
    label = " / ".join(f"{r['entries']:,}" for r in sc)
    return [
        ["10k-entry cassette, fresh process: open + hit on a late or random entry", "≤ 5 ms",
         f"{n}last {ms(big['last_open_hit_ms'])}, random {ms(big['random_open_hit_ms'])} "
         f"(first {ms(big['first_open_hit_ms'])})", _met(late <= 5)],
        ["closing a block over a 10k cassette that changed nothing", "≤ 5 ms",
         f"{n}{ms(close)} (median; worst process {ms(big['max_close_ms'])})", _met(close <= 5)],
        ["replay cost vs cassette size, random order, fresh process",
         f"flat mean and p99 for {label} (largest ≤ 1.5x smallest)",
         "mean " + " / ".join(num(r["mean_us"]) for r in sc) + " µs, p99 "
         + " / ".join(num(r["p99_us"]) for r in sc) + " µs; worst call "
         + us(max(r["max_us"] for r in sc)), _met(flat)],
        *extra,
    ]


def _with_imports_row(cold: dict[str, Any]) -> list[str]:
    """The start-up target: a fresh process's import + first block + late hit + close
    (``bench_cassette.bench_cold``), with its floor and the same in a test process."""
    paid = max(cold[k].get("with_imports_ms", cold[k]["import_ms"] + cold[k]["total_ms"])
               for k in ("last", "random"))
    got = ms(paid)
    if "floor_ms" in cold:
        got += f" (floor `import orjson, xxhash`: {ms(cold['floor_ms'])})"
    if "in_pytest" in cold:
        in_test = max(cold["in_pytest"][k]["with_imports_ms"] for k in ("last", "random"))
        got += f"; with pytest loaded first: {ms(in_test)}"
    return ["10k-entry cassette, fresh process: `import dejacache` + first block + late hit + "
            "close, every import counted", "≤ 10 ms", got, _met(paid <= 10)]


def _cassette_rows(R: Results) -> list[list[str]]:
    sc = _fn_result(R, "cassette_scale")
    cas = R.get("cassette") or {}
    if isinstance(sc, list) and sc and isinstance(sc[0], dict) and "mean_us" in sc[0]:
        rows = _scale_rows(sc)
        if cas.get("cold"):  # the start-up goal is bench_cassette's (imports counted)
            rows.insert(1, _with_imports_row(cas["cold"]))
        return rows
    cold, scale = cas.get("cold"), cas.get("scale")
    rows = []
    job = "10k-entry cassette, fresh process: open + hit on a late or random entry"
    if cold:
        late = max(cold["last"]["open_hit_ms"], cold["random"]["open_hit_ms"])
        n = f"{cold['entries']:,} entries: " if cold["entries"] != 10_000 else ""
        rows.append([job, "≤ 5 ms", f"{n}last {ms(cold['last']['open_hit_ms'])}, random "
                     f"{ms(cold['random']['open_hit_ms'])} (first "
                     f"{ms(cold['first']['open_hit_ms'])})", _met(late <= 5)])
        rows.append(_with_imports_row(cold))
        close = max(cold[k]["close_ms"] for k in ("first", "last", "random"))
        rows.append(["closing a block over a 10k cassette that changed nothing", "≤ 5 ms",
                     f"{n}{ms(close)} (worst of the medians)", _met(close <= 5)])
    else:
        rows += [[job, "≤ 5 ms", NA, "-"],
                 ["closing a block over a 10k cassette that changed nothing", "≤ 5 ms", NA, "-"]]
    job = "replay cost vs cassette size, random order"
    if scale:
        ns = list(scale)
        mean = " / ".join(num(scale[n]["mean_us"]) for n in ns)
        tail = " / ".join(num(scale[n]["p99_us"]) for n in ns)
        worst = us(max(scale[n]["max_us"] for n in ns))
        lo, hi = scale[ns[0]], scale[ns[-1]]
        flat = hi["mean_us"] <= 1.5 * lo["mean_us"] and hi["p99_us"] <= 1.5 * lo["p99_us"]
        label = " / ".join(f"{int(n):,}" for n in ns)
        rows.append([job, f"flat mean and p99 for {label} (largest ≤ 1.5x smallest)",
                     f"mean {mean} µs, p99 {tail} µs; worst call {worst}", _met(flat)])
    else:
        rows.append([job, "flat mean and p99", NA, "-"])
    return rows


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "**no**")


def block_targets(R: Results) -> str:
    rows: list[list[str]] = _cassette_rows(R)
    sw = R.get("shared_writers")
    job = "3 processes x 400 calls in blocks of 10 into one shared cassette, vs 1,200 alone"
    if sw and "ratio" in sw:
        rows.append([job, "≤ 1.5x, no call lost or wrong",
                     f"{sw['ratio']:.2f}x, {sw['writers']['wrong_or_lost']} lost or wrong",
                     _met(sw["ratio"] <= 1.5 and not sw["writers"]["wrong_or_lost"])])
    else:
        rows.append([job, "≤ 1.5x, no call lost or wrong", NA, "-"])
    sq = _fn_result(R, "sqlite_size")
    job = "SQLite store size, 10k calls of a growing 20 KB conversation"
    if isinstance(sq, dict) and "size" in sq:
        s = sq["size"]
        calls = f" ({s['calls']:,} calls)" if s["calls"] != 10_000 else ""
        rows.append([job, "≤ 0.3x raw JSON", f"{s['ratio']:.3f}x{calls}",
                     _met(s["ratio"] <= 0.3)])
    else:
        rows.append([job, "≤ 0.3x raw JSON", NA, "-"])
    rows += _hit_target_rows(R.get("core"))
    core = R.get("core")
    job = "full `@cache` hit through Redis, 2 KB request argument"
    rd = R.get("redis")
    if rd and rd.get("sync"):
        m, f = med(rd["sync"][rd["rows"]["cache_2kb"]]), med(rd["sync"][rd["rows"]["raw"]])
        rows.append([job, "≤ 1.3x raw GET + loads", f"{times(m, f)} ({us(m)} vs {us(f)})",
                     _met(m / f <= 1.3) if m and f else "-"])
    else:
        rows.append([job, "≤ 1.3x raw GET + loads", NA, "-"])
    job = "full `@cache` hit through a Redis Cluster, 2 KB request argument"
    c = rd.get("cluster") if rd else None
    if c:
        m, f = med(c["cells"][c["rows"]["cache_2kb"]]), med(c["cells"][c["rows"]["raw"]])
        rows.append([job, "≤ 1.3x raw RedisCluster GET + loads",
                     f"{times(m, f)} ({us(m)} vs {us(f)})", _met(m / f <= 1.3) if m and f else "-"])
    else:
        rows.append([job, "≤ 1.3x raw RedisCluster GET + loads", NA, "-"])
    rows += _tool_redis_rows(rd)
    job = "key on a miss, a conversation resending N messages (10 / 100 / 1000)"
    measured, met = _growth_summary(_fn_result(R, "keys_growth"))
    rows.append([job, "amortised O(new messages) per turn: the ratio to the floor does not "
                 "grow with N", measured, met])
    rows += _growth_goal_rows(_fn_result(R, "keys_growth"))
    rows.append(_runtime_goal_row(R.get("runtime")))
    if core:
        fk, fl = core["rows"]["full_key"], core["rows"]["key_floor"]
        vals = " / ".join(times(med(core["keys"][s].get(fk)), med(core["keys"][s].get(fl)), 1)
                          for s in SIZES)
        rows.append(["full key on a miss (2 / 20 / 200 KB request) vs plain orjson + xxh3 of "
                     "the request", "-", vals, "-"])
    job = "`import dejacache`, fresh interpreter, bytecode cached"
    imp = _fn_result(R, "import")
    if isinstance(imp, dict) and "import dejacache import ms" in imp:
        t = imp["import dejacache import ms"]
        extra = f" ({imp['ratio']:.2f}x the orjson + xxhash floor)" if "ratio" in imp else ""
        first = imp.get("from dejacache import cache, scope import ms")
        if first is not None:  # lazy names: what the first real use pays
            extra += f"; `from dejacache import cache, scope` {ms(first)}"
        rows.append([job, "≤ 50 ms", f"{ms(t)}{extra}", _met(t <= 50)])
    else:
        rows.append([job, "≤ 50 ms", NA, "-"])
    rows += _plugin_target_rows(R)
    if core and core.get("concurrency"):
        r2 = _conc_ratio(core, "2p")
        ops = core["concurrency"]["dejacache"]["2p"]["ops_per_s"]
        rows.append(["two processes sharing one SQLite file (throughput)", "-",
                     f"{ops:,.0f} ops/s, {times(r2, 1)} the plain-SQLite floor"
                     if r2 else NA, "-"])
    rows.append(_flat_target(R))
    h = R.get("http")
    if h:
        rs = [med(r["dejacache"]) / med(r["floor"]) for r in h["rows"]]
        rows.append(["SDK replay (openai, 2 KB completion and 31-event stream) vs a "
                     "MockTransport", "-", f"{min(rs):.2f}-{max(rs):.2f}x", "-"])
    return "\n".join([table(["job", "goal", "measured", "met"], rows), "",
                      source(R, "cassette_scale", "core", "cassette", "redis", "http",
                             "sqlite_size", "keys_growth", "runtime", "import", "plugin",
                             "flat", "shared_writers")])


# The two ways a hit can hand out its result, each a row of the targets table: the default
# (a fresh copy per caller) and ``@cache(frozen=True)`` (one shared read-only value).
DEFAULT = ", default (fresh copy per hit)"
FROZEN = ", `frozen=True` (one shared read-only value)"


def _ratio_row(job: str, goal: str, limit: float, m: float | None, f: float | None,
               extra: str = "") -> list[str]:
    if m is None or not f:
        return [job, goal, NA, "-"]
    return [job, goal, f"{times(m, f)} ({us(m)} vs {us(f)}){extra}", _met(m / f <= limit)]


def _hit_target_rows(core: dict[str, Any] | None) -> list[list[str]]:
    """The 2 KB hit targets, each for the default and the frozen hit: in memory against the
    orjson + xxh3 + dict floor, against the real ``@scenario.cache``, and in SQLite against
    key + SELECT + loads. The default in-memory row also names its ratio to the floor + fresh
    copy (not the goal's floor: that one is only context)."""
    rows: list[list[str]] = []
    job = "2 KB in-memory `@cache` hit vs orjson(sorted) + xxh3 + dict"
    if core:
        f = _hit(core, "mem_floor", "2KB")
        m, fc = _hit(core, "memory", "2KB"), _hit(core, "mem_copy_floor", "2KB")
        extra = f"; {times(m, fc)} the floor + fresh copy ({us(fc)})" if m and fc else ""
        rows.append(_ratio_row(job + DEFAULT, "≤ 3x", 3, m, f, extra))
        rows.append(_ratio_row(job + FROZEN, "≤ 3x", 3, _hit(core, "memory_frozen", "2KB"), f))
    else:
        rows += [[job + DEFAULT, "≤ 3x", NA, "-"], [job + FROZEN, "≤ 3x", NA, "-"]]
    job = "vs langwatch-scenario's real `@scenario.cache` at 2 KB"
    scen = (core or {}).get("scenario") or {}
    for suffix, cell in ((DEFAULT, "dejacache"), (FROZEN, "dejacache_frozen")):
        c = scen.get("cells", {}) if scen.get("available") else {}
        if med(c.get(cell)) and med(c.get("scenario")):
            r = med(c["scenario"]) / med(c[cell])
            rows.append([job + suffix, "≥ 50x faster", f"{r:.1f}x ({us(med(c['scenario']))} "
                         f"vs {us(med(c[cell]))}, same process)", _met(r >= 50)])
        else:
            why = f"no {cell!r} cell in this run" if scen.get("available") else scen.get("why")
            rows.append([job + suffix, "≥ 50x faster", f"{NA}" + (f" ({why})" if why else ""),
                         "-"])
    job = "SQLite hit at 2 KB vs key + SELECT + loads"
    if core:
        f = _hit(core, "sqlite_floor", "2KB")
        rows.append(_ratio_row(job + DEFAULT, "≤ 1.5x", 1.5, _hit(core, "sqlite", "2KB"), f))
        rows.append(_ratio_row(job + FROZEN, "≤ 1.5x", 1.5, _hit(core, "sqlite_frozen", "2KB"),
                               f))
    else:
        rows += [[job + DEFAULT, "≤ 1.5x", NA, "-"], [job + FROZEN, "≤ 1.5x", NA, "-"]]
    return rows


# The growth rows with a goal at the largest N: (path, job, goal text, limit).
_GROWTH_GOALS = (
    ("miss", "key on a miss, a conversation resending {n} messages", "≤ 2x", 2.0),
    ("decorated miss", "whole `@cache` miss (key, run, store in a `MemoryStore`), a "
     "conversation resending {n} messages", "≤ 4x", 4.0),
)


def _growth_goal_rows(kg: Any) -> list[list[str]]:
    """The key and the whole decorated miss at the largest N of each workload, against the
    plain orjson + xxh3 of the request."""
    out: list[list[str]] = []
    ok = isinstance(kg, list) and all(isinstance(x, dict) for x in kg)
    workloads = list(dict.fromkeys(x.get("workload", "agent") for x in kg)) if ok else [""]
    for wl in workloads or [""]:
        for path, job, goal, limit in _GROWTH_GOALS:
            rows = [x for x in kg if x.get("path") == path
                    and x.get("workload", "agent") == wl] if ok else []
            name = job.format(n="1,000") + (f" ({wl})" if wl else "")
            if not rows or not all({"N", "ours_us", "floor_us"} <= set(x) for x in rows):
                out.append([name, goal + " the orjson + xxh3 floor", NA, "-"])
                continue
            big = max(rows, key=lambda x: x["N"])
            out.append(_ratio_row(job.format(n=f"{big['N']:,}") + f" ({wl})",
                                  goal + " the orjson + xxh3 floor", limit, big["ours_us"],
                                  big["floor_us"]))
    return out


def _runtime_goal_row(rt: dict[str, Any] | None) -> list[str]:
    job = "warm in-memory `tool_cache` hit vs a core `@cache` hit (timed interleaved)"
    hits = (rt or {}).get("hits", {})
    return _ratio_row(job, "≤ 2x", 2.0, med(hits.get("tool_cache hit (tenant, key=)")),
                      med(hits.get("core @cache hit")))


def _growth_summary(kg: Any) -> tuple[str, str]:
    """The miss path's ratio to the floor at each N, and whether it does not grow with N."""
    if not isinstance(kg, list) or not kg or not all(isinstance(x, dict) for x in kg):
        return NA, "-"
    kg = [x for x in kg if x.get("workload", "agent") == "agent"]
    rows = [x for x in kg if x.get("path") == "miss"] or [x for x in kg if "path" not in x]
    if not rows or not all({"N", "ours_us", "floor_us"} <= set(x) for x in rows):
        return "see the key-growth table", "-"
    rs = [x["ours_us"] / x["floor_us"] for x in rows]
    text = " / ".join(f"{r:.2f}x" for r in rs) + " the plain orjson + xxh3 of the request"
    full = [x for x in kg if x.get("path") == "full"]
    if full:
        text += " (full key: " + " / ".join(
            times(x["ours_us"], x["floor_us"]) for x in full) + ")"
    return text, _met(rs[-1] <= rs[0] * 1.1)


# ============================================================================ HTTP peers
# bench_peers_http.py: dejacache vs cassetter vs vcrpy on one workload; columns in this order.
PEERS = ("dejacache", "cassetter_body", "cassetter_default", "vcrpy_body", "floor", "mock_floor")


def _flags(d: dict[str, Any]) -> str:
    notes = [f"WRONG x{d['wrong']}"] if d.get("wrong") else []
    notes += [f"{d['errors']} errors"] if d.get("errors") else []
    return f" **{', '.join(notes)}**" if notes else ""


def _peer_replay(row: dict[str, Any], key: str, part: str = "all") -> str:
    """Median µs (vs httpx alone; vs the in-process MockTransport floor)."""
    d = row["results"].get(key)
    if d is None:
        return "-"
    m = med(d[part])
    f = med(row["results"]["floor"]["all"])
    mf = med(row["results"].get("mock_floor", {}).get("all"))
    if m is None or m != m:
        return "-"
    ratios = [times(m, f)] if key != "floor" else []
    ratios += [f"{times(m, mf)} in-process"] if mf and key != "mock_floor" else []
    cell = num(m) + (f" ({'; '.join(ratios)})" if ratios else "")
    if d.get("capped") and part == "all":
        cell += f" (capped: {d[part]['n']} calls timed)"
    return cell + (_flags(d) if part == "all" else "")


def _peer_cold(d: dict[str, Any] | None) -> str:
    if d is None:
        return "-"
    if "total_ms" not in d:
        return str(d.get("capped") or d.get("error") or "-")
    return (f"{ms(d['import_ms'] + d['total_ms'])} ({ms(d['total_ms'])} without the import)"
            + _flags(d))


def _peer_record(d: dict[str, Any] | None) -> str:
    if d is None:
        return "-"
    if d.get("skipped"):
        return f"skipped ({d['skipped']})"
    if d.get("capped"):
        return f"> {d['seconds']:,.0f} s ({d['capped']})"
    return f"{d['seconds']:,.1f} s" + (f" **WRONG x{d['wrong']}**" if d.get("wrong") else "")


def _peer_targets(P: dict[str, Any]) -> str:
    """The targets dejacache is held to on this workload, from the largest replay and record
    rows of the run."""
    rep, rec = P["replay"][-1], P["record"][-1]
    d, c = rep["results"].get("dejacache"), rep["results"].get("cassetter_body")
    f = med(rep["results"]["floor"]["all"])
    mf = med(rep["results"].get("mock_floor", {}).get("all"))
    parts = []
    if d and c:
        m, mc = med(d["all"]), med(c["all"])
        parts.append(f"warm replay at N = {rep['n']:,} ≤ cassetter (body matching): "
                     f"{us(m)} vs {us(mc)}, {_met(m <= mc)}")
        parts.append(f"≤ 2x httpx alone: {times(m, f)}, {_met(m <= 2 * f)}"
                     + (f" ({times(m, mf)} the in-process floor)" if mf else ""))
    rd, rc = rec["results"].get("dejacache"), rec["results"].get("cassetter_body")
    if rd and rc and "seconds" in rd and "seconds" in rc:
        ok = not rd.get("capped") and (bool(rc.get("capped")) or rd["seconds"] <= rc["seconds"])
        parts.append(f"record + save {rec['n']:,} calls ≤ cassetter (body matching): "
                     f"{_peer_record(rd)} vs {_peer_record(rc)}, {_met(ok)}")
    return "Targets for dejacache: " + "; ".join(parts) + "."


def block_peers_http(R: Results) -> str:
    P = R.get("peers_http")
    if not P:
        return source(R, "peers_http")
    names, res = P["names"], P["replay"]
    keys = [k for k in PEERS if any(k in r["results"] for r in res)]
    rows = []
    for r in res:
        rows.append([f"warm replay, µs median, N = {r['n']:,}"]
                    + [_peer_replay(r, k) for k in keys])
    big = res[-1]
    for part, label in (("first_tenth", "first"), ("last_tenth", "last")):
        rows.append([f"warm replay, N = {big['n']:,}, {label} tenth of the calls"]
                    + [_peer_replay(big, k, part) for k in keys])
    cold = P["cold"]
    rows.append([f"cold: import + open + the last call + close, N = {cold['n']:,}"]
                + [_peer_cold(cold["results"].get(k)) for k in keys])
    for r in P["record"]:
        rows.append([f"record + save, N = {r['n']:,}"]
                    + [_peer_record(r["results"].get(k)) for k in keys])
    ro = P["reorder"]
    any_ro = next(iter(ro.values()), {"n": 20, "fixed_points": 0})
    rows.append([f"wrong answers, {any_ro['n']} recorded calls replayed shuffled"]
                + [f"{ro[k]['wrong']} / {ro[k]['n']}" if k in ro else "-" for k in keys])
    defaults = ", ".join(f"{names[k]} {v['wrong']} / {v['n']}" for k, v in ro.items()
                         if k not in keys)
    skipped = "; ".join(f"{names.get(k, k)}: {why}" for k, why in P.get("skipped", {}).items())
    y = P.get("cassetter_yaml")
    fmt = ""
    if y:
        fmt = (f" cassetter runs with TOML cassettes, which its docs advise for thousands of "
               f"interactions; its default YAML copy of the same {y['n']:,}-call cassette "
               + ("loads." if y["loads"] else
                  f"does not load: `{re.sub(r'/[^ :]*/', '', y['error'])}`."))
    return "\n".join([
        "LLM-shaped httpx calls (OpenAI chat-completions bodies, 2 KB and 20 KB alternating; "
        "~1.2 KB JSON answers) recorded from a loopback provider process and replayed from one "
        "cassette of N calls, in recorded order, each tool's block re-entered per round "
        "(untimed), contenders interleaved round by round. In brackets: the median divided by "
        "httpx alone (the same POST to the loopback provider, no tool) in the same rounds, and "
        "by the in-process floor (the same call answered by an httpx `MockTransport`: on this "
        "shared 2-core VM the loopback round trip waits for the provider process to be "
        "scheduled, and moved from ~0.6 to ~3 ms between runs). Every replayed answer is "
        "checked against the provider's; a capped cell timed only the calls it names. Cold "
        "starts: median of 3 fresh processes after one that writes the bytecode.", "",
        table(["", *(names[k] for k in keys)], rows), "",
        f"Shuffled replay: {any_ro['fixed_points']} of the {any_ro['n']} calls stay in place, so "
        f"a tool that replays by position gets {any_ro['n'] - any_ro['fixed_points']} wrong at "
        f"most." + (f" Also measured: {defaults}." if defaults else "")
        + (f" Not run: {skipped}." if skipped else "") + fmt, "",
        _peer_targets(P), "",
        f"Machine: {P.get('machine')}. Versions: {P.get('versions')}.", "",
        source(R, "peers_http")])


def block_peers_http_summary(R: Results) -> str:
    P = R.get("peers_http")
    if not P:
        return source(R, "peers_http")
    r = P["replay"][-1]
    f = med(r["results"]["floor"]["all"])
    parts = []
    for k in ("dejacache", "cassetter_body", "vcrpy_body"):
        d = r["results"].get(k)
        if d and med(d["all"]) == med(d["all"]):
            parts.append(f"{P['names'][k]} {us(med(d['all']))} ({times(med(d['all']), f)})")
    return (f"Replaying httpx calls from a cassette of {r['n']:,} LLM calls, median per call "
            f"(vs httpx alone to a loopback provider, {us(f)}): " + ", ".join(parts)
            + f". {source(R, 'peers_http')}")


# ============================================================================ documents
BLOCKS: dict[str, Callable[[Results], str]] = {
    "targets": block_targets,
    "core-hits": block_core_hits,
    "core-keys": block_core_keys,
    "core-breakdown": block_breakdown,
    "concurrency": block_concurrency,
    "cassette": block_cassette,
    "cassette-scale": block_cassette_scale,
    "flat": block_flat,
    "http": block_http,
    "proxy": block_proxy,
    "peers-http": block_peers_http,
    "peers-http-summary": block_peers_http_summary,
    "redis": block_redis,
    "runtime": block_runtime,
    "sqlite-size": block_sqlite_size,
    "keys-growth": block_keys_growth,
    "import": block_import,
    "plugin": block_plugin,
    "learn": block_learn,
    "shared-writers": block_shared_writers,
}


def render_text(text: str, R: Results) -> str:
    """``text`` with every marked block rewritten from ``R``; an unknown block name raises."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in BLOCKS:
            raise KeyError(f"unknown benchmark block {name!r} (known: {sorted(BLOCKS)})")
        return m.group(1) + BLOCKS[name](R).rstrip("\n") + "\n" + m.group(4)

    return BLOCK.sub(sub, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a document differs from what the results render")
    ap.add_argument("--results", default=str(RESULTS))
    a = ap.parse_args(argv)
    R = load(pathlib.Path(a.results))
    stale = []
    for path in DOCS:
        old = path.read_text(encoding="utf-8")
        new = render_text(old, R)
        if new != old:
            stale.append(path)
            if not a.check:
                path.write_text(new, encoding="utf-8")
                print(f"rendered {path.relative_to(ROOT)}", file=sys.stderr)
    if a.check and stale:
        print("stale benchmark blocks: " + ", ".join(str(p.relative_to(ROOT)) for p in stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
