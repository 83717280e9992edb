"""``PrefixMonitor``: which turn broke the provider's prompt cache, where, and what it cost.

Drives the pure parts (``_core/prefix.py`` cuts a request into digested segments and finds the
first difference; ``_core/prompt_cache.py`` knows provider minimums, lifetimes and usage and
gives one turn's verdict; ``_core/hazards.py`` spots volatile text) from two sources:
``observe()`` calls, and every LLM request made inside ``with monitor:`` (``http/observers.py``).

Entering a monitor watches its context: the SDKs' transports are patched while one is open
(``http/intercept.observe``), and a request made where no dejacache block or client handles
it passes through them untouched and uncached (mode ``off``), so a monitor never creates a
store. Requests that dejacache does handle (``scope()``, ``cassette()``, ``intercept()``,
``dejacache.http_client()``) are seen with the mode in force, replays included; an answer
from dejacache's own store is marked ``local``, as the provider never saw it. Threads and
executor tasks started inside the monitor carry it (``_lease_threads``, ``_threads``).

A conversation is the ``agent_session`` in effect where the request was made (an
``AgentPool`` lease enters one; a thread started inside it is told its name), else one per
``with monitor:`` block.

Opt in, inside ``with monitor:``: ``apply=`` rewrites the requests with the prompt-cache
planner's runtime fixes before they are sent (``_cache_apply.py``: cache controls only, spliced
into the SDK's bytes), and ``trace=`` appends each request it sees to a JSON-lines file that
``dejacache prompt-cache plan`` reads (``planner/load.py``).
"""

from __future__ import annotations

import collections
import contextvars
import itertools
import os
import pathlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from .._core.hazards import PrefixHazard
from .._core.prefix import api_of, build_prefix
from .._core.prompt_cache import (
    PrefixBreak,
    SessionReport,
    SessionState,
    SessionTotals,
    TurnRecord,
    read_usage,
)
from ..cassettes.prices import rates_from_table
from ..errors import ConfigurationError
from ..scope import Block, own_entry
from . import _lease_threads
from ._cache_apply import CacheFixer, fixes_of
from ._conversation import THREAD_SESSION, conversation

__all__ = ["PrefixBreak", "PrefixHazard", "PrefixMonitor", "SessionReport", "TurnRecord"]

_PROVIDERS = ("anthropic", "openai", "gemini")
_BLOCKS = itertools.count(1)


def _carried() -> list[tuple[contextvars.ContextVar[Any], Any]]:
    """What a thread started inside a monitor takes along (read as it starts)."""
    from ..http import observers

    return [(observers.WATCHERS, observers.WATCHERS.get()),
            (observers.REWRITERS, observers.REWRITERS.get()),
            (THREAD_SESSION, conversation())]


def _body(body: Any) -> dict[str, Any]:
    if isinstance(body, (bytes, bytearray, memoryview, str)):
        data = orjson.loads(body if not isinstance(body, memoryview) else bytes(body))
    elif isinstance(body, Mapping):
        data = dict(body)
    else:
        dump = getattr(body, "model_dump", None)
        data = dump(mode="json") if callable(dump) else body
    if not isinstance(data, dict):
        raise ConfigurationError(f"PrefixMonitor.observe: body must be a JSON object (a dict, "
                                 f"or its bytes), not {type(body).__name__}")
    return data


def _usage(usage: Any) -> Any:
    if usage is None or isinstance(usage, Mapping):
        return usage
    dump = getattr(usage, "model_dump", None)  # an SDK's Usage object
    return dump(mode="json") if callable(dump) else usage


