"""``PrefixMonitor``: which turn broke the provider's prompt cache, where, and what it cost.

Drives the pure parts (``_core/prefix.py`` cuts a request into digested segments and finds the
first difference; ``_core/prompt_cache.py`` knows provider minimums, lifetimes and usage;
``_core/hazards.py`` spots volatile text) from two sources: ``observe()`` calls, and, inside
``with monitor:``, every LLM request that passes through dejacache's HTTP transports
(``dejacache.http_client()``, or an SDK's own client inside ``scope()``/``cassette()``/
``intercept()``), live or replayed, via ``http/observers.py``.

A conversation is the ``agent_session`` in effect where the request was made (an
``AgentPool`` lease enters one), else one per ``with monitor:`` block.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import orjson

from .._core.hazards import PrefixHazard, scan
from .._core.prefix import api_of, build_prefix
from .._core.prompt_cache import (
    PrefixBreak,
    Rates,
    SessionReport,
    SessionState,
    SessionTotals,
    TurnRecord,
    read_usage,
)
from ..errors import ConfigurationError
from ..scope import Block
from .session import current_session

__all__ = ["PrefixBreak", "PrefixHazard", "PrefixMonitor", "SessionReport", "TurnRecord"]

_PROVIDERS = ("anthropic", "openai")
_BLOCKS = itertools.count(1)


def _rates_from_table(table: Mapping[str, tuple[float, float]] | None
                      ) -> Callable[[str, str], Rates | None]:
    from ..cassettes.prices import cache_multipliers, input_price

    def rates(provider: str, model: str) -> Rates | None:
        if table is None:
            price = input_price(model)
        else:
            best = max((p for p in table if model.startswith(p)), key=len, default=None)
            price = float(table[best][0]) if best is not None else None
        if price is None:
            return None
        read, write = cache_multipliers(model)
        if provider == "anthropic":
            read, write = 0.1, 1.25  # the same for every Claude model
        return Rates(price, read, write)

    return rates


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

    ``prices``: ``{model prefix: (input, output)}`` dollars per million tokens (default: the
    cassette price table). ``clock``: seconds, for the cache lifetime (``ttl`` breaks).
    ``max_sessions`` / ``max_records``: bounds for a long-running gateway (oldest dropped).
    """

    def __init__(
        self,
        *,
        prices: Mapping[str, tuple[float, float]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = 10_000,
        max_records: int = 100_000,
    ) -> None:
        self._rates = _rates_from_table(prices)
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
        """Volatile-looking text in a first turn's system prompt or tool descriptions (each
        kind and place once)."""
        with self._lock:
            return list(self._hazards)

    def report(self) -> dict[str, SessionReport]:
        """Per session: turns, breaks, prompt tokens, expected and reported cached tokens."""
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
        breaks it caused. ``provider`` is ``"anthropic"`` or ``"openai"``."""
        if provider not in _PROVIDERS:
            raise ConfigurationError(f"PrefixMonitor.observe: provider must be one of "
                                     f"{_PROVIDERS}, not {provider!r}")
        data = _body(body)
        api = api_of(provider, data, endpoint)
        if api is None:
            return []
        return self._turn(api, data, session or self._default_session(), read_usage(
            _usage(usage)))

    def _default_session(self) -> str:
        s = current_session()
        if s is not None:
            return s.session_id if s.tenant is None else f"{s.tenant}/{s.session_id}"
        return self._block or "default"

    def _turn(self, api: str, data: dict[str, Any], session: str, usage: Any
              ) -> list[PrefixBreak]:
        prefix = build_prefix(api, data)  # hashing outside the lock
        now = self._clock()
        with self._lock:
            state = self._states.get(session)
            if state is None:
                state = self._states[session] = SessionState(session)
                self._totals[session] = SessionTotals(session)
                while len(self._states) > self._max_sessions:
                    old, _ = self._states.popitem(last=False)
                    self._totals.pop(old, None)
                first = True
            else:
                self._states.move_to_end(session)
                first = False
            record, breaks = state.turn(prefix, usage, now, self._rates)
            self._totals[session].add(record, breaks)
            self._turns.append(record)
            self._breaks.extend(breaks)
            if first:
                for h in scan(prefix, session):
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
        s = ex.context.run(current_session)
        if s is not None:
            session = s.session_id if s.tenant is None else f"{s.tenant}/{s.session_id}"
        else:
            session = self._block or "default"
        self._turn(api, data, session, read_usage(ex.usage))

    # ------------------------------------------------------------ blocks

    def __enter__(self) -> PrefixMonitor:
        from ..http import observers

        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._block = f"block-{next(_BLOCKS)}"
        observers.add(self._on_exchange)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        from ..http import observers

        observers.remove(self._on_exchange)
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._block = ""

    def __repr__(self) -> str:
        with self._lock:
            return (f"PrefixMonitor(sessions={len(self._totals)}, turns={len(self._turns)}, "
                    f"breaks={len(self._breaks)})")
