"""The cassette file format: deterministic bytes, a content-addressed value section, atomic
writes, and an index read without parsing the whole file.

Layout (orjson, sorted keys, 2-space indent, trailing newline)::

    {
      "entries": [ {name, kind, key, occurrence, namespace, request, response, duration,
                    usage?, error?, tagged?}, ... ],
      "format": 1,
      "values": { "<hash>": <JSON value>, ... }
    }

An agent's n-th request repeats the messages before it, so storing requests whole grows the
file quadratically. Every string or list of numbers of at least ``MIN_SHARED`` bytes, and every
dict of at least ``MIN_SHARED_DICT`` bytes, is stored once in ``values`` under a hash of its
content and replaced where it occurs by the string ``"@ref:<hash>"``; a request then reads as
its list of message references in order. Responses are packed more lightly (only strings of
``MIN_SHARED_RESPONSE`` bytes or more), so a typical replay reads one entry and no shared value.
A user string that itself starts with ``@ref:`` is always moved to ``values`` so the marker is
never ambiguous. A top-level item of ``values`` that is a string is literal.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pathlib
import re
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson
import xxhash

from ..errors import CassetteError

__all__ = [
    "FORMAT",
    "MIN_SHARED",
    "MIN_SHARED_RESPONSE",
    "REF",
    "Packer",
    "atomic_write",
    "dumps",
    "empty_document",
    "load_document",
    "read_file",
    "refs_in",
    "unpack",
]

FORMAT: Final = 1
REF: Final = "@ref:"
REF_BYTES: Final = b"@ref:"  # "@" is rare in JSON: a fast search; a false hit is only slower
MIN_SHARED: Final = 256
# A reference line costs ~40 bytes indented; a chat message of ~100 bytes or more costs several
# indented lines inline, and repeats in every later request of the run.
MIN_SHARED_DICT: Final = 96
MIN_SHARED_RESPONSE: Final = 4096
_MAX_REFS_SHARED = 4
_HASH_LEN = 24  # 96 bits of xxh3-128: collisions are out of reach for any cassette size
_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
_CANON = orjson.OPT_SORT_KEYS


def dumps(document: dict[str, Any]) -> bytes:
    """The one byte form of a document (stable key order, 2-space indent, final newline)."""
    return orjson.dumps(document, option=_OPTS)


def empty_document() -> dict[str, Any]:
    return {"entries": [], "format": FORMAT, "values": {}}


def _hash(node: Any) -> str:
    return xxhash.xxh3_128_hexdigest(orjson.dumps(node, option=_CANON))[:_HASH_LEN]


class Packer:
    """Moves large values of trees into a shared ``values`` mapping (content-addressed)."""

    def __init__(self, values: dict[str, Any], *, min_shared: int = 0,
                 share_containers: bool = True) -> None:
        self.values = values
        self.min_shared = min_shared or MIN_SHARED
        self.containers = share_containers
        self.min_dict = min(MIN_SHARED_DICT, self.min_shared)

    def _share(self, node: Any) -> str:
        h = _hash(node)
        self.values.setdefault(h, node)
        return REF + h

    def pack(self, tree: Any) -> Any:
        """A copy of ``tree`` with large parts replaced by references (the root stays)."""
        return self._walk(tree)[0]

    def _walk(self, node: Any) -> tuple[Any, int, int]:
        # -> (packed node, approximate JSON size of the *original* node, references inside the
        # packed node). Size is taken before packing, so a message is shared as a whole even
        # after its long content became a reference. A container holding many references
        # (a request body listing its messages) is structure that will not repeat: it stays
        # inline so the file reads as a list of message references.
        t = type(node)
        if t is str:
            n = len(node) + 2
            if n >= self.min_shared or node.startswith(REF):
                return self._share(node), n, 1
            return node, n, 0
        if t is dict:
            out: dict[str, Any] = {}
            size, refs = 2, 0
            for k, v in node.items():
                pv, sv, rv = self._walk(v)
                out[k] = pv
                size += len(k) + 4 + sv
                refs += rv
            if self.containers and size >= self.min_dict and refs <= _MAX_REFS_SHARED:
                return self._share(out), size, 1
            return out, size, refs
        if t is list:
            items = []
            size, refs = 2, 0
            numbers = True
            for v in node:
                tv = type(v)
                if tv is dict or tv is list or tv is str:
                    numbers = False
                pv, sv, rv = self._walk(v)
                items.append(pv)
                size += sv + 1
                refs += rv
            if numbers and self.containers and size >= self.min_shared:  # embeddings, ids
                return self._share(items), size, 1
            return items, size, refs
        return node, 8, 0

    def pack_root(self, tree: Any) -> Any:
        """Like :meth:`pack` but a large root dict keeps its own fields inline."""
        if type(tree) is dict:
            return {k: self.pack(v) for k, v in tree.items()}
        if type(tree) is list:
            return [self.pack(v) for v in tree]
        return self.pack(tree)


def unpack(tree: Any, resolve: Callable[[str], Any]) -> Any:
    """Expand references (``resolve(hash)`` returns the stored value)."""
    t = type(tree)
    if t is str:
        if tree.startswith(REF):
            value = resolve(tree[len(REF):])
            return value if type(value) is str else unpack(value, resolve)
        return tree
    if t is dict:
        return {k: unpack(v, resolve) for k, v in tree.items()}
    if t is list:
        return [unpack(v, resolve) for v in tree]
    return tree


def refs_in(tree: Any, out: set[str]) -> None:
    """Collect the hashes referenced directly by ``tree``."""
    t = type(tree)
    if t is str:
        if tree.startswith(REF):
            out.add(tree[len(REF):])
    elif t is dict:
        for v in tree.values():
            refs_in(v, out)
    elif t is list:
        for v in tree:
            refs_in(v, out)


def reachable(entries: list[dict[str, Any]], values: dict[str, Any]) -> dict[str, Any]:
    """The part of ``values`` that the entries reference (directly or through values)."""
    todo: set[str] = set()
    for e in entries:
        refs_in(e.get("request"), todo)
        refs_in(e.get("response"), todo)
    seen: dict[str, Any] = {}
    while todo:
        h = todo.pop()
        if h in seen:
            continue
        if h not in values:
            raise CassetteError(f"dangling value reference {REF}{h}")
        v = values[h]
        seen[h] = v
        if type(v) is not str:
            refs_in(v, todo)
    return seen


Buffer = bytes | mmap.mmap

_MMAP_FROM = 1 << 20


def read_file(path: pathlib.Path) -> Buffer | None:
    """The file's bytes; large files are memory-mapped so a cold load reads only the pages it
    touches (reading 35 MB took 25 ms on its own, over the whole load budget)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < _MMAP_FROM:
                return fh.read()
            try:
                return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                return fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CassetteError(f"cannot read: {exc}", path=path) from None


