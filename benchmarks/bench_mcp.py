"""MCP sessions recorded and replayed: one session's calls against the ticket-desk server,
server start included, live (recording) beside replayed from the cassette.

    python benchmarks/bench_mcp.py [--rounds N]

Stdio: the recording starts the server process (an interpreter importing ``mcp``) and runs
the session; the replay starts nothing. Streamable HTTP: the recording starts the server
(uvicorn on loopback, in a thread) as well; the replay connects nowhere. The session is
``tests/mcp_face/mcp_flow.py``'s: handshake, listing, six calls (a tool error and a JSON-RPC
error among them), a resource and a prompt. Rounds alternate record and replay; medians and
the slowest round are printed, in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
for sub in ("tests", "tests/mcp_support", "tests/mcp_face"):
    sys.path.insert(0, str(ROOT / sub))

from fake_mcp_server import LEDGER_ENV, Ledger  # noqa: E402
from mcp_flow import run  # noqa: E402
from mcp_servers import SCRIPT, HttpServer  # noqa: E402


async def once(transport: str, tape: str, mode: str, ledger: Ledger) -> float:
    t0 = time.perf_counter()
    server = None
    if transport == "stdio":
        spec: dict[str, Any] = {"transport": "stdio", "command": sys.executable,
                                "args": [str(SCRIPT)], "env": {LEDGER_ENV: ledger.path}}
    else:
        if mode == "record":
            server = HttpServer(ledger, "streamable-http").start()
        spec = {"transport": "streamable-http", "url": "http://127.0.0.1:9/mcp"
                if server is None else server.url}
    try:
        out = await run(spec, tape, mode)
    finally:
        if server is not None:
            server.stop()
    assert "failed" not in out, out
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(pathlib.Path(tmp) / "ledger.jsonl")
        for transport in ("stdio", "streamable-http"):
            tape = str(pathlib.Path(tmp) / f"{transport}.json")
            times: dict[str, list[float]] = {"record": [], "replay": []}
            for _ in range(rounds):
                for mode in ("record", "replay"):
                    times[mode].append(asyncio.run(once(transport, tape, mode, ledger)))
            rows.append((transport, times))
        starts = ledger.starts()
    print(f"MCP session, server start included ({rounds} rounds, milliseconds)\n")
    print("| transport | record median | record max | replay median | replay max | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for transport, t in rows:
        rec, rep = statistics.median(t["record"]), statistics.median(t["replay"])
        print(f"| {transport} | {rec * 1e3:.0f} | {max(t['record']) * 1e3:.0f} | "
              f"{rep * 1e3:.1f} | {max(t['replay']) * 1e3:.1f} | {rec / rep:.0f}x |")
    print(f"\nservers started: {starts} (one per recording, none per replay)")


if __name__ == "__main__":
    main()
