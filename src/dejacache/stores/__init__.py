"""Storage tiers behind one ``Store`` protocol."""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ._base import BaseStore, Record, Store, StoreStats
from .memory import MemoryStore
from .sqlite import SQLiteStore
from .tiered import TieredStore

if TYPE_CHECKING:
    from .redis import RedisStore

__all__ = ["BaseStore", "MemoryStore", "Record", "RedisStore", "SQLiteStore", "Store",
           "StoreStats", "TieredStore", "store_from_url"]


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
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def store_from_url(url: str) -> Store:
    """A store from a URL: ``memory://``, ``sqlite:///abs/path.db``, ``sqlite://`` (default
    path), ``redis://host:port/db`` (needs the ``redis`` extra)."""
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        path = parsed.path or None
        if parsed.netloc:  # sqlite://relative/path.db
            path = parsed.netloc + (parsed.path or "")
        return SQLiteStore(path)
    if scheme in ("redis", "rediss", "unix"):
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