def load_document(data: Buffer, path: Any) -> dict[str, Any]:
    """Parse and validate a whole document."""
    try:
        doc = orjson.loads(memoryview(data) if isinstance(data, mmap.mmap) else data)
    except orjson.JSONDecodeError as exc:
        raise CassetteError(f"not valid JSON: {exc}", path=path) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise CassetteError("not a dejacache cassette (no 'entries' list)", path=path)
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise CassetteError(
            f"cassette format {fmt!r} is not supported (this dejacache reads format {FORMAT})",
            path=path,
        )
    if not isinstance(doc.get("values", {}), dict):
        raise CassetteError("'values' must be an object", path=path)
    doc.setdefault("values", {})
    return doc


# ------------------------------------------------------------------ lazy index

# Written files have a fixed shape, so entry and value positions can be found with byte
# searches: entry fields sit at exactly 6 spaces inside "entries", value items at exactly 4
# spaces inside "values" (JSON strings cannot hold raw newlines, so these lines are structure).
_ENTRIES_HEAD = b'{\n  "entries": [\n'
_KEY_LINE = re.compile(rb'\n      "key": "([^"\\\n]*)"')
_ENTRY_START = b"\n    {\n"
_VALUE_LINE = b'\n    "'
_REQUEST_LINE = b'\n      "request": '
_RESPONSE_LINE = b'\n      "response": '
_REF_QUOTED = b'"' + REF.encode()
_TAGGED_LINE = b'\n      "tagged": '
_USAGE_LINE = b'\n      "usage": '
_MODEL_FIELD = b'"model": "'


