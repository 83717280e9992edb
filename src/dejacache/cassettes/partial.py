"""Partial replay: some calls of a recorded run go live, the rest replay.

``cassette(path, live=[...])``: calls the rules name go live, every other call replays (a
call with no recording is a ``ReplayMiss``, reported as in ``replay`` mode). With
``strict=True`` the replayed calls keep their recorded order, the recorded steps the rules
name skipped (``OrderBook.skip``: they went live, nothing is taken from them).
``cassette(path, replay_until=N)``: the first N calls replay in the recorded order (strict:
a call that is not the recorded one at its step is a ``ReplayDivergence`` naming the step it
expected), every later call goes live.

The vocabulary of ``live`` (each item one of):

=====================  ===================================================================
``"model"``            calls to a model: HTTP calls to an endpoint a provider module names
                       (``openai.chat.completions``, ``anthropic.messages``...) and
                       ``@cache(kind="llm" | "model" | "chat" | "completion")`` functions
``"tool"``             ``@cache(kind="tool")`` functions and MCP ``tools/call`` (all
                       named ``mcp.tools/call``: an MCP tool is chosen by kind only)
``"function"``         any other ``@cache`` function
``"http"``             HTTP calls no provider module names (``http.<host>``)
``"<kind>:<name>"``    calls of that kind whose name, or its last dotted part, matches the
                       shell-style pattern (``"tool:search_web"``, ``"model:openai.*"``)
``"<name>"``           any call whose name matches (``"search_web"``)
=====================  ===================================================================

What the live calls record goes to a derived cassette (``<name>.live.json`` beside the
original, or ``live_path=``), written when the block exits cleanly; the original file is
never written by a partial block.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import pathlib
import threading
from collections.abc import Iterable
from typing import Final

from ..errors import ConfigurationError
from .kinds import KINDS, step_kind

__all__ = ["LIVE_SUFFIX", "LiveRule", "Partial", "check_partial", "derived_path", "parse_live",
           "unmatched_note"]

#: The derived cassette of a partial block, beside the original: ``<name>.live.json``.
LIVE_SUFFIX: Final = ".live.json"
# Calls a block remembers by name for the note on a rule that matched none (a few suffice).
_KEEP_CALLS: Final = 50


@dataclasses.dataclass(frozen=True, slots=True)
class LiveRule:
    kind: str | None  # None: any kind
    pattern: str | None  # None: any name

    @property
    def text(self) -> str:
        """The rule as written (``"model"``, ``"tool:search_web"``, ``"search_web"``)."""
        if self.kind is None:
            return self.pattern or "*"
        return self.kind if self.pattern is None else f"{self.kind}:{self.pattern}"

    def matches(self, name: str, kind: str) -> bool:
        if self.kind is not None and self.kind != kind:
            return False
        p = self.pattern
        return p is None or fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(
            name.rsplit(".", 1)[-1], p)


def parse_live(items: Iterable[str] | str | None, where: str = "live") -> tuple[LiveRule, ...]:
    """``live=`` as rules, checked where it is written."""
    if items is None:
        return ()
    if isinstance(items, str):
        items = [i for i in items.split(",") if i.strip()]
    rules = []
    for raw in items:
        if not isinstance(raw, str) or not raw.strip():
            raise ConfigurationError(f"{where}: each item is a kind, 'kind:name' or a name; "
                                     f"got {raw!r}")
        item = raw.strip()
        kind, sep, name = item.partition(":")
        if sep:
            if kind not in KINDS:
                raise ConfigurationError(f"{where}: unknown kind {kind!r} in {item!r}; "
                                         f"expected one of {', '.join(KINDS)}")
            rules.append(LiveRule(kind, name or None))
        elif item in KINDS:
            rules.append(LiveRule(item, None))
        else:
            rules.append(LiveRule(None, item))
    return tuple(rules)


def derived_path(path: pathlib.Path, given: str | os.PathLike[str] | None) -> pathlib.Path:
    """Where a partial block's live calls are written (never the original file)."""
    out = pathlib.Path(given) if given is not None else path.with_name(
        path.name.removesuffix(".json") + LIVE_SUFFIX)
    if out.resolve() == path.resolve():
        raise ConfigurationError(f"live_path: {out} is the cassette itself; the live calls "
                                 "of a partial replay never overwrite the recording")
    return out


