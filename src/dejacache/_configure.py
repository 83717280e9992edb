"""``configure()``: the process-wide settings as a program sets them, each checked as given.

Apart from ``config``, which reads the settings on every call: a replay hit never sets
them, and ``configure`` with its checks is ~4 KB of the bytecode every first block loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import _project
from ._codec_protocol import Codec
from ._core.counts import whole_count
from ._core.durations import Duration, seconds
from ._core.modes import resolve_mode
from .codec import JsonCodec
from .config import UNSET, Unset, resolve_store, settings_object, volatile_items
from .errors import ConfigurationError

if TYPE_CHECKING:
    from .stores._protocols import Store

__all__ = ["configure"]


def configure(
    *,
    cache_key: str | Unset | None = UNSET,
    mode: str | Unset | None = UNSET,
    store: Store | str | Unset | None = UNSET,
    codec: Codec | Unset = UNSET,
    volatile: Iterable[str | re.Pattern[str]] | Unset | None = UNSET,
    codec_allow: Iterable[str] | Unset = UNSET,
    max_age: Duration | Unset | None = UNSET,
    on_expiry: str | Unset | None = UNSET,
    runtime_cache: bool | Unset | None = UNSET,
    max_recorded_stream: int | Unset | None = UNSET,
    max_ws_message: int | Unset | None = UNSET,
    **unknown: object,
) -> None:
    """Set process-wide defaults. Arguments left out keep their current value.

    ``cache_key`` is the global namespace (``None`` disables caching); ``store`` takes a
    ``Store`` or a URL; ``store=None`` goes back to the default store; ``mode=None`` goes back to
    ``DEJACACHE_MODE``/``auto``. ``volatile`` names extra fields, dotted paths
    (``body.messages[*].content``) or compiled patterns (every match inside any string is
    replaced by a placeholder) left out of every key, replacing ``DEJACACHE_VOLATILE``;
    ``volatile=None`` goes back to it. ``max_age`` (a duration: ``"30d"``) is how old a
    cassette entry may be before replaying it warns, or with ``on_expiry="rerecord"`` runs
    the call live again in ``auto`` mode (``docs/living-with-recordings.md``); ``None`` goes
    back to ``DEJACACHE_MAX_AGE`` / ``DEJACACHE_ON_EXPIRY``. ``runtime_cache=False`` switches
    the runtime face's tool cache off (every ``@tool_cache`` tool runs, counted as ``off``;
    writes still invalidate, so switching it on again serves nothing older than them);
    ``None`` goes back to ``DEJACACHE_RUNTIME_CACHE`` (``off``/``on``), else on.
    ``max_recorded_stream`` is the bytes one live stream's recording may hold (default
    64 MiB): past them the caller still gets every event and the call is not recorded
    (``docs/interception.md``); ``None`` goes back to the project file's.
    ``max_ws_message`` is the largest WebSocket message (bytes) a session records (default
    64 MiB): a client message over it still reaches the server, and the session is not
    recorded from it on (``docs/interception.md``); ``None`` goes back to the default. Each
    setting
    left out here falls back to the environment, then to the project file
    (``[tool.dejacache]`` in pyproject.toml, checked now: docs/configuration.md).
    """
    if unknown:
        _refuse_unknown(unknown)
    _project.current()  # a misspelt key in the project file fails here, where it is set up
    s = settings_object()
    with s.lock:
        if not isinstance(cache_key, Unset):
            s.cache_key = cache_key
        if not isinstance(mode, Unset):
            s.mode = resolve_mode(mode) if mode is not None else None
        if not isinstance(store, Unset):
            s.store = resolve_store(store)
        if not isinstance(codec_allow, Unset):
            if not isinstance(codec, Unset):
                raise ConfigurationError("pass codec_allow or codec, not both")
            s.codec = JsonCodec(allow=codec_allow)
        if not isinstance(codec, Unset):
            if not isinstance(codec, Codec):
                raise ConfigurationError(f"codec must implement Codec, not {type(codec).__name__}")
            s.codec = codec
        if not isinstance(volatile, Unset):
            s.volatile = volatile_items(volatile) if volatile is not None else None
        if not isinstance(max_age, Unset):
            s.max_age = seconds(max_age, "max_age") if max_age is not None else None
        if not isinstance(on_expiry, Unset):
            from ._core.ageing import check_on_expiry

            s.on_expiry = check_on_expiry(on_expiry) if on_expiry is not None else None
        if not isinstance(runtime_cache, Unset):
            if runtime_cache is not None and not isinstance(runtime_cache, bool):
                raise ConfigurationError(f"runtime_cache must be True, False or None, not "
                                         f"{runtime_cache!r}")
            s.runtime_cache = runtime_cache
        if not isinstance(max_recorded_stream, Unset):
            s.max_recorded_stream = (None if max_recorded_stream is None else whole_count(
                max_recorded_stream, "max_recorded_stream="))
        if not isinstance(max_ws_message, Unset):
            s.max_ws_message = (None if max_ws_message is None else whole_count(
                max_ws_message, "max_ws_message="))
        s.invalidate()


def _refuse_unknown(unknown: dict[str, object]) -> None:
    import inspect

    from ._suggest import did_you_mean

    known = [p for p in inspect.signature(configure).parameters if p != "unknown"]
    name = next(iter(unknown))
    hint = did_you_mean(name, known)
    if not hint and name in _project.KEYS:
        hint = (f"; {name!r} is a project setting: write it in pyproject.toml under "
                "[tool.dejacache] (docs/configuration.md)")
    raise ConfigurationError(f"configure() has no setting {name!r}{hint} (settings: "
                             f"{', '.join(known)})")