def model_in(body: bytes) -> str:
    """The last ``"model"`` field of a response's JSON bytes (for prices): with sorted keys
    the top-level one comes after ``choices``, so a backward search finds it quickly."""
    at = body.rfind(_MODEL_FIELD)
    if at < 0:
        return ""
    at += len(_MODEL_FIELD)
    return body[at : body.find(b'"', at)].decode(errors="replace")


_ENTRIES_END = b'\n  ],\n  "format": '
_VALUES_HEAD = b'\n  "values": {'
_CHUNK = 256 * 1024


class LazyFile:
    """An index over the bytes of a cassette written by :func:`dumps`, built as it is needed.

    Entries are discovered in file order, a chunk at a time (:meth:`scan`), so the first hit
    of a replay reads a few pages instead of the whole file: an agent replays its calls in
    about the order it recorded them, and FIFO per key stays exact because earlier entries
    are always discovered first. Indexing all entries of a 10k-call cassette took ~45 ms,
    twice the load budget. :meth:`entry` parses one entry on demand; :meth:`value` finds one
    shared value by binary search over the sorted ``values`` section. :meth:`open` returns
    None when the bytes do not have the written shape (hand-edited files), and the caller
    parses the whole document instead.
    """

    __slots__ = ("_data", "_end", "_pos", "_spans", "_v_hi", "_v_lo", "keys")

    def __init__(self, data: Buffer) -> None:
        self._data = data
        self._pos = len(_ENTRIES_HEAD) - 1  # the newline before the first entry
        self._end = -1  # where "entries" ends, once the scan reaches it
        self.keys: list[str] = []
        self._spans: list[int] = []
        self._v_lo = -1
        self._v_hi = -1

    @classmethod
    def open(cls, data: Buffer) -> LazyFile | None:
        if data[: len(_ENTRIES_HEAD)] != _ENTRIES_HEAD or data[-2:] != b"}\n":
            return None  # also the empty cassette: parsed whole, it is tiny
        return cls(data)

    @property
    def done(self) -> bool:
        return self._end >= 0

    def scan(self, nbytes: int | None = None) -> int:
        """Index the next ``nbytes`` or so of entries; returns how many were found."""
        if self._end >= 0:
            return 0
        nbytes = nbytes or _CHUNK
        data = self._data
        pos = self._pos
        stop = data.find(b"\n", pos + nbytes)  # key lines start with a newline: cut before one
        stop = len(data) if stop < 0 else stop
        end = data.find(_ENTRIES_END, pos, stop + len(_ENTRIES_END))
        if end >= 0:
            stop = end
        n = 0
        for m in _KEY_LINE.finditer(data, pos, stop):
            self.keys.append(m.group(1).decode())
            self._spans.append(m.start())
            n += 1
        self._pos = stop
        if end >= 0:
            self._end = end
        elif stop >= len(data):
            raise CassetteError("the entries list has no end")
        return n

    def scan_all(self) -> None:
        while self._end < 0:
            self.scan(1 << 30)

    def _slice(self, i: int) -> bytes:
        # Boundaries come from backward searches that stop at the nearest entry start: a
        # forward search for the entry's end would crawl through its indented request
        # (measured: 20 us for a 200 KB request, most of the replay cost).
        while i + 1 >= len(self._spans) and self._end < 0:
            self.scan()
        data = self._data
        start = data.rfind(_ENTRY_START, 0, self._spans[i])
        if i + 1 < len(self._spans):
            stop = data.rfind(_ENTRY_START, 0, self._spans[i + 1])
        else:
            stop = self._end
        if start < 0 or stop <= start:
            raise CassetteError("entry boundaries not found")
        return data[start + 1 : stop].rstrip(b",\n")

    def _checked(self, i: int, raw: bytes) -> dict[str, Any]:
        doc = orjson.loads(raw)
        if not isinstance(doc, dict) or doc.get("key") != self.keys[i]:
            raise CassetteError("entry does not match the index")
        return doc

    def entry(self, i: int) -> dict[str, Any]:
        return self._checked(i, self._slice(i))

    def replay_view(self, i: int) -> tuple[dict[str, Any], bytes | None]:
        """What a hit needs from entry ``i``: its small fields parsed, and its response as the
        JSON bytes in the file (None for an error entry, whose ``error`` is in the fields).

        The request is not parsed at all and the response is not parsed here: the codec
        parses it once when the engine decodes it (at 20 KB this halved the replay cost).
        """
        raw = self._slice(i)
        # after "response" only "tagged" and "usage" can follow (sorted keys): find them from
        # the end first, so the backward search for "response" starts right after its body
        tail = raw.rfind(_USAGE_LINE)
        if tail >= 0:
            tagged = raw.rfind(_TAGGED_LINE, max(0, tail - 32), tail)
            tail = tagged if tagged >= 0 else tail
        else:
            tail = raw.rfind(_TAGGED_LINE)
        resp = raw.rfind(_RESPONSE_LINE, 0, tail if tail >= 0 else len(raw))
        if resp < 0:  # an error entry: small, parse it whole
            return self._checked(i, raw), None
        req = raw.find(_REQUEST_LINE, 0, resp)
        head = raw[:req] if req >= 0 else raw[:resp]
        if tail < 0:
            body = raw[resp + len(_RESPONSE_LINE) : raw.rfind(b"\n    }")]
            fields = head.rstrip(b",") + b"\n    }"
        else:
            body = raw[resp + len(_RESPONSE_LINE) : tail].rstrip(b",")
            fields = head + raw[tail + 1 :]
        return self._checked(i, fields), body

    def value(self, h: str) -> tuple[bool, Any]:
        """``(found, value)`` for one hash, by binary search over the sorted section."""
        data = self._data
        if self._v_lo < 0:  # first shared value asked for: locate the section once
            at = data.find(_VALUES_HEAD, max(self._pos, self._end))
            if at < 0:
                raise CassetteError("no values section")
            self._v_lo = at + len(_VALUES_HEAD)
            self._v_hi = max(self._v_lo, data.rfind(b"\n  }"))
        lo, hi = self._v_lo, self._v_hi
        want = h.encode()
        while lo < hi:
            mid = (lo + hi) // 2
            at = data.find(_VALUE_LINE, mid, self._v_hi)
            if at < 0:
                hi = mid
                continue
            name_start = at + len(_VALUE_LINE)
            name_end = data.find(b'"', name_start)
            name = data[name_start:name_end]
            if name == want:
                nxt = data.find(_VALUE_LINE, name_end, self._v_hi)
                stop = nxt if nxt >= 0 else self._v_hi
                raw = data[name_end + 3 : stop].rstrip(b",")  # skip '": '
                return True, orjson.loads(raw)
            if name < want:
                lo = name_end
            else:
                hi = mid
        return False, None


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either its old bytes or ``data``, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):  # keep the usual file mode, not mkstemp's 0600
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # The rename itself is made durable by syncing the directory (POSIX).
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def iter_strings(tree: Any) -> Iterator[str]:
    t = type(tree)
    if t is str:
        yield tree
    elif t is dict:
        for k, v in tree.items():
            yield k
            yield from iter_strings(v)
    elif t is list:
        for v in tree:
            yield from iter_strings(v)
