"""The one exception tree of dejacache.

    DejacacheError
    ├── ConfigurationError            bad settings, unknown mode/URL, missing extra
    ├── UnhashableArgument (TypeError) an argument the key builder cannot canonicalise
    ├── ReadOnlyResult (TypeError)    a shared ``@cache(frozen=True)`` result was changed
    ├── SerializationError            a value the codec cannot encode or decode
    │   └── IntegrityError            stored bytes failed a checksum or signature check
    ├── StoreError                    a backend failed; names the backend
    │   ├── IncompatibleStore         written by a newer schema
    │   └── StoreUnavailable          backend unreachable (runtime tiers fail open instead)
    ├── CassetteError                 a cassette file is unreadable or invalid; names the path
    ├── ScopeError                    a call needs a scope/session that is not active
    ├── AgentLoopDetected             the loop guard tripped
    ├── PoolError                     AgentPool misuse or a session refused; names the session
    └── ReplayMiss (AssertionError)   replay mode found no recording; explains the nearest one
        ├── NetworkBlocked            a live connection was attempted while replaying
        │   └── NetworkDisabled (RuntimeError) refused by --block-network (pytest-recording's)
        └── ReplayDivergence          a strict replay left the recorded order; names the step

    DejacacheWarning (UserWarning)    something was degraded but the caller got a correct result

Warnings live here too, so low layers (stores, codecs) can warn without importing the
engine (``stores.sqlite`` importing ``_engine`` for them once closed an import cycle).

Every error carries the context needed to act on it (key, cassette path, backend) in its
message and as attributes.
"""

from __future__ import annotations

from ._lazy import served

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from ._errors_rare import (
        AgentLoopDetected,
        IncompatibleStore,
        PoolError,
        ReadOnlyResult,
        ScopeError,
        StoreError,
        StoreUnavailable,
    )

__all__ = [
    "AgentLoopDetected",
    "CassetteError",
    "ConfigurationError",
    "DejacacheError",
    "DejacacheWarning",
    "IncompatibleStore",
    "IntegrityError",
    "NetworkBlocked",
    "NetworkDisabled",
    "PoolError",
    "ReadOnlyResult",
    "ReplayDivergence",
    "ReplayMiss",
    "ScopeError",
    "SerializationError",
    "StoreError",
    "StoreUnavailable",
    "UnhashableArgument",
]


class DejacacheError(Exception):
    """Base class of every error raised by dejacache."""


class DejacacheWarning(UserWarning):
    """Something was degraded but the caller still got a correct result."""


class ConfigurationError(DejacacheError, ValueError):
    """Settings that cannot work: an unknown mode, a bad store URL, a missing extra."""


class UnhashableArgument(DejacacheError, TypeError):
    """An argument has a type the key builder cannot turn into canonical data.

    Raised instead of silently using ``repr()`` (which may contain a memory address and
    then never hits again).
    """

    def __init__(self, argument: str, value_type: type, function: str = "", *,
                 reason: str = "", hint: str = "") -> None:
        self.argument = argument
        self.value_type = value_type
        self.function = function
        #: What is wrong when the type itself is fine: a cycle, the depth, invalid text.
        self.reason = reason
        where = f" of {function}" if function else ""
        shown = argument if len(argument) <= 120 else argument[:60] + "..." + argument[-40:]
        tname = f"{value_type.__module__}.{value_type.__qualname__}"
        if hint:  # the way out, when the usual one (plain data, ignore=) does not apply
            message = (f"cannot build a cache key: argument {shown!r}{where} has type "
                       f"{tname}, which has no canonical form; {hint}.")
        elif reason:
            message = (f"cannot build a cache key: argument {shown!r}{where} {reason}. Pass "
                       "plain finite data, or add the argument to ignore=[...].")
        else:
            message = (
                f"cannot build a cache key: argument {shown!r}{where} has type {tname}, "
                "which has no canonical form. Pass plain data (dict/list/str/number, a "
                "dataclass, a pydantic model), add it to ignore=[...], or give the type a "
                "__dejacache_key__() method returning plain data."
            )
        super().__init__(message)


class SerializationError(DejacacheError):
    """A value could not be encoded for storage, or stored bytes could not be decoded."""

    def __init__(self, message: str, *, key: str = "") -> None:
        self.key = key
        super().__init__(f"{message} (key {key})" if key else message)


class IntegrityError(SerializationError):
    """Stored bytes failed their checksum or HMAC signature: treated as a miss, never served."""


class CassetteError(DejacacheError):
    """A cassette file cannot be read, parsed or written."""

    def __init__(self, message: str, *, path: Any = "") -> None:
        self.path = str(path)
        super().__init__(f"{message} (cassette {self.path})" if path else message)


class ReplayMiss(DejacacheError, AssertionError):
    """Replay mode met a call that has no recording.

    The message names the call, shows its canonical parts, the nearest recorded call of the
    same name with a field-level diff, and how to re-record.
    """

    def __init__(
        self,
        message: str,
        *,
        name: str = "",
        key: str = "",
        source: str = "",
        diff: list[str] | None = None,
    ) -> None:
        self.name = name
        self.key = key
        self.source = source
        self.diff = diff or []
        #: The call as the cassette would hold it (credentials masked), when known.
        self.request: Any = None
        #: Volatile rules that would have made this call a hit (``re:`` patterns, paths),
        #: when every difference from its nearest recording is volatile text.
        self.suggestion: tuple[str, ...] = ()
        super().__init__(message)


class NetworkBlocked(ReplayMiss):
    """A live connection was attempted while replaying: to a non-loopback host under the CI
    guard, or from inside a replay block without going through HTTP interception.

    ``host`` is the host asked for (with its address when it was looked up), ``code_path``
    the modules that tried to connect, innermost first.
    """

    def __init__(self, message: str, *, host: str = "", code_path: str = "",
                 **context: Any) -> None:
        self.host = host
        self.code_path = code_path
        super().__init__(message, **context)


class NetworkDisabled(NetworkBlocked, RuntimeError):
    """A connection refused under pytest-recording's ``--block-network`` or
    ``@pytest.mark.block_network``: a ``RuntimeError`` whose message starts "Network is
    disabled", as pytest-recording's, so a moved suite's ``pytest.raises`` still catches it."""


class ReplayDivergence(ReplayMiss):
    """A strict cassette met a call that is not the recorded call at its step, a call past
    the end of the recording, or recorded calls that were never made (at block exit).

    ``step`` is the call's place in this run (0-based), ``recorded_step`` the recorded step
    it was compared with (None past the end), ``expected`` / ``actual`` describe both calls
    (name, kind, request) and ``diff`` lists the fields that differ. A ``ReplayMiss``
    subclass: code that catches misses catches divergences too.
    """

    def __init__(
        self,
        message: str,
        *,
        step: int | None = None,
        recorded_step: int | None = None,
        expected: Any = None,
        actual: Any = None,
        reason: str = "",
        **context: Any,
    ) -> None:
        self.step = step
        self.recorded_step = recorded_step
        self.expected = expected
        self.actual = actual
        self.reason = reason
        super().__init__(message, **context)


# The errors only the stores, the runtime and frozen results raise are defined in
# ``_errors_rare`` (drawn in the tree above all the same, and named ``dejacache.errors.*``):
# imported when one is first read. Each exception class costs its importer ~0.13M
# instructions to make, and a cassette block's replay hit raised none of these seven.
__getattr__ = served(__name__, dict.fromkeys(
    ("AgentLoopDetected", "IncompatibleStore", "PoolError", "ReadOnlyResult", "ScopeError",
     "StoreError", "StoreUnavailable"), "dejacache._errors_rare"))
