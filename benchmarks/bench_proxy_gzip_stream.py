"""A gzip event stream recorded through ``dejacache proxy``: microseconds per event.

A loopback upstream streams ``EVENTS`` chat-completion chunks per call, gzip-compressed one
event per write (a sync flush after each, as a compressing server streams); an httpx2 client
reads each answer through the proxy (its own decoder undoing whatever coding reaches it) in
``record`` mode, one new prompt per call, and directly from the upstream (the floor). Printed:
the median over rounds of the per-event time of each, and their difference (the proxy's
cost per event). ``--baseline SRC`` runs the same in a process importing another checkout's
``src/`` (``git archive main src | tar -x -C /tmp/base``), rounds interleaved, for a
before/after on a busy machine.

    .venv/bin/python benchmarks/bench_proxy_gzip_stream.py [--calls N] [--rounds N]
        [--baseline SRC]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

EVENTS = 200


def _events() -> list[bytes]:
    out = []
    for i in range(EVENTS):
        chunk = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "model": "gpt-test",
                 "choices": [{"index": 0, "delta": {"content": f" word{i}"},
                              "finish_reason": "stop" if i == EVENTS - 2 else None}]}
        out.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    out[-1] = b"data: [DONE]\n\n"
    return out


def _upstream() -> object:
    from provider_support import LoopbackHandler, LoopbackProvider

    events = _events()

    class Handler(LoopbackHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.start_stream("text/event-stream", {"content-encoding": "gzip"})
            c = zlib.compressobj(wbits=31)
            for ev in events:
                self.write_event(c.compress(ev) + c.flush(zlib.Z_SYNC_FLUSH))
            self.write_event(c.flush())
            self.end_stream()

    class Upstream(LoopbackProvider):
        handler = Handler

    return Upstream().start()


async def _measure(calls: int) -> dict[str, float]:
    import httpx2

    from dejacache.proxying._server import ProxyConfig, ProxyServer
    from dejacache.proxying._sessions import SessionSpec
    from dejacache.proxying.upstreams import parse_upstream

    up = _upstream()
    tmp = pathlib.Path(tempfile.mkdtemp())
    server = ProxyServer(ProxyConfig(
        spec=SessionSpec(cassette=tmp / "b.json"), cassette=tmp / "b.json",
        upstreams={"openai": parse_upstream(f"openai={up.url}", "bench")},  # type: ignore[attr-defined]
        cassette_dir=tmp))
    url = await server.start()
    out: dict[str, list[float]] = {"proxy": [], "direct": []}
    try:
        async with httpx2.AsyncClient(timeout=30) as client:
            for n in range(calls + 5):
                body = {"model": "gpt-test", "stream": True,
                        "messages": [{"role": "user", "content": f"prompt {n}"}]}
                for name, base in (("proxy", f"{url}/openai"), ("direct", up.url)):  # type: ignore[attr-defined]
                    t0 = time.perf_counter()
                    async with client.stream("POST", base + "/v1/chat/completions",
                                             json=body) as r:
                        got = b"".join([c async for c in r.aiter_bytes()])
                    took = time.perf_counter() - t0
                    assert got.endswith(b"data: [DONE]\n\n"), got[-40:]
                    if n >= 5:  # warm-up
                        out[name].append(took / EVENTS * 1e6)
    finally:
        await server.stop()
        up.stop()  # type: ignore[attr-defined]
    return {k: statistics.median(v) for k, v in out.items()}


def _child(src: str | None, calls: int) -> dict[str, float]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    code = (f"import asyncio, json, sys; sys.path.insert(0, {str(HERE)!r}); "
            "import bench_proxy_gzip_stream as b; "
            f"print(json.dumps(asyncio.run(b._measure({calls}))))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", default=None)
    args = ap.parse_args(argv)
    here = str(HERE.parent / "src")
    targets = {"dejacache": here, **({"baseline": args.baseline} if args.baseline else {})}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in targets}
    for _ in range(args.rounds):
        for name, src in targets.items():
            runs[name].append(_child(src, args.calls))
    for name, rs in runs.items():
        proxy = statistics.median(r["proxy"] for r in rs)
        direct = statistics.median(r["direct"] for r in rs)
        print(f"{name:10} through the proxy {proxy:6.2f} us/event, direct {direct:6.2f}, "
              f"the proxy's own {proxy - direct:6.2f} us/event ({EVENTS} events per call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
