"""Storage tiers behind one ``Store`` protocol."""

from __future__ import annotations

from .._lazy import attach
from ..errors import ConfigurationError
from ._base import BaseStore, Record

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from ._protocols import Store
    from ._store_stats import StoreStats
    from .memory import MemoryStore
    from .redis import RedisStore
    from .sqlite import SQLiteStore
    from .tiered import TieredStore

__all__ = ["BaseStore", "MemoryStore", "Record", "RedisStore", "SQLiteStore", "Store",
           "StoreStats", "TieredStore", "store_from_url"]

# Each tier is imported on first use: a replay needs only ``Record``, and sqlite3 alone
# cost ~3 ms of ``import dejacache``. So are ``StoreStats``, which only ``stats()`` makes,
# and the ``Store`` protocol, which no hit checks a store against.
_getattr, __dir__ = attach(__name__, {
    "MemoryStore": ".memory", "SQLiteStore": ".sqlite", "Store": "._protocols",
    "StoreStats": "._store_stats", "TieredStore": ".tiered",
})


def __getattr__(name: str) -> Any:
    # RedisStore needs the optional redis package: import it on first use only, so
    # ``import dejacache`` works without the extra.
    if name == "RedisStore":
        try:
            from .redis import RedisStore
        except ImportError as exc:
            raise ImportError(
                "RedisStore needs the redis extra: pip install 'dejacache[redis]'"
            ) from exc
        return RedisStore
    return _getattr(name)


def store_from_url(url: str) -> Store:
    """A store from a URL: ``memory://``, ``sqlite:///abs/path.db``, ``sqlite://`` (default
    path), ``redis://host:port/db``, ``redis+cluster://host:port[,host:port]``,
    ``redis+sentinel://host:port[,host:port]/service_name[/db]`` (these need the ``redis``
    extra)."""
    import urllib.parse

    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme == "memory":
        from .memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite":
        path = parsed.path or None
        if parsed.netloc:  # sqlite://relative/path.db
            path = parsed.netloc + (parsed.path or "")
        from .sqlite import SQLiteStore

        return SQLiteStore(path)
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "redis+sentinel"):
        try:
            from .redis import RedisStore
        except ImportError as exc:  # pragma: no cover - depends on extras
            raise ConfigurationError(
                f"{url}: the Redis store needs the redis extra: pip install 'dejacache[redis]'"
            ) from exc
        store: Any = RedisStore(url)
        return store  # type: ignore[no-any-return]
    raise ConfigurationError(f"unknown store URL {url!r}; use memory://, sqlite:///path or "
                             "redis://host:port/db")
