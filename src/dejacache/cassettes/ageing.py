"""Cassettes that age: what a new entry is stamped with, and expired entries on replay.

A new entry gets ``recorded_at`` (ISO 8601, UTC) and ``recorded_with``: what it was recorded
with, as far as known::

    "recorded_with": {"sdk": "openai 1.54.0", "model": "gpt-4o-mini",
                      "answered_by": "gpt-4o-mini-2024-07-18"}

``sdk`` is read from the request's ``User-Agent`` (the transport names it per call:
:func:`sending`), else from the provider's own package when it is imported; ``model`` is the
model the request asked for, ``answered_by`` the one the answer named. Neither field takes
part in matching or in telling two recordings apart (``merge.VOLATILE_FIELDS``).

The rules for an expired entry are pure (``_core/ageing.py``); :class:`Ageing` applies them
for one cassette and says so once per entry.
"""

from __future__ import annotations

import contextvars
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, Final

from .. import _project
from .._core.ageing import (
    CLOCK_SKEW,
    RERECORD,
    WARN,
    age_text,
    check_on_expiry,
    expired,
    in_future,
    on_expired,
    recorded_at,
    span,
    stamp,
)
from .._core.durations import seconds
from .._lazy import pattern
from ..config import settings_object
from ..errors import DejacacheWarning

__all__ = ["Ageing", "age_line", "made_with_text", "recorded_with", "resolve", "sending",
           "stamp_entry"]

#: The clock entries are stamped and judged by (the test suite holds it still within a test:
#: two saves of one run a second apart must give the same bytes).
clock: Callable[[], float] = time.time

# The HTTP call about to be made in this context and its User-Agent (request headers are
# never stored: this is how the one header that names the SDK reaches the entry).
_AGENT: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "dejacache_user_agent", default=None)

# "OpenAI/Python 1.54.0", "Anthropic/Python 0.40.0", "python-httpx/0.28.1", "groq/0.9"
# (compiled when a call is first recorded: a replay never reads it)
_PRODUCT: Final = pattern(r"^\s*([A-Za-z][\w.-]*)/(?:Python|JS)?\s*([0-9][\w.+-]*)")

# A provider's name (``Provider.name``) and the package that is its SDK, for calls whose
# User-Agent is not known (transports other than httpx).
_SDK_PACKAGE: Final = {"anthropic": "anthropic", "cohere": "cohere", "gemini": "google-genai",
                       "groq": "groq", "mistral": "mistralai", "ollama": "ollama",
                       "openai": "openai", "bedrock": "boto3"}
_MODULE_OF: Final = {"google-genai": "google.genai"}


def resolve(max_age: object, on_expiry: str | None) -> tuple[float | None, str]:
    """A block's ``max_age`` (seconds; None: entries never expire) and ``on_expiry``: its
    own arguments > ``configure()`` > ``DEJACACHE_MAX_AGE`` / ``DEJACACHE_ON_EXPIRY`` > the
    project file (the pytest ini's ``dejacache_max_age``, then ``[tool.dejacache]``) > none /
    ``"warn"``."""
    s = settings_object()
    age: float | None
    if max_age is not None:
        age = seconds(max_age, "max_age")
    elif s.max_age is not None:
        age = s.max_age
    elif env := os.environ.get("DEJACACHE_MAX_AGE", "").strip():
        age = seconds(env, "DEJACACHE_MAX_AGE")
    else:
        age = _project.current().get("max_age")
    if on_expiry is not None:
        how = check_on_expiry(on_expiry)
    elif s.on_expiry is not None:
        how = s.on_expiry
    elif env := os.environ.get("DEJACACHE_ON_EXPIRY", "").strip():
        how = check_on_expiry(env, "DEJACACHE_ON_EXPIRY")
    else:
        how = _project.current().get("on_expiry") or WARN
    return age, how


def sending(key: str, user_agent: str) -> None:
    """The transport's note of the HTTP call keyed ``key`` and the User-Agent it carries."""
    _AGENT.set((key, user_agent) if user_agent else None)


def _sdk_from_agent(ua: str) -> str | None:
    m = _PRODUCT.match(ua)
    if m is None:
        return None
    return f"{m.group(1).lower()} {m.group(2)}"


def _sdk_from_provider(name: str) -> str | None:
    package = _SDK_PACKAGE.get(name.split(".", 1)[0])
    module = sys.modules.get(_MODULE_OF.get(package, package)) if package else None
    # The module's own ``__version__``, not ``importlib.metadata`` (which reads files: on
    # an event loop that is a blocking call in the middle of an async request).
    version = getattr(module, "__version__", None)
    return f"{package} {version}" if isinstance(version, str) else None


def _model_in(tree: Any) -> str | None:
    if not isinstance(tree, dict):
        return None
    for node in (tree, tree.get("body"), tree.get("json"), tree.get("kwargs")):
        if isinstance(node, dict) and isinstance(node.get("model"), str):
            return str(node["model"])
    return None


def recorded_with(key: str, name: str, kind: str, request: Any, response: Any
                  ) -> dict[str, str]:
    """What the call keyed ``key`` was recorded with (only the parts known)."""
    out: dict[str, str] = {}
    sdk = None
    if kind == "http":
        noted = _AGENT.get()
        if noted is not None and noted[0] == key:
            sdk = _sdk_from_agent(noted[1])
        sdk = sdk or _sdk_from_provider(name)
    if sdk:
        out["sdk"] = sdk
    asked = _model_in(request)
    if asked:
        out["model"] = asked
    answered = _model_in(response)
    if answered and answered != asked:
        out["answered_by"] = answered
    return out


