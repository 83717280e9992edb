"""``dejacache prefix-report FILE_OR_DIR``: prompt-cache health of recorded conversations.

Reads cassettes with the ordinary reader (``view.load``), replays their LLM requests in file
order through the same per-session accounting as :class:`dejacache.PrefixMonitor` (no clock:
cassettes keep no timestamps, so ``ttl`` is never reported here), and prints, per session, the
hit ratio, the top breakers with counts, tokens and cost, and the hazards (volatile text in a
first turn's prefix, a cacheable prefix under the provider's minimum), which are not breaks.

Cassettes record no session ids, so sessions are inferred: within one cassette and endpoint, a
request continues the conversation whose last request shares the most leading messages with it,
and starts a new one when it shares none (``--per-cassette``: one session per cassette and
endpoint).
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

from .._core.counts import counted
from .._core.prefix import Prefix, api_of, build_prefix
from .._core.prompt_cache import PrefixBreak, SessionReport, SessionState, SessionTotals, read_usage
from ..errors import CassetteError
from ..http.providers.gemini import model_of
from ..http.sse import event_data

__all__ = ["PROVIDER_OF_API", "Recorded", "SessionInference", "add_prefix_report", "analyse",
           "iter_cassettes", "recorded_requests", "stored_usage"]

#: The provider each request API belongs to (a turn is read only from its own provider).
PROVIDER_OF_API = {"messages": "anthropic", "chat": "openai", "responses": "openai",
                   "gemini": "gemini"}


def iter_cassettes(target: str | pathlib.Path) -> Iterator[pathlib.Path]:
    p = pathlib.Path(target)
    if p.is_dir():
        yield from sorted(f for f in p.rglob("*.json") if f.is_file())
    else:
        yield p


def stored_usage(response: Any) -> Any:
    """The provider's usage object of a stored HTTP answer (JSON body or SSE events)."""
    if not isinstance(response, dict):
        return None
    body = response.get("json")
    if isinstance(body, dict) and isinstance(body.get("usage"), dict):
        return body["usage"]
    if isinstance(body, dict) and isinstance(body.get("usageMetadata"), dict):
        return body["usageMetadata"]  # Gemini
    merged: dict[str, Any] = {}
    for ev in response.get("events") or []:
        data = event_data(ev[1]) if isinstance(ev, list) and len(ev) == 2 else None
        if not isinstance(data, dict):
            continue
        found = data.get("usage")
        if data.get("type") == "message_start" and isinstance(data.get("message"), dict):
            found = data["message"].get("usage")
        elif isinstance(data.get("response"), dict):
            found = data["response"].get("usage")
        if isinstance(data.get("usageMetadata"), dict):  # Gemini: the last event's is whole
            found = data["usageMetadata"]
        if isinstance(found, dict):
            merged.update({k: v for k, v in found.items() if v is not None})
    return merged or None


def _conversation_items(p: Prefix) -> list[str]:
    return [i.digest for i in p.items if i.segment in ("messages", "input") and not i.system_like]


class SessionInference:
    """Session inference for one cassette: which conversation each request continues (the
    one it shares the most leading messages with), as ``prefix-report`` and the HTML report
    both read it."""

    def __init__(self, name: str, per_cassette: bool) -> None:
        self.name = name
        self.per_cassette = per_cassette
        self.open: dict[str, list[tuple[str, Prefix]]] = collections.defaultdict(list)
        self.count = 0

    def session_for(self, endpoint: str, prefix: Prefix) -> str:
        chains = self.open[endpoint]
        if self.per_cassette and chains:
            return chains[0][0]
        best, score = None, 0
        mine = _conversation_items(prefix)
        for i, (_name, last) in enumerate(chains):
            theirs = _conversation_items(last)
            shared = 0
            for x, y in zip(theirs, mine, strict=False):
                if x != y:
                    break
                shared += 1
            if shared > score:
                best, score = i, shared
        if best is None:
            self.count += 1
            name = f"{self.name}#{self.count}"
            chains.append((name, prefix))
            return name
        name = chains[best][0]
        chains[best] = (name, prefix)
        return name


class Recorded(NamedTuple):
    """One LLM request of a cassette, as the prompt-cache readers take it."""

    session: str  # inferred (see the module)
    api: str  # messages | chat | responses
    body: dict[str, Any]  # the request body as stored (cache controls included)
    prefix: Prefix
    usage: Any  # the provider's usage object of the stored answer, if any
    at: float | None  # when it was sent (recorded_at less the call's duration)


