"""The errors of the tree in ``errors.py`` that only the stores, the runtime and frozen
results raise, defined where a process that raises none never pays for their classes.
Read them as ``dejacache.errors.StoreError`` and so on: ``errors`` serves each one, and each
one names ``dejacache.errors`` as its module (tracebacks, pickling)."""

from __future__ import annotations

from .errors import DejacacheError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["AgentLoopDetected", "IncompatibleStore", "PoolError", "ReadOnlyResult", "ScopeError",
           "StoreError", "StoreUnavailable"]


class ReadOnlyResult(DejacacheError, TypeError):
    """A result of ``@cache(frozen=True)`` was changed in place. Hits share one read-only
    copy of the value (no per-call decode), so no caller may change it for the others."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(
            f"this {type_name} is a result of @cache(frozen=True), shared by every hit and "
            "read-only; take a mutable copy with copy.deepcopy(result), or drop frozen=True "
            "to get a fresh copy per call")


class StoreError(DejacacheError):
    """A storage backend failed."""

    def __init__(self, message: str, *, backend: str = "", key: str = "") -> None:
        self.backend = backend
        self.key = key
        parts = [message]
        if backend:
            parts.append(f"backend: {backend}")
        if key:
            parts.append(f"key: {key}")
        super().__init__("; ".join(parts))


class IncompatibleStore(StoreError):
    """The store was written by a newer schema version than this dejacache understands."""

    def __init__(self, *, backend: str, found: int, supported: int) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            f"store schema version {found} is newer than the supported version {supported}; "
            "upgrade dejacache or point DEJACACHE_DIR elsewhere",
            backend=backend,
        )


class StoreUnavailable(StoreError):
    """The backend cannot be reached right now."""


class ScopeError(DejacacheError):
    """A call needs an active scope or agent session that is not there."""


class AgentLoopDetected(DejacacheError):
    """The loop guard found the agent repeating itself."""

    def __init__(self, pattern: str, detail: str = "") -> None:
        self.pattern = pattern
        self.detail = detail
        super().__init__(f"agent loop detected ({pattern}): {detail}" if detail else pattern)


class PoolError(DejacacheError):
    """An ``AgentPool`` cannot serve this call: the session is busy and the pool refuses
    concurrent turns, the pool is closed, or a config name cannot be applied to the agent."""

    def __init__(self, message: str, *, session: Any = None) -> None:
        self.session = session
        super().__init__(message)


for _cls in (ReadOnlyResult, StoreError, IncompatibleStore, StoreUnavailable, ScopeError,
             AgentLoopDetected, PoolError):
    _cls.__module__ = "dejacache.errors"
del _cls