def stamp_entry(doc: dict[str, Any], key: str, name: str, kind: str, request: Any) -> None:
    """Add ``recorded_at`` and ``recorded_with`` to a new entry ``doc``."""
    doc["recorded_at"] = stamp(clock())
    made_with = recorded_with(key, name, kind, request, doc.get("response"))
    if made_with:
        doc["recorded_with"] = made_with


class Ageing:
    """``max_age`` and ``on_expiry`` applied to one cassette's entries as they replay."""

    def __init__(self, path: Any, max_age: float, on_expiry: str, mode: str) -> None:
        self.path = path
        self.max_age = max_age
        self.on_expiry = on_expiry
        self.mode = mode
        self.now = clock()  # one "now" per block: every entry is judged against the same
        self.warned: set[tuple[str, int]] = set()
        self.served: list[str] = []  # expired entries served, described
        self.future: list[str] = []  # the same, for entries dated in the future
        #: keys whose expired entries (file index) are being re-recorded live, oldest first
        self.renewing: dict[str, list[int]] = {}

    def verdict(self, doc: dict[str, Any]) -> str | None:
        return on_expired(recorded_at(doc), self.max_age, self.now, mode=self.mode,
                          on_expiry=self.on_expiry)

    def expired(self, doc: dict[str, Any]) -> bool:
        return expired(recorded_at(doc), self.max_age, self.now)

    def renew(self, key: str, index: int | None, doc: dict[str, Any]) -> bool:
        """Whether the entry at ``index`` is to be re-recorded live instead of served."""
        if index is None or self.verdict(doc) != RERECORD:
            return False
        self.renewing.setdefault(key, []).append(index)
        return True

    def replaced(self, key: str) -> int | None:
        """The file index of the expired entry a new recording of ``key`` replaces."""
        q = self.renewing.get(key)
        return q.pop(0) if q else None

    def check(self, doc: dict[str, Any], step: int | None) -> None:
        """Note ``doc``, about to be served, if it is expired (said once, at the block's
        exit: :meth:`warn`)."""
        if self.verdict(doc) is None:
            return
        ident = (str(doc.get("key", "")), int(doc.get("occurrence", 0)))
        if ident in self.warned:
            return
        self.warned.add(ident)
        where = f"entry {step}" if step is not None else "an entry"
        born = recorded_at(doc)
        said = f"{where} ({doc.get('name', '?')}, occurrence {ident[1]})"
        if in_future(born, self.now):
            self.future.append(f"{said} is dated {age_text(born, self.now)} in the future "
                               f"({doc.get('recorded_at')})")
        else:
            self.served.append(f"{said} was recorded {age_text(born, self.now)} ago "
                               f"({doc.get('recorded_at')})")

    def warn(self) -> None:
        """One ``DejacacheWarning`` for the expired entries the block served. Given at exit,
        after the save: under ``-W error`` it fails the test, never a call or the file."""
        if not self.served and not self.future:
            return
        fix = ("they were served because replay never makes a live call"
               if self.on_expiry == RERECORD else
               "re-record them (DEJACACHE_MODE=record), or pass on_expiry='rerecord' to "
               "re-record expired entries in auto mode")
        said = []
        if self.served:
            said.append(f"{_some(self.served)}: older than max_age {span(self.max_age)}")
        if self.future:
            said.append(f"{_some(self.future)}: a date later than this machine's clock (by "
                        f"more than the {span(CLOCK_SKEW)} allowed for skew) is a wrong clock "
                        "or a hand edit, and is treated as expired")
        warnings.warn(f"dejacache: cassette {self.path}: {'; '.join(said)}; {fix}",
                      DejacacheWarning, stacklevel=3)


def _some(described: list[str]) -> str:
    more = f"; and {len(described) - 5} more" if len(described) > 5 else ""
    return "; ".join(described[:5]) + more


def made_with_text(entry: dict[str, Any]) -> str:
    """``recorded_with`` as one phrase (``openai 1.54.0, model gpt-4o-mini (answered by
    gpt-4o-mini-2024-07-18)``); empty when nothing is known."""
    w = entry.get("recorded_with")
    if not isinstance(w, dict):
        return ""
    parts = [str(w["sdk"])] if w.get("sdk") else []
    if w.get("model"):
        parts.append(f"model {w['model']}")
    if w.get("answered_by"):
        parts.append(f"answered by {w['answered_by']}" if w.get("model") else
                     f"model {w['answered_by']}")
    return ", ".join(parts)


def age_line(entry: dict[str, Any], now: float, max_age: float | None = None) -> str:
    """When and with what an entry was recorded, for ``dejacache show`` and the report:
    ``recorded 45d ago (2026-10-14T09:00:00Z) with openai 1.54.0, model gpt-4o-mini; older
    than max_age 30d``, or that its age is unknown (recorded before dejacache kept the
    time)."""
    born = recorded_at(entry)
    note = ""  # what max_age makes of it: after the SDK and model, which it is not about
    if born is None:
        text = "age unknown (recorded before dejacache kept the time; never expires)"
    elif in_future(born, now):
        text = (f"dated {age_text(born, now)} in the future ({entry.get('recorded_at')}), a "
                "wrong clock or a hand edit")
        if max_age is not None:
            note = f"; treated as expired under max_age {span(max_age)}"
    else:
        text = f"recorded {age_text(born, now)} ago ({entry.get('recorded_at')})"
        if max_age is not None and expired(born, max_age, now):
            note = f"; older than max_age {span(max_age)}"
    made = made_with_text(entry)
    return (f"{text} with {made}" if made else text) + note
