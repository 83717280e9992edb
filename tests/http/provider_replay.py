"""Record a provider scenario here, replay it in a fresh process with the provider stopped.

A scenario is a module-level function of a test module, ``scenario(base_url) -> JSON``
(or a coroutine function): it drives the provider's real SDK and returns what the caller saw
(SDK objects dumped, error classes and statuses). :func:`record` runs it live under a
cassette; :func:`replay_fresh` runs it again in a new interpreter under the same cassette in
replay mode, counting every socket connection that process attempts, and returns what it saw
with the process's ``stats()`` and the cassette's own counters.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any

import dejacache

__all__ = ["assert_no_secrets", "record", "record_then_replay_fresh", "replay_fresh"]

_TESTS = pathlib.Path(__file__).resolve().parents[1]
_SRC = pathlib.Path(dejacache.__file__).resolve().parents[1]


def record(cassette: pathlib.Path, scenario: Callable[[str], Any], base_url: str) -> Any:
    """Run ``scenario`` live under a recording cassette; return what it saw."""
    with dejacache.cassette(cassette, mode="record"):
        if inspect.iscoroutinefunction(scenario):
            return asyncio.run(scenario(base_url))
        return scenario(base_url)


_CHILD = r"""
import asyncio, inspect, json, socket, sys
sys.path[:0] = {paths!r}
attempts = []
for name in ("connect", "connect_ex"):
    def spy(self, address, _orig=getattr(socket.socket, name)):
        attempts.append(repr(address))
        return _orig(self, address)
    setattr(socket.socket, name, spy)
import dejacache
import {module} as m
scenario = m.{func}
with dejacache.cassette({cassette!r}, mode="replay") as tape:
    if inspect.iscoroutinefunction(scenario):
        out = asyncio.run(scenario({url!r}))
    else:
        out = scenario({url!r})
total = dejacache.stats().total
c = tape.counters
print(json.dumps({{"out": out, "attempts": attempts, "hits": total.hits,
                  "misses": total.misses, "tokens_saved": total.tokens_saved,
                  "by_name": sorted(dejacache.stats().by_name),
                  "replayed": c.replayed, "dollars_saved": c.dollars_saved}}))
"""


def replay_fresh(cassette: pathlib.Path, scenario: Callable[[str], Any],
                 base_url: str) -> dict[str, Any]:
    """Run ``scenario`` in a new interpreter under ``cassette`` in replay mode."""
    code = _CHILD.format(paths=[str(_TESTS), str(_TESTS / "http")],
                         module=scenario.__module__, func=scenario.__name__,
                         cassette=str(cassette), url=base_url)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(_SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-W", "error::dejacache.DejacacheWarning", "-c", code],
                         capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def assert_no_secrets(root: pathlib.Path, secrets: Iterable[str]) -> None:
    """No file under ``root`` holds any of ``secrets`` (their raw bytes, anywhere)."""
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files, f"nothing was written under {root}"
    for p in files:
        data = p.read_bytes()
        for s in secrets:
            assert s.encode() not in data, f"{s!r} is in {p}"


def record_then_replay_fresh(fake: Any, cassette: pathlib.Path, scenario: Callable[[str], Any],
                             name: str) -> tuple[Any, dict[str, Any]]:
    """Record ``scenario`` (four answers, then a 429 and a 500) against ``fake``, stop it and
    replay in a fresh process: every call a hit under ``name``, the same answers, no attempt
    to connect, tokens saved. Returns what the recording and the replay saw."""
    fake.script.extend([{}, {}, {}, {}, {"status": 429}, {"status": 500}])
    live = record(cassette, scenario, fake.url)
    fake.stop()
    again = replay_fresh(cassette, scenario, fake.url)
    assert again["out"] == live
    assert again["attempts"] == []
    assert again["misses"] == 0 and again["hits"] == again["replayed"] == 6
    assert again["by_name"] == [name]
    assert again["tokens_saved"] > 0
    return live, again