def recorded_requests(path: pathlib.Path, per_cassette: bool = False) -> Iterator[Recorded]:
    """The LLM requests of one cassette that the provider answered, in file order."""
    from .._core.ageing import recorded_at
    from .view import expanded_entries, load

    tape = SessionInference(path.name, per_cassette)
    for entry in expanded_entries(load(path)):
        name = str(entry.get("name", ""))
        req = entry.get("request")
        body = req.get("body") if isinstance(req, dict) else None
        if "error" in entry or not isinstance(body, dict):
            continue
        response = entry.get("response")
        if isinstance(response, dict) and int(response.get("status", 200)) >= 400:
            continue
        provider = name.partition(".")[0]
        api = api_of(provider, body, name)
        if api is None or PROVIDER_OF_API[api] != provider:
            continue
        if api == "gemini" and "model" not in body:  # Gemini names it in the URL
            body = {**body, "model": model_of(str(req.get("path", "")) if req else "")}
        prefix = build_prefix(api, body)
        at = recorded_at(entry)
        duration = entry.get("duration")
        if at is not None and isinstance(duration, (int, float)):
            at -= float(duration)
        yield Recorded(tape.session_for(name, prefix), api, body, prefix,
                       stored_usage(response), at)


def analyse(paths: list[pathlib.Path], per_cassette: bool = False
            ) -> tuple[dict[str, SessionReport], list[PrefixBreak]]:
    """Per-session reports and every break, over the given cassette files."""
    from .prices import rates_from_table

    rates = rates_from_table()
    states: dict[str, SessionState] = {}
    totals: dict[str, SessionTotals] = {}
    breaks: list[PrefixBreak] = []
    for path in paths:
        for rec in recorded_requests(path, per_cassette):
            state = states.setdefault(rec.session, SessionState(rec.session))
            record, found, hazards = state.turn(rec.prefix, read_usage(rec.usage), None, rates)
            totals.setdefault(rec.session, SessionTotals(rec.session)).add(record, found,
                                                                          hazards)
            breaks.extend(found)
    return {k: t.report() for k, t in totals.items()}, breaks


def _cmd(args: argparse.Namespace) -> int:
    try:
        paths = list(iter_cassettes(args.target))
        reports, breaks = analyse(paths, args.per_cassette)
    except (CassetteError, OSError, orjson.JSONDecodeError) as exc:
        print(f"dejacache prefix-report: {exc}", file=sys.stderr)
        return 2
    top: dict[tuple[str, str, str], list[Any]] = {}
    for b in breaks:
        row = top.setdefault((b.reason, b.segment, b.path), [0, 0, 0.0, b])
        row[0] += 1
        row[1] += b.tokens
        row[2] += b.cost
    ranked = sorted(top.items(), key=lambda kv: (-kv[1][2], -kv[1][0], kv[0]))
    if args.json:
        doc = {
            "sessions": [
                {"session": r.session, "turns": r.turns, "breaks": r.breaks,
                 "prompt_tokens": r.prompt_tokens, "expected_cached": r.expected_cached,
                 "reported_cached": r.reported_cached, "hit_ratio": r.hit_ratio,
                 "cost": r.cost,
                 "hazards": [{"kind": h.kind, "segment": h.segment, "path": h.path,
                              "offset": h.offset, "text": h.text} for h in r.hazards]}
                for r in reports.values()],
            "breakers": [
                {"reason": k[0], "segment": k[1], "path": k[2], "count": v[0], "tokens": v[1],
                 "cost": v[2], "example": {"offset": v[3].offset, "before": v[3].before,
                                           "after": v[3].after}}
                for k, v in ranked[: args.top]],
        }
        print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return 0
    print(f"{counted(len(paths), 'cassette')}, {counted(len(reports), 'session')}, "
          f"{counted(len(breaks), 'prefix break')}")
    for r in reports.values():
        print(f"  {r}")
    if ranked:
        print("top breakers:")
        for (reason, _segment, path), (count, tokens, cost, ex) in ranked[: args.top]:
            where = f"`{path}` at offset {ex.offset:,}" if path else ""
            print(f"  {count:>4}x {reason:<13} {where}  {tokens:,} tokens  ${cost:.4f}  "
                  f"e.g. `{ex.before}` → `{ex.after}`")
    _print_hazards(reports)
    return 0


def _print_hazards(reports: dict[str, SessionReport]) -> None:
    """Hazards (found before they cost anything; never counted as breaks), each kind and
    place once, with the number of sessions that show it."""
    seen: dict[tuple[str, str, str], list[Any]] = {}
    for r in reports.values():
        for h in r.hazards:
            seen.setdefault((h.kind, h.segment, h.path), [0, h])[0] += 1
    if not seen:
        return
    print("hazards:")
    for (kind, _segment, _path), (count, h) in seen.items():
        where = f"`{h.path}` at offset {h.offset:,}: " if h.path else ""
        print(f"  {count:>4}x {kind:<13} {where}`{h.text}`")


def add_prefix_report(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "prefix-report", help="prompt-cache hit ratio per session and the top prefix breakers")
    p.add_argument("target", metavar="FILE_OR_DIR", help="a cassette, or a directory of them")
    p.add_argument("--per-cassette", action="store_true",
                   help="one session per cassette and endpoint (no inference)")
    p.add_argument("--top", type=int, default=10, help="breakers shown (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd)