class PrefixMonitor(Block["PrefixMonitor"]):
    """Watches consecutive requests of each session for breaks in the provider's cached prefix.

    ``with monitor:`` (or ``async with``, or as a decorator) sees the LLM requests made inside
    it, never caching them; ``observe()`` feeds it by hand.
    ``prices``: ``{model prefix: (input, output)}`` dollars per million tokens (default: the
    cassette price table). ``clock``: seconds, for the cache lifetime (``ttl`` breaks).
    ``max_sessions`` / ``max_records``: bounds for a long-running gateway (oldest dropped).
    ``apply``: the prompt-cache fixes to apply to requests made inside it (``True`` for
    ``"prompt_cache_key"`` and ``"breakpoints"``, or a list of them); ``trace``: a JSON-lines file
    each request seen is appended to, for ``dejacache prompt-cache plan``.
    """

    def __init__(
        self,
        *,
        prices: Mapping[str, tuple[float, float]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = 10_000,
        max_records: int = 100_000,
        apply: bool | Iterable[str] | None = None,
        trace: str | os.PathLike[str] | None = None,
    ) -> None:
        fixes = fixes_of(apply, "PrefixMonitor")
        self._fixer = CacheFixer(fixes) if fixes else None
        self._trace = pathlib.Path(trace) if trace is not None else None
        self._trace_lock = threading.Lock()  # file writes never hold up the accounting
        self._rates = rates_from_table(prices)
        self._clock = clock
        self._lock = threading.Lock()
        self._states: collections.OrderedDict[str, SessionState] = collections.OrderedDict()
        self._totals: collections.OrderedDict[str, SessionTotals] = collections.OrderedDict()
        self._max_sessions = max_sessions
        self._breaks: collections.deque[PrefixBreak] = collections.deque(maxlen=max_records)
        self._turns: collections.deque[TurnRecord] = collections.deque(maxlen=max_records)
        self._hazards: list[PrefixHazard] = []
        self._hazard_seen: set[tuple[str, str, str]] = set()
        self._depth = 0
        self._block = ""
        # Per entry: the observers, and the tokens of the watch, the threads and the fixes.
        self._tokens: list[tuple[Any, Any, Any, Any]] = []

    # ------------------------------------------------------------ results

    @property
    def breaks(self) -> list[PrefixBreak]:
        with self._lock:
            return list(self._breaks)

    @property
    def turns(self) -> list[TurnRecord]:
        with self._lock:
            return list(self._turns)

    @property
    def hazards(self) -> list[PrefixHazard]:
        """Volatile-looking text in a first turn's system prompt or tool descriptions, and
        cacheable prefixes under the provider's minimum (each kind and place once; per
        session in :meth:`report`)."""
        with self._lock:
            return list(self._hazards)

    def report(self) -> dict[str, SessionReport]:
        """Per session: turns, breaks, hazards, prompt tokens, expected and reported cached
        tokens (of the requests the provider saw; ``local_turns`` were answered by
        dejacache)."""
        with self._lock:
            return {name: t.report() for name, t in self._totals.items()}

    # ------------------------------------------------------------ feeding

    def observe(
        self,
        body: Any,
        *,
        provider: str,
        session: str | None = None,
        usage: Any = None,
        endpoint: str = "",
    ) -> list[PrefixBreak]:
        """Account one request (its body, and the provider's ``usage`` if known); returns the
        breaks it caused. ``provider`` is ``"anthropic"``, ``"openai"`` or ``"gemini"`` (a
        Gemini body names its ``model``: the API takes it from the URL)."""
        if provider not in _PROVIDERS:
            raise ConfigurationError(f"PrefixMonitor.observe: provider must be one of "
                                     f"{_PROVIDERS}, not {provider!r}")
        data = _body(body)
        api = api_of(provider, data, endpoint)
        if api is None:
            return []
        raw = _usage(usage)
        return self._turn(api, data, session or conversation() or self._block or "default",
                          read_usage(raw), False, (provider, endpoint, raw))

    def _turn(self, api: str, data: dict[str, Any], session: str, usage: Any, local: bool,
              seen: tuple[str, str, Any]) -> list[PrefixBreak]:
        prefix = build_prefix(api, data)  # hashing outside the lock
        now = self._clock()
        if self._trace is not None:
            self._write_trace(session, now, seen, data, local)
        with self._lock:
            state = self._states.get(session)
            if state is None:
                state = self._states[session] = SessionState(session)
                self._totals[session] = SessionTotals(session)
                while len(self._states) > self._max_sessions:
                    old, _ = self._states.popitem(last=False)
                    self._totals.pop(old, None)
            else:
                self._states.move_to_end(session)
            record, breaks, hazards = state.turn(prefix, usage, now, self._rates, local=local)
            self._totals[session].add(record, breaks, hazards)
            self._turns.append(record)
            self._breaks.extend(breaks)
            for h in hazards:
                where = (h.kind, h.segment, h.path)
                if where not in self._hazard_seen:
                    self._hazard_seen.add(where)
                    self._hazards.append(h)
        return breaks

    def _on_exchange(self, ex: Any) -> None:
        if ex.status >= 400 or ex.provider not in _PROVIDERS or not ex.request:
            return  # a refused request wrote nothing to the provider's cache
        try:
            data = orjson.loads(ex.request)
        except orjson.JSONDecodeError:
            return
        if not isinstance(data, dict):
            return
        api = api_of(ex.provider, data, ex.endpoint)
        if api is None:
            return
        if api == "gemini" and "model" not in data:  # Gemini names it in the URL
            from ..http.providers.gemini import model_of

            data["model"] = model_of(ex.path)
        session = ex.context.run(conversation) or self._block or "default"
        self._turn(api, data, session, read_usage(ex.usage), ex.local,
                   (ex.provider, ex.endpoint, ex.usage))

    def _write_trace(self, session: str, now: float, seen: tuple[str, str, Any],
                     data: dict[str, Any], local: bool) -> None:
        from ..planner.load import TRACE_HEAD, trace_line

        provider, endpoint, usage = seen
        line = trace_line(session, now, provider, endpoint, data, usage, local)
        path = self._trace
        assert path is not None
        with self._trace_lock:
            new = not path.exists() or path.stat().st_size == 0
            with path.open("ab") as f:  # one write per line: readers see whole lines
                f.write((orjson.dumps(TRACE_HEAD) + b"\n" if new else b"") + line)

    # ------------------------------------------------------------ blocks

    def __enter__(self) -> PrefixMonitor:
        from ..http import observers
        from ..http.intercept import observe

        observe(1)
        watch = observers.watch(self._on_exchange)
        fixing = self._fixer.enter() if self._fixer is not None else None
        threads = _lease_threads.enter(_carried)
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._block = f"block-{next(_BLOCKS)}"
            self._tokens.append((observers.WATCHERS.get(), watch, threads, fixing))
        return self

    def __exit__(self, *exc_info: object) -> None:
        from ..http import observers
        from ..http.intercept import observe

        here = observers.WATCHERS.get()
        with self._lock:
            _, watch, threads, fixing = own_entry(self._tokens, here)
            self._depth -= 1
            if self._depth == 0:
                self._block = ""
        _lease_threads.leave(threads)
        if fixing is not None and self._fixer is not None:
            self._fixer.leave(fixing)
        observers.unwatch(watch, self._on_exchange)
        observe(-1)

    def __repr__(self) -> str:
        with self._lock:
            return (f"PrefixMonitor(sessions={len(self._totals)}, turns={len(self._turns)}, "
                    f"breaks={len(self._breaks)})")
