"""The loop guard: policy (:class:`LoopGuard`) and its per-session driver.

``LoopGuard`` holds settings only; every ``agent_session`` that receives one builds its own
:class:`GuardState`, so one user's loop never trips another's even when sessions share the
same ``LoopGuard`` object.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from typing import Any

import orjson
import xxhash

from .._core.loops import MAX_SIGNATURES, Loop, LoopDetector
from .._tags import to_tree
from ..errors import AgentLoopDetected, ConfigurationError
from . import metrics

__all__ = ["PROCEED", "GuardState", "LoopGuard", "nudge_result", "result_digest"]

log = logging.getLogger("dejacache.runtime")

_ACTIONS = ("raise", "warn", "nudge")


class LoopGuard:
    """Detects agents repeating themselves (see ``dejacache._core.loops`` for the patterns).

    ``on_loop``: ``"raise"`` raises :class:`~dejacache.AgentLoopDetected`; ``"warn"`` logs
    once per pattern on the ``dejacache.runtime`` logger and lets the call run; ``"nudge"``
    returns a structured result the model can read instead of running the tool again.
    ``escalate``: with ``"nudge"``, after this many nudges in a session the next loop raises
    (``None``: never).
    """

    def __init__(
        self,
        max_repeats: int = 3,
        max_depth: int = 50,
        max_cycle: int = 10,
        on_loop: str = "raise",
        *,
        escalate: int | None = 3,
        cycle_repeats: int = 2,
        logger: logging.Logger | None = None,
    ) -> None:
        if on_loop not in _ACTIONS:
            raise ConfigurationError(
                f"unknown on_loop {on_loop!r}; expected one of {', '.join(_ACTIONS)}"
            )
        if escalate is not None and (isinstance(escalate, bool) or not isinstance(escalate, int)
                                     or escalate < 0):
            raise ConfigurationError(
                f"LoopGuard escalate must be a whole number >= 0 or None, not {escalate!r}")
        try:
            LoopDetector(max_repeats=max_repeats, max_depth=max_depth, max_cycle=max_cycle,
                         cycle_repeats=cycle_repeats)
        except ValueError as exc:
            raise ConfigurationError(f"LoopGuard {exc}") from None
        self.max_repeats = max_repeats
        self.max_depth = max_depth
        self.max_cycle = max_cycle
        self.cycle_repeats = cycle_repeats
        self.on_loop = on_loop
        self.escalate = escalate
        self.logger = logger or log

    def new_state(self, tenant: str | None, session: str) -> GuardState:
        return GuardState(self, tenant, session)

    def __repr__(self) -> str:
        return (f"LoopGuard(max_repeats={self.max_repeats}, max_depth={self.max_depth}, "
                f"max_cycle={self.max_cycle}, on_loop={self.on_loop!r}, "
                f"escalate={self.escalate})")


def result_digest(value: Any) -> str | None:
    """A digest of a tool result for the no-progress check (None when it has no data form)."""
    try:  # orjson's C path first (~1 µs for a typical result); tags only when it refuses
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        try:
            tree, _ = to_tree(value)
            data = orjson.dumps(tree, option=orjson.OPT_SORT_KEYS)
        except Exception:
            return None
    return xxhash.xxh3_64_hexdigest(data)


def _preview(value: Any, limit: int = 500) -> Any:
    """The previous result as the model will see it: data when small, else a cut text."""
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        shown: Any = orjson.loads(text)
    except Exception:
        text = shown = repr(value)
    if len(text) <= limit:
        return shown
    return text[: limit - 1] + "…"


PROCEED = object()


class GuardState:
    """One session's loop state; thread-safe (tools may run in worker threads)."""

    def __init__(self, guard: LoopGuard, tenant: str | None, session: str) -> None:
        self.guard = guard
        self.tenant = tenant
        self.session = session
        self.detector = LoopDetector(max_repeats=guard.max_repeats, max_depth=guard.max_depth,
                                     max_cycle=guard.max_cycle,
                                     cycle_repeats=guard.cycle_repeats)
        self.nudges = 0
        self.detections: deque[Loop] = deque(maxlen=100)  # the latest, for inspection
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._last: OrderedDict[tuple[str, str], Any] = OrderedDict()

    def before(self, tool: str, resource: str, args: str, *, write: bool = False,
               seen: list[Loop] | None = None) -> Any:
        """``PROCEED`` to run the tool, or a nudge result to return instead. May raise.
        A loop found is appended to ``seen`` (the session's call trace)."""
        with self._lock:
            loop = self.detector.before(tool, args, write=write)
            if loop is None:
                return PROCEED
            if seen is not None:
                seen.append(loop)
            return self._act(loop, resource, self._last.get((tool, args), PROCEED))

    def after(self, tool: str, resource: str, args: str, value: Any, *,
              seen: list[Loop] | None = None) -> Any:
        """The value to hand back: ``value``, or a nudge. May raise."""
        digest = result_digest(value)
        with self._lock:
            self._last[(tool, args)] = value
            self._last.move_to_end((tool, args))
            if len(self._last) > 256:
                self._last.popitem(last=False)
            loop = self.detector.after(tool, args, digest)
            if loop is None:
                return value
            if seen is not None:
                seen.append(loop)
            out = self._act(loop, resource, value)
            return value if out is PROCEED else out

    def _act(self, loop: Loop, resource: str, previous: Any) -> Any:
        self.detections.append(loop)
        metrics.count(self.tenant, resource, loop.tool, metrics.LOOPS)
        g = self.guard
        action = g.on_loop
        if action == "nudge" and g.escalate is not None and self.nudges >= g.escalate:
            action = "raise"
        if action == "raise":
            raise AgentLoopDetected(
                loop.pattern,
                f"{loop.describe()} (session {self.session!r}"
                + (f", tenant {self.tenant!r}" if self.tenant is not None else "") + ")",
            )
        if action == "warn":
            if loop.key not in self._warned:
                if len(self._warned) >= MAX_SIGNATURES:  # bounded: may warn again, once
                    self._warned.clear()
                self._warned.add(loop.key)
                g.logger.warning("dejacache loop guard: %s (session %r)", loop.describe(),
                                 self.session)
            return PROCEED
        self.nudges += 1
        return nudge_result(loop, previous)


def nudge_result(loop: Loop, previous: Any) -> dict[str, Any]:
    """The structured result a model reads instead of the tool running again."""
    shown = _preview(previous) if previous is not PROCEED else None
    result_text = (f"its result was {orjson.dumps(shown).decode()}"
                   if previous is not PROCEED else "it has not returned a result yet")
    if loop.pattern == "depth":
        message = (f"This session has made {loop.count} tool calls, over its budget of "
                   f"{loop.limit}. Stop calling tools and answer with what you have.")
    elif loop.pattern == "cycle":
        message = (f"The calls {' -> '.join(loop.cycle)} have repeated {loop.count} times with "
                   f"the same arguments; the last call to {loop.tool}: {result_text}. "
                   "Repeating them will not change the outcome; change approach.")
    elif loop.pattern == "no_progress":
        message = (f"{loop.tool} returned the same result {loop.count} times in a row for these "
                   f"arguments; {result_text}. The calls in between did not change it; "
                   "change approach.")
    else:
        message = (f"This call ({loop.tool} with these arguments) was already made "
                   f"{loop.count - 1} times; {result_text}. Do not repeat it; change approach.")
    return {
        "is_error": True,
        "loop_detected": loop.pattern,
        "tool": loop.tool,
        "count": loop.count,
        "previous_result": shown,
        "message": message,
    }
