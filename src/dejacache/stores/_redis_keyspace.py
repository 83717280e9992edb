"""Where a :class:`~dejacache.stores.redis.RedisStore` keeps its keys (the layout its module
docstring draws), and the walks over all of them: ``iterate``, ``clear``, ``stats``.

Walks ``SCAN`` every primary (never ``KEYS``: it blocks the server), a page at a time, each
page a call behind the breaker; a failed page ends the walk (``fail_open=False`` raises
instead), so an outage shortens a walk and never fails it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from ._base import Record
from ._redis_calls import RedisCalls
from ._redis_codec import unpack_record

__all__ = ["Keyspace"]

_SCAN_COUNT = 500


def _escape_glob(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _scan_page(_client: Any, *, node: Any, cursor: int, match: str) -> Any:
    return node.scan(cursor, match=match, count=_SCAN_COUNT)


def _strlens(client: Any, *, keys: list[Any]) -> Any:
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.strlen(k)
    return pipe.execute()


def _unlink(client: Any, *, keys: list[Any]) -> Any:
    return client.unlink(*keys)


def _unlink_counted(do: Callable[..., Any], counted: list[Any], others: list[Any]) -> int:
    """UNLINK both lists; how many of ``counted`` existed (the server's own reply)."""
    n = do(functools.partial(_unlink, keys=counted), 0)
    if others:
        do(functools.partial(_unlink, keys=others), 0)
    return int(n)


class Keyspace:
    """The keys under ``prefix``: ``entry`` (``<prefix>:e:{``, then the key and ``}``),
    ``request`` (``<prefix>:r:{``) and ``counter`` (``<prefix>:n:``) heads, and the walks
    over them, each call made through ``calls``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.entry = f"{prefix}:e:{{"
        self.request = f"{prefix}:r:{{"
        self.counter = f"{prefix}:n:"

    def key(self, space: str, tag: str, *parts: str) -> str:
        """``<prefix>:<space>:{<tag>}[:part...]``: keys made with one ``tag`` share a
        Redis Cluster slot."""
        return f"{self.prefix}:{space}:{{{tag}}}" + "".join(":" + p for p in parts)

    def _match(self, space: str, tagged: bool = True) -> str:
        return _escape_glob(f"{self.prefix}:{space}:") + ("{*" if tagged else "*")

    def _requests_of(self, ekeys: list[bytes]) -> tuple[list[str], list[str]]:
        """(keys, request keys) of a batch of entry keys."""
        strip = len(self.entry)
        keys = [k.decode()[strip:-1] for k in ekeys]
        return keys, [self.request + k + "}" for k in keys]

    def _batches(self, calls: RedisCalls, match: str) -> Iterator[list[bytes]]:
        """Batches of keys matching ``match`` on every primary."""
        do, clients = calls.do, calls.clients
        for node in do(clients.primaries, None) or ():
            cursor = 0
            while True:
                page = do(functools.partial(_scan_page, node=node, cursor=cursor,
                                            match=match), None)
                if page is None:
                    return
                cursor, keys = int(page[0]), list(page[1])
                if keys:
                    yield keys
                if cursor == 0:
                    break

    def records(self, calls: RedisCalls, name: str | None, namespace: str | None
                ) -> Iterator[tuple[str, Record]]:
        """Every entry (of ``name`` and ``namespace`` when given), with its request."""
        do, mget = calls.do, calls.clients.mget
        for ekeys in self._batches(calls, self._match("e")):
            keys, rkeys = self._requests_of(ekeys)
            got = do(functools.partial(mget, keys=[*ekeys, *rkeys]), None)
            if got is None:
                return
            n = len(ekeys)
            for key, raw, request in zip(keys, got[:n], got[n:], strict=True):
                if raw is None:
                    continue  # expired between SCAN and MGET
                rec = unpack_record(raw, request or b"")
                if rec is None:
                    continue
                if name is not None and rec.name != name:
                    continue
                if namespace is not None and rec.namespace != namespace:
                    continue
                yield key, rec

    def clear(self, calls: RedisCalls, namespace: str | None) -> int:
        """Delete entries (all, or one namespace) and their requests; how many entries
        Redis says it deleted. Clearing everything also deletes entries of the layout
        before hash tags (``<prefix>:v:<key>``, ``<prefix>:q:<key>``)."""
        do, mget = calls.do, calls.clients.mget
        removed = 0
        for ekeys in self._batches(calls, self._match("e")):
            if namespace is not None:
                raws = do(functools.partial(mget, keys=ekeys), None) or []
                ekeys = [k for k, raw in zip(ekeys, raws, strict=False)
                         if raw is not None and (rec := unpack_record(raw)) is not None
                         and rec.namespace == namespace]
            if ekeys:
                removed += _unlink_counted(do, ekeys, self._requests_of(ekeys)[1])
        if namespace is None:
            for vkeys in self._batches(calls, self._match("v", tagged=False)):
                removed += _unlink_counted(do, vkeys, [])
            for qkeys in self._batches(calls, self._match("q", tagged=False)):
                _unlink_counted(do, qkeys, [])
        return removed

    def sizes(self, calls: RedisCalls) -> tuple[int, int]:
        """(entries, bytes of entries and requests)."""
        entries = size = 0
        for ekeys in self._batches(calls, self._match("e")):
            rkeys = self._requests_of(ekeys)[1]
            lens = calls.do(functools.partial(_strlens, keys=[*ekeys, *rkeys]), None) or []
            entries += sum(1 for n in lens[: len(ekeys)] if n)
            size += sum(int(n) for n in lens)
        return entries, size