def check_partial(mode: str | None) -> None:
    """A partial block replays what does not go live: ``record`` and ``off`` contradict it.
    (``strict=True`` is welcome: the replayed calls keep their recorded order, the recorded
    steps that go live skipped, ``OrderBook.skip``.)"""
    if mode in ("record", "off"):
        raise ConfigurationError(f"live= / replay_until= replay the calls that do not go "
                                 f"live: mode={mode!r} contradicts them (leave it out, or "
                                 "use 'auto' or 'replay')")


class Partial:
    """Which calls of one partial block go live (``mode_for``), counted in the order made."""

    def __init__(self, rules: tuple[LiveRule, ...], until: int | None) -> None:
        if until is not None and (type(until) is not int or until < 0):
            raise ConfigurationError(f"replay_until must be a number of calls (0 or more); "
                                     f"got {until!r}")
        self.rules = rules
        self.until = until
        self.seen = 0  # calls made so far in the block
        self.live_calls = 0
        self._lock = threading.Lock()
        #: rules that matched a call (or a recorded step), and the calls the block made as
        #: (name, kind): a rule matching none of them is a typo to name (``unmatched``)
        self.matched: set[LiveRule] = set()
        self.calls: dict[tuple[str, str], None] = {}

    def mode_for(self, name: str, raw_kind: str) -> str:
        """``replay`` or ``record`` (live, and recorded into the derived cassette)."""
        with self._lock:
            n = self.seen
            self.seen += 1
            live = (self.until is not None and n >= self.until) or self.goes_live(
                name, raw_kind)
            self.live_calls += live
            if len(self.calls) < _KEEP_CALLS:
                self.calls[(name, step_kind(raw_kind, name))] = None
        return "record" if live else "replay"

    def goes_live(self, name: str, raw_kind: str) -> bool:
        """Whether the ``live=`` rules send calls like this live (recorded steps too)."""
        kind = step_kind(raw_kind, name)
        hit = False
        for r in self.rules:
            if r.matches(name, kind):
                self.matched.add(r)
                hit = True
        return hit

    def unmatched(self) -> list[LiveRule]:
        """The ``live=`` rules no call of the block matched."""
        return [r for r in self.rules if r not in self.matched]

    def describe(self) -> str:
        parts = []
        if self.rules:
            parts.append("live=" + ", ".join(
                f"{r.kind or '*'}:{r.pattern or '*'}" for r in self.rules))
        if self.until is not None:
            parts.append(f"replay_until={self.until}")
        return " ".join(parts)


def unmatched_note(rules: Iterable[LiveRule], calls: Iterable[tuple[str, str]],
                   where: str) -> str:
    """What a warning says of ``live=`` rules that matched no call ``where`` (a block, a
    session): the rules, the closest kind or name each may have meant, and the calls made."""
    from .._suggest import closest

    made = list(calls)
    names = {n for n, _ in made} | {n.rsplit(".", 1)[-1] for n, _ in made}
    parts = []
    for r in rules:
        meant = None
        if r.kind is None and r.pattern is not None:
            kind = closest(r.pattern, KINDS)
            meant = f"the kind {kind!r}" if kind else None
            name = None if kind else closest(r.pattern, names)
            meant = meant or (f"the call {name!r}" if name else None)
        parts.append(repr(r.text) + (f" (did you mean {meant}?)" if meant else ""))
    shown = ", ".join(f"{n} ({k})" for n, k in made[:6]) + (" ..." if len(made) > 6 else "")
    return (f"dejacache: live= pattern{'s' if len(parts) != 1 else ''} "
            f"{', '.join(parts)} matched no call {where}, so every call replayed"
            + (f"; the calls made: {shown}" if made else "; no call was made")
            + f". The kinds are {', '.join(KINDS)}; a name is a call's name or its last part.")
