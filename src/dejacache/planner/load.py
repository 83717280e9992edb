"""Recorded sessions for the prompt-cache planner: cassettes, directories of them, and the
traces a ``PrefixMonitor(trace=...)`` writes.

A cassette is one account (its requests shared the provider's caches, in file order); its
sessions are inferred as ``prefix-report`` infers them (``cassette.json#1``...), and a
request's time is its ``recorded_at`` less the call's duration. A trace is one account too,
with the monitor's own session names and clock.

Trace format (JSON lines): a first line ``{"dejacache": "prompt-cache-trace", "version": 1}``,
then one line per request the monitor saw: ``{"session", "at", "provider", "endpoint",
"body", "usage", "local"}``; credentials in bodies are masked as cassettes mask them.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import orjson

from .._core.cache_plan import Account, Turn
from .._core.prefix import api_of
from .._core.prompt_cache import read_usage
from ..errors import CassetteError
from ..keys import MAX_DEPTH

__all__ = ["TRACE_HEAD", "accounts", "trace_line"]

TRACE_HEAD = {"dejacache": "prompt-cache-trace", "version": 1}


def _is_trace(path: pathlib.Path) -> bool:
    if path.suffix == ".jsonl":
        return True
    with path.open("rb") as f:
        first = f.readline(4096)
    return b'"prompt-cache-trace"' in first


def _files(target: pathlib.Path) -> Iterator[pathlib.Path]:
    if target.is_dir():
        yield from sorted(f for f in target.rglob("*") if f.is_file()
                          and f.suffix in (".json", ".jsonl"))
    elif target.exists():
        yield target
    else:
        raise CassetteError("no such file or directory", path=target)


def accounts(target: str | pathlib.Path, *, per_cassette: bool = False) -> list[Account]:
    """One :class:`Account` per cassette or trace under ``target`` (a file or a directory);
    files holding no LLM request are left out."""
    out = []
    for path in _files(pathlib.Path(target)):
        account = _trace(path) if _is_trace(path) else _cassette(path, per_cassette)
        if account.turns:
            out.append(account)
    return out


def _cassette(path: pathlib.Path, per_cassette: bool) -> Account:
    from ..cassettes.prefix_report import recorded_requests

    turns = tuple(Turn(r.session, r.api, r.body, read_usage(r.usage), r.at)
                  for r in recorded_requests(path, per_cassette))
    return Account(path.name, turns)


def _trace(path: pathlib.Path) -> Account:
    turns = []
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise CassetteError(f"line {n} is not JSON ({exc})", path=path) from None
            if n == 1 and isinstance(row, dict) and row.get("dejacache") == TRACE_HEAD[
                    "dejacache"]:
                continue
            if _too_deep(row):
                raise CassetteError(f"line {n} is nested more than {MAX_DEPTH} levels deep "
                                    "(no provider request is)", path=path)
            turn = _trace_turn(row)
            if turn is not None:
                turns.append(turn)
    return Account(path.name, tuple(turns))


def _too_deep(value: Any) -> bool:
    """Nested deeper than a call key may be: the planner copies and compares requests
    recursively, and a row ~1,000 levels deep (orjson reads up to 1,024) ran it out of
    stack."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if type(v) is dict:
            stack.extend((x, depth + 1) for x in v.values())
        elif type(v) is list:
            stack.extend((x, depth + 1) for x in v)
    return False


def _trace_turn(row: Any) -> Turn | None:
    if not isinstance(row, dict) or not isinstance(row.get("body"), dict):
        return None
    api = api_of(str(row.get("provider", "")), row["body"], str(row.get("endpoint", "")))
    if api is None:
        return None
    at = row.get("at")
    return Turn(str(row.get("session", "default")), api, row["body"],
                read_usage(row.get("usage")), float(at) if isinstance(at, (int, float)) else None,
                bool(row.get("local")))


def trace_line(session: str, at: float | None, provider: str, endpoint: str, body: Any,
               usage: Any, local: bool) -> bytes:
    """One line of a trace (credentials in the body masked)."""
    from ..cassettes.redact import Redactor

    row = {"session": session, "at": at, "provider": provider, "endpoint": endpoint,
           "body": Redactor().tree(body), "usage": usage, "local": local}
    return orjson.dumps(row) + b"\n"
