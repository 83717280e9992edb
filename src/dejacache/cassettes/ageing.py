"""Cassettes that age: a block's ``max_age`` and ``on_expiry``, and what a new entry is stamped
with.

A new entry gets ``recorded_at`` (ISO 8601, UTC) and ``recorded_with``: what it was recorded
with, as far as known::

    "recorded_with": {"sdk": "openai 1.54.0", "model": "gpt-4o-mini",
                      "answered_by": "gpt-4o-mini-2024-07-18"}

``sdk`` is read from the request's ``User-Agent`` (the transport names it per call:
:func:`sending`), else from the provider's own package when it is imported; ``model`` is the
model the request asked for, ``answered_by`` the one the answer named. Neither field takes
part in matching or in telling two recordings apart (``merge.VOLATILE_FIELDS``).

The rules for an expired entry are pure (``_core/ageing.py``); ``expiry.py`` applies them
to a block given a ``max_age``, and says how an entry's age reads.
"""

from __future__ import annotations

import _contextvars as contextvars  # (as scope.py says)
import os
import sys
import time
from collections.abc import Callable

from .. import _project
from .._lazy import pattern
from ..config import settings_object

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Final

    from .expiry import Ageing

__all__ = ["block_ageing", "clock", "given", "recorded_with", "resolve", "sending", "stamp_entry"]

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


def given(max_age: object, on_expiry: str | None) -> tuple[float | None, str | None]:
    """A block's ``max_age`` (seconds) and ``on_expiry`` as far as its own arguments,
    ``configure()`` and the environment give them, checked (None: the project file decides).
    A block checks these where it is made, which may be on an event loop: the project file
    is read when it opens (:func:`resolve`; off the loop under ``async with``)."""
    s = settings_object()
    age: float | None = None
    # The durations module is imported where a duration is given to read: most blocks give
    # none (see config.ttl_seconds).
    if max_age is not None:
        from .._core.durations import seconds

        age = seconds(max_age, "max_age")
    elif s.max_age is not None:
        age = s.max_age
    elif env := os.environ.get("DEJACACHE_MAX_AGE", "").strip():
        from .._core.durations import seconds

        age = seconds(env, "DEJACACHE_MAX_AGE")
    how: str | None = None
    # The rules module is loaded where an ``on_expiry`` is given to check, or an entry can
    # expire: loading it was ~0.5M instructions of a fresh process's first replay hit.
    if on_expiry is not None:
        from .._core.ageing import check_on_expiry

        how = check_on_expiry(on_expiry)
    elif s.on_expiry is not None:
        how = s.on_expiry
    elif env := os.environ.get("DEJACACHE_ON_EXPIRY", "").strip():
        from .._core.ageing import check_on_expiry

        how = check_on_expiry(env, "DEJACACHE_ON_EXPIRY")
    return age, how


def resolve(max_age: object, on_expiry: str | None) -> tuple[float | None, str | None]:
    """A block's ``max_age`` (seconds; None: entries never expire) and ``on_expiry``: its
    own arguments > ``configure()`` > ``DEJACACHE_MAX_AGE`` / ``DEJACACHE_ON_EXPIRY`` > the
    project file (the pytest ini's ``dejacache_max_age``, then ``[tool.dejacache]``) > none /
    None (``"warn"``, applied by :func:`block_ageing` where an entry can expire)."""
    age, how = given(max_age, on_expiry)
    if age is None:
        age = _project.current().get("max_age")
    if how is None:
        how = _project.current().get("on_expiry")
    return age, how


def block_ageing(path: Any, max_age: float | None, on_expiry: str | None, mode: str
                 ) -> Ageing | None:
    """The :class:`~.expiry.Ageing` of a block's cassette at ``path`` (None: without a
    ``max_age`` its entries never expire), judging every entry by one reading of
    :data:`clock`."""
    if max_age is None:
        return None
    from .._core.ageing import WARN
    from .expiry import Ageing  # (a block without max_age never loads it: see there)

    return Ageing(path, max_age, on_expiry or WARN, mode, clock())


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
    from .._core.ageing import stamp

    doc["recorded_at"] = stamp(clock())
    made_with = recorded_with(key, name, kind, request, doc.get("response"))
    if made_with:
        doc["recorded_with"] = made_with
