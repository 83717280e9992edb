"""The cassette file format: deterministic bytes, a content-addressed value section, a
checksum on every entry, a cross-reference that finds any entry without reading the others,
and segments a save appends in place.

Layout (orjson, 2-space indent, sorted keys inside every member, trailing newline)::

    {
      "checksums": "<algorithm, and how to accept a hand edit>",
      "entries": [ {checksum, name, kind, key, occurrence, namespace, request, response,
                    duration, usage?, error?, tagged?, follows?}, ... ],
      "format": 4,
      "values": { "<hash>": <JSON value>, ... },
      "xref": { "checksum", "follows": [...], "keys": [...], "kinds": [...],
                "names": [...], "sizes": [...] },
      "entries.1": [ ... ],  "values.1": { ... },  "xref.1": { ... },   (segment 1)
      ...                                                              (up to MAX_SEGMENTS)
      "xref_at": [<entries start>, <xref>, <its keys>, <their end>, ... one four per segment]
    }

A file written whole is one segment (the first five members, in sorted order: format 3's
layout). A save that only adds entries (``segments.py``) writes the members of one more
segment, ``entries.<k>``, ``values.<k>`` (only the shared values the file lacked: a value is
in one segment) and ``xref.<k>`` (the cross-reference of that segment's entries), over the
old ``xref_at``, then a new ``xref_at``; the bytes before the old ``xref_at`` never change
(``append.py`` makes it crash-safe and keeps readers consistent). Entry ``i`` of the file
is entry ``i`` of the segments' entries joined in order; ``follows`` and occurrences count
across segments. A parse (:func:`load_document`) joins them and checks each segment's
cross-reference against its entries. Past ``MAX_SEGMENTS`` the next save writes the file
whole again, as one segment: the same bytes :func:`render` gives.

An agent's n-th request repeats the messages before it, so storing requests whole grows the
file quadratically. Every string or list of numbers of at least ``MIN_SHARED`` bytes, and every
dict of at least ``MIN_SHARED_DICT`` bytes, is stored once in ``values`` under a hash of its
content and replaced where it occurs by the string ``"@ref:<hash>"``; a request then reads as
its list of message references in order. Responses are packed more lightly (only strings of
``MIN_SHARED_RESPONSE`` bytes or more), so a typical replay reads one entry and no shared value.
A user string that itself starts with ``@ref:`` is always moved to ``values`` so the marker is
never ambiguous. A top-level item of ``values`` that is a string is literal.

Payloads (base64 audio and images, ``data:`` URLs, very long text) are kept out of the file
altogether, once per content in the ``blobs`` folder beside it (``blobs.py``): the entry holds
``"@ref:blob:<xxh3-128>"``, a reference no value is stored under. A dejacache that predates
blobs refuses such a file as a dangling reference rather than serve the marker; a file without
them is what it always was.

Integrity (format 2: a flipped byte in 22 of 120 damaged format-1 files was
served as the recorded value). Every value is checked against its hash when it is read, and
every entry carries ``checksum``: the hash of its own bytes as they sit in the file, without
the checksum line (:func:`entry_checksum`). The hit path checks that with one hash over the
slice it reads anyway; a full parse recomputes it from the parsed entry. Anything that does not
match is a :class:`CassetteError` naming the file and the entry, never a value. A deliberate
edit is accepted by ``dejacache rehash PATH`` (:func:`rehash`).

The cross-reference (format 3: finding entry 9,999 of a format-2 file meant scanning
the 9,998 before it, 48-59 ms). ``xref`` lists every entry's key, name, kind, ``follows`` and
byte size in file order (per segment in format 4; columns: one element per line, so
re-recording one call changes a few lines of it). Entry ``i`` starts after its segment's
head and the sizes of the entries before it there.
``xref`` carries its own checksum (:func:`xref_checksum`, over its bytes like an entry's), and
a full parse checks that it describes the entries exactly: a damaged or stale cross-reference
is a :class:`CassetteError`, never a wrong entry. The last member, ``xref_at``, is where each
segment's entries start and its cross-reference and ``keys`` column lie in the file (byte
offsets: the first entry's line, the ``{`` opening ``xref``, the ``[`` opening ``keys``, the
newline closing it; format 3 wrote the last three of one segment), so opening a file reads
its last lines instead of searching a megabyte of columns (~1 ms at 10k entries). It is only a
hint: a reader checks the bytes it points at and, when they are not the cross-reference
(a hand edit moved them), parses the whole file. Formats 1 (no checksums) and 2 (no ``xref``)
are still read, by parsing the whole file, and format 3 through its cross-reference; their
next write, or ``rehash``, upgrades them to format 4.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson
import xxhash

from .._lazy import pattern
from ..errors import CassetteError

__all__ = [
    "CHECKSUMS",
    "EAGER_CHECK_UNDER",
    "FORMAT",
    "HASH_LEN",
    "MIN_SHARED",
    "MIN_SHARED_RESPONSE",
    "READABLE",
    "BLOB",
    "BLOB_REF",
    "BLOB_REF_BYTES",
    "REF",
    "Packer",
    "Part",
    "atomic_write",
    "atomic_write_parts",
    "build_xref",
    "conflict_line",
    "dumps",
    "empty_document",
    "entry_bytes",
    "entry_checksum",
    "identity",
    "load_document",
    "read_file",
    "refers_blobs",
    "refs_in",
    "rehash",
    "remove_stale_temps",
    "render",
    "side_file",
    "unpack",
    "value_hash",
    "value_item",
    "verify_document",
    "with_xref_at",
    "xref_checksum",
    "xref_tail",
]

FORMAT: Final = 4
READABLE: Final = (1, 2, 3, 4)
# A save that only adds entries appends a segment in place (``append.py``); past this many
# segments the next save writes the file whole again, as one segment (a compaction), so a
# reader's work and the tail rewritten per append stay bounded.
MAX_SEGMENTS: Final = 16
# The top-level "checksums" field: what the entry checksums are, and what to do after an edit
# (the first thing a person opening the file sees).
CHECKSUMS: Final = "xxh3-128 of each entry; after editing by hand run: dejacache rehash FILE"
# Files smaller than this are parsed and checked whole when a block opens them (~1 ms per
# 500 KB), so damage anywhere is refused before the test runs. Larger files keep the lazy
# index (a 10k-call cassette must open in a few ms): each entry and value is
# checked when it is read, and the whole file on a replay miss or a save that is not spliced.
EAGER_CHECK_UNDER: Final = 1 << 20
REF: Final = "@ref:"
REF_BYTES: Final = b"@ref:"  # "@" is rare in JSON: a fast search; a false hit is only slower
#: A reference no value is stored under: a payload kept in the ``blobs`` folder beside the
#: cassette (``blobs.py``). Never collected as a value reference (:func:`refs_in`).
BLOB_REF: Final = REF + "blob:"
BLOB_REF_BYTES: Final = BLOB_REF.encode()
#: What :func:`unpack` hands a resolver for such a reference: ``BLOB + hash``.
BLOB: Final = BLOB_REF[len(REF):]
MIN_SHARED: Final = 256
# A reference line costs ~40 bytes indented; a chat message of ~100 bytes or more costs several
# indented lines inline, and repeats in every later request of the run.
MIN_SHARED_DICT: Final = 96
MIN_SHARED_RESPONSE: Final = 4096
_MAX_REFS_SHARED = 4
HASH_LEN = 24  # 96 bits of xxh3-128: collisions are out of reach for any cassette size
_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
_CANON = orjson.OPT_SORT_KEYS


def dumps(document: dict[str, Any]) -> bytes:
    """The one byte form of a document (stable key order, 2-space indent, final newline)."""
    return orjson.dumps(document, option=_OPTS)


def empty_document() -> dict[str, Any]:
    return {"checksums": CHECKSUMS, "entries": [], "format": FORMAT, "values": {},
            "xref": build_xref([])}


def value_hash(node: Any) -> str:
    """The name a shared value is stored under: a hash of its canonical JSON."""
    return xxhash.xxh3_128_hexdigest(orjson.dumps(node, option=_CANON))[:HASH_LEN]


_ENTRY_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
_NESTED = b"\n    "  # an entry sits 4 spaces deep in the file


def entry_checksum(entry: dict[str, Any]) -> str:
    """The hash of ``entry``'s bytes as :func:`dumps` lays them out inside a document (4
    spaces deep), without its ``checksum`` field. Defined on the file's bytes so the hit path
    can check an entry with one hash over its slice, without parsing it."""
    body = entry_bytes({k: v for k, v in entry.items() if k != "checksum"})
    return xxhash.xxh3_128_hexdigest(body)[:HASH_LEN]


class Packer:
    """Moves large values of trees into a shared ``values`` mapping (content-addressed).

    What a re-record changes stays in its entry (a reviewer's git diff): a request's root and
    the dicts right under it (an HTTP request's ``body``) are never shared whole, and with
    ``own_last_turn`` neither is the last message of a conversation (a list of dicts with a
    ``role``), the turn a changed prompt changes. Shared whole, either was renamed by any
    change inside it and moved elsewhere in the sorted ``values``: a 3-call re-record with one
    prompt changed was a 122-line diff in 9 hunks. The next request repeats that message,
    not the last any more, and shares it then; unchanged values keep their names, so an
    entry's diff is the lines its call changed (``test_cassette_diff.py`` pins the bound).
    """

    def __init__(self, values: dict[str, Any], *, min_shared: int = 0,
                 share_containers: bool = True, blobs: Any = None,
                 own_last_turn: bool = False) -> None:
        self.values = values
        self.min_shared = min_shared or MIN_SHARED
        self.containers = share_containers
        self.min_dict = min(MIN_SHARED_DICT, self.min_shared)
        # ``blobs``: a ``blobs.Sink`` taking the payloads out of the tree (None: none)
        self.blobs = blobs
        self.min_blob = blobs.min_payload + 2 if blobs is not None else 1 << 62
        self.own_last_turn = own_last_turn

    def _share(self, node: Any) -> str:
        h = value_hash(node)
        self.values.setdefault(h, node)
        return REF + h

    def pack(self, tree: Any) -> Any:
        """A copy of ``tree`` with large parts replaced by references (the root stays)."""
        return self._walk(tree, True)[0]

    def _walk(self, node: Any, share: bool) -> tuple[Any, int, int]:
        # -> (packed node, approximate JSON size of the *original* node, references inside the
        # packed node). Size is taken before packing, so a message is shared as a whole even
        # after its long content became a reference. A container holding many references
        # (a request body listing its messages) is structure that will not repeat: it stays
        # inline so the file reads as a list of message references. ``share`` False: nothing
        # under ``node`` is shared but a string that looks like a reference (never ambiguous).
        t = type(node)
        if t is str:
            n = len(node) + 2
            if n >= self.min_blob:
                mark = self.blobs.take(node)
                if mark is not None:  # sized as stored: a message around it stays inline
                    return mark, len(mark) + 2, 0
            if (share and n >= self.min_shared) or node.startswith(REF):
                return self._share(node), n, 1
            return node, n, 0
        if t is dict:
            out: dict[str, Any] = {}
            size, refs = 2, 0
            for k, v in node.items():
                pv, sv, rv = self._walk(v, share)
                out[k] = pv
                size += len(k) + 4 + sv
                refs += rv
            if share and self.containers and size >= self.min_dict and refs <= _MAX_REFS_SHARED:
                return self._share(out), size, 1
            return out, size, refs
        if t is list:
            items = []
            size, refs = 2, 0
            numbers = True
            own = (self.own_last_turn and share and node and type(node[-1]) is dict
                   and any(type(v) is dict and "role" in v for v in node))
            last = len(node) - 1
            for i, v in enumerate(node):
                tv = type(v)
                if tv is dict or tv is list or tv is str:
                    numbers = False
                pv, sv, rv = self._walk(v, share and not (own and i == last))
                items.append(pv)
                size += sv + 1
                refs += rv
            if share and numbers and self.containers and size >= self.min_shared:
                return self._share(items), size, 1  # embeddings, ids
            return items, size, refs
        return node, 8, 0

    def pack_root(self, tree: Any) -> Any:
        """Like :meth:`pack` but the root keeps its own fields inline, and so does each dict
        right under it (see the class docstring)."""
        if type(tree) is dict:
            return {k: ({f: self.pack(x) for f, x in v.items()} if type(v) is dict
                        else self.pack(v)) for k, v in tree.items()}
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
        if tree.startswith(REF) and not tree.startswith(BLOB_REF):
            out.add(tree[len(REF):])
    elif t is dict:
        for v in tree.values():
            refs_in(v, out)
    elif t is list:
        for v in tree:
            refs_in(v, out)


def reachable(entries: list[dict[str, Any]], values: dict[str, Any], *,
              strict: bool = True) -> dict[str, Any]:
    """The part of ``values`` that the entries reference (directly or through values); a
    reference to a missing value raises unless ``strict`` is false."""
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
            if not strict:
                continue
            raise CassetteError(f"dangling value reference {REF}{h}")
        v = values[h]
        seen[h] = v
        if type(v) is not str:
            refs_in(v, todo)
    return seen


class Mapped(mmap.mmap):
    """A memory-mapped file with its last bytes as they were when it was read (``tail``
    from byte ``tail_at`` on). An append (``append.py``) rewrites only the last member of
    a format-4 file, ``xref_at``, which lies within those bytes: a reader that mapped the
    file before keeps reading the file it mapped (:func:`whole`)."""

    __slots__ = ("tail", "tail_at")

    tail_at: int
    tail: bytes


Buffer = bytes | mmap.mmap

_MMAP_FROM = 1 << 20
#: The bytes of a mapped file copied when it is read: more than the ``xref_at`` member of
#: a file of ``MAX_SEGMENTS`` segments (four offsets of up to 15 digits each).
FROZEN_TAIL: Final = 8192


def refers_blobs(data: Buffer) -> bool:
    """Whether a cassette's bytes refer to any blob (one search of the bytes)."""
    return data.find(BLOB_REF_BYTES) >= 0


def whole(data: Buffer | None) -> bytes:
    """The bytes of the file ``data`` was read from, as they were when it was read."""
    if data is None:
        return b""
    if isinstance(data, Mapped):
        return bytes(data[: data.tail_at]) + data.tail
    return bytes(data)


def last_bytes(data: Buffer, n: int) -> bytes:
    """The last ``n`` bytes of ``data`` as they were when it was read."""
    if isinstance(data, Mapped):
        return (bytes(data[max(0, len(data) - n) : data.tail_at]) + data.tail)[-n:]
    return bytes(data[-n:])


def undo_path(path: pathlib.Path) -> pathlib.Path:
    """Where an append keeps what it overwrites until it is durable (``append.py``)."""
    return path.parent / f".{path.name}.undo"


# An undo record (``append.py``): what an append is about to overwrite, kept beside the
# file until the append is durable. Written, parsed and rolled back here, where the file is
# read: every reader may have to roll one back first.
_UNDO_MAGIC = b"dejacache undo 1\n"


def undo_record(size: int, at: int, old: bytes) -> bytes:
    """The undo record of an append over a file of ``size`` bytes from byte ``at``, whose
    bytes from there were ``old`` (checksummed: a record torn by a kill is not used)."""
    return _UNDO_MAGIC + orjson.dumps([size, at, _undo_sum(size, at, old)]) + b"\n" + old


def _undo_sum(size: int, at: int, old: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(f"{size},{at},".encode() + old)


def _parse_undo(record: bytes) -> tuple[int, int, bytes] | None:
    """``(old size, offset, old bytes)`` of an undo record, None when it is torn."""
    if not record.startswith(_UNDO_MAGIC):
        return None
    line, nl, old = record[len(_UNDO_MAGIC):].partition(b"\n")
    try:
        size, at, check = orjson.loads(line)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return None
    if not nl or type(size) is not int or type(at) is not int or check != _undo_sum(
            size, at, old):
        return None
    return size, at, old


def recover_locked(path: pathlib.Path) -> bool:
    """Roll back an append that was interrupted (its undo record is there): the file gets
    its old bytes and size back; whether there was one. A torn record is only deleted (the
    file was not touched before the record was synced). Call it holding the cassette's
    lock (``lock.cassette_lock``)."""
    up = undo_path(path)
    try:
        record = up.read_bytes()
    except FileNotFoundError:
        return False
    undo = _parse_undo(record)
    if undo is not None:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            try:
                restore_tail(fd, *undo)
            finally:
                os.close(fd)
    up.unlink()
    sync_dir(path)
    return True


def restore_tail(fd: int, size: int, at: int, old: bytes) -> None:
    """Put ``old`` back at byte ``at`` of the open file ``fd`` and its size to ``size``."""
    os.pwrite(fd, old, at)
    os.ftruncate(fd, size)
    os.fsync(fd)


def sync_dir(path: pathlib.Path) -> None:
    """Make a rename, creation or deletion in ``path``'s directory durable (POSIX)."""
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def read_file(path: pathlib.Path,
              seen: list[tuple[int, ...]] | None = None) -> Buffer | None:
    """The file's bytes; large files are memory-mapped so a cold load reads only the pages it
    touches (reading 35 MB took 25 ms on its own, over the whole load budget). ``seen``
    receives the :func:`identity` of the file that was read, taken from its open handle: the
    very inode read, and no ``stat`` of a missing file (a block entered on an event loop
    makes no blocking call when it has no file yet).

    A save may append to the file in place (``append.py``): what was read is the file as
    it was if no append was under way before or after the read (no undo record) and the
    file's size and times did not change while it was read (an append always grows it).
    Otherwise it is read again under the cassette's lock, which no append holds, after
    rolling back an append that was killed. (A shared ``flock`` around every read did the
    same, but importing ``fcntl`` was 0.2 ms of every first open.)"""
    undo = undo_path(path)
    try:
        with open(path, "rb") as fh:  # first: no stat at all when there is no file
            if not os.path.exists(undo):
                st = os.fstat(fh.fileno())
                data = _read_open(fh, st)
                if (not os.path.exists(undo)
                        and _identity_of(os.fstat(fh.fileno())) == _identity_of(st)):
                    if seen is not None:
                        seen.append(_identity_of(st))
                    return data
                if isinstance(data, mmap.mmap):
                    data.close()
        return _read_locked(path, seen)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CassetteError(f"cannot read: {exc}", path=path) from None


def _read_locked(path: pathlib.Path, seen: list[tuple[int, ...]] | None) -> Buffer:
    from .lock import cassette_lock

    with cassette_lock(path):
        recover_locked(path)
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if seen is not None:
                seen.append(_identity_of(st))
            return _read_open(fh, st)


def _read_open(fh: Any, st: os.stat_result) -> Buffer:
    size = st.st_size
    if size < _MMAP_FROM:
        return bytes(fh.read())
    try:
        m = Mapped(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return bytes(fh.read())
    m.tail_at = max(0, size - FROZEN_TAIL)
    m.tail = m[m.tail_at :]
    return m


def load_document(data: Buffer, path: Any, *, verify: bool = True) -> dict[str, Any]:
    """Parse and validate a whole document; with ``verify``, every entry checksum and value
    hash too (:func:`verify_document`)."""
    if isinstance(data, Mapped):
        data = whole(data)
    try:
        doc = orjson.loads(memoryview(data) if isinstance(data, mmap.mmap) else data)
    except orjson.JSONDecodeError as exc:
        raise CassetteError(_bad_json(data, exc, path), path=path) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise CassetteError(_unless_conflict(data, "not a dejacache cassette (no 'entries' "
                                             "list)", path), path=path)
    version = doc.get("format")
    if version not in READABLE:
        raise CassetteError(
            f"cassette format {version!r} is not supported (this dejacache reads formats "
            f"{', '.join(map(str, READABLE))})", path=path,
        )
    if version == 4:
        _flatten(doc, path)
    if not isinstance(doc.get("values", {}), dict):
        raise CassetteError("'values' must be an object", path=path)
    doc.setdefault("values", {})
    for i, e in enumerate(doc["entries"]):
        if not isinstance(e, dict):
            raise CassetteError(f"entry #{i} is not an object", path=path)
    if verify:
        verify_document(doc, path)
    for i, e in enumerate(doc["entries"]):
        if not isinstance(e.get("key"), str):
            raise CassetteError(f"entry #{i} has no 'key' string", path=path)
    return doc


def describe(i: int, entry: dict[str, Any] | None = None) -> str:
    """How errors name an entry: its position, call name and key."""
    if not entry:
        return f"entry #{i}"
    return f"entry #{i} ({entry.get('name', '?')}, key {entry.get('key', '?')})"


def _edited(path: Any) -> str:
    return (f"the file was damaged or edited by hand. Re-record it (DEJACACHE_MODE=record), "
            f"or, if the edit was intended, accept it with: dejacache rehash {path}")


def verify_document(doc: dict[str, Any], path: Any) -> None:
    """Raise :class:`CassetteError` naming the first entry or value that fails its check."""
    # Only a file that says format 1 and has no checksum header goes unchecked: one flipped
    # digit in "format" must not switch the checks off.
    if doc.get("format") != 1 or "checksums" in doc:
        if doc.get("checksums") != CHECKSUMS:
            raise CassetteError(f"unknown checksum scheme {doc.get('checksums')!r}; "
                                + _edited(path), path=path)
        for i, e in enumerate(doc["entries"]):
            if e.get("checksum") != entry_checksum(e):
                raise CassetteError(f"{describe(i, e)} does not match its checksum: "
                                    + _edited(path), path=path)
    if doc.get("format") in (3, 4) or "xref" in doc:
        _verify_xrefs(doc, path)
    values = doc["values"]
    for h, v in values.items():
        if value_hash(v) != h:
            users = _users(doc, h)
            used = f" (used by {', '.join(users[:3])})" if users else ""
            raise CassetteError(f"shared value {REF}{h}{used} does not match its hash: "
                                + _edited(path), path=path)


def segment_names(k: int) -> tuple[str, str, str]:
    """The members holding segment ``k`` (0: the first, written as format 3 wrote the file)."""
    if k == 0:
        return "entries", "values", "xref"
    return f"entries.{k}", f"values.{k}", f"xref.{k}"


def _flatten(doc: dict[str, Any], path: Any) -> None:
    """A parsed format-4 document with its segments' entries and values joined into
    ``entries`` and ``values`` (file order); each segment's ``xref.<k>`` stays, for
    :func:`verify_document`. Segments are numbered 1, 2, ... after the first, no gaps."""
    k = 1
    while segment_names(k)[0] in doc:
        e, v, x = segment_names(k)
        more, vals = doc.pop(e), doc.pop(v, None)
        if not isinstance(more, list) or not isinstance(vals, dict) or x not in doc:
            raise CassetteError(f"segment {k} ({e!r}) is not whole: " + _edited(path),
                                path=path)
        doc["entries"].extend(more)
        if isinstance(doc.get("values"), dict):
            doc["values"].update(vals)
        k += 1
    xrefs = {f"xref.{j}" for j in range(1, k)}
    if any(m.startswith(("entries.", "values.", "xref.")) and m not in xrefs for m in doc):
        raise CassetteError("the segments are not numbered 1, 2, ...: " + _edited(path),
                            path=path)
    doc["segments"] = k


def _verify_xrefs(doc: dict[str, Any], path: Any) -> None:
    """Each segment's cross-reference against its checksum and against the entries it
    covers (segment ``k`` covers the entries after those of the segments before it)."""
    at = 0
    entries = doc["entries"]
    for k in range(doc.get("segments", 1) if doc.get("format") == 4 else 1):
        name = segment_names(k)[2]
        xref = doc.get(name)
        if not isinstance(xref, dict) or xref.get("checksum") != xref_checksum(xref):
            raise CassetteError(f"the cross-reference ({name!r}) does not match its "
                                "checksum: " + _edited(path), path=path)
        keys = xref.get("keys")
        n = len(keys) if isinstance(keys, list) else 0
        if doc.get("format") != 4 or k == doc.get("segments", 1) - 1:
            n = len(entries) - at  # the last covers the rest
        if xref != build_xref(entries[at : at + n]):
            # checksummed, yet not what the entries say: an entry was added, removed or
            # edited and the file re-hashed by something other than ``dejacache rehash``
            raise CassetteError(f"the cross-reference ({name!r}) does not describe the "
                                "entries: " + _edited(path), path=path)
        at += n


def _users(doc: dict[str, Any], h: str) -> list[str]:
    """The entries that use value ``h``, directly or through other values (one pass over
    the references, then a walk up from ``h``)."""
    up: dict[str, set[str]] = collections.defaultdict(set)  # value -> values using it
    direct: dict[str, list[int]] = collections.defaultdict(list)  # value -> entries
    for name, v in doc["values"].items():
        if type(v) is not str:
            found: set[str] = set()
            refs_in(v, found)
            for r in found:
                up[r].add(name)
    for i, e in enumerate(doc["entries"]):
        found = set()
        refs_in(e.get("request"), found)
        refs_in(e.get("response"), found)
        for r in found:
            direct[r].append(i)
    seen, todo, hits = {h}, [h], set[int]()
    while todo:
        x = todo.pop()
        hits.update(direct.get(x, ()))
        for parent in up.get(x, ()):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return [describe(i, doc["entries"][i]) for i in sorted(hits)]


# Compiled when a file fails to parse (~0.2 ms of every first block's imports otherwise).
_CONFLICT = pattern(rb"^(<{7}|={7}|>{7}|\|{7})(?: [^\n]*)?\r?$", re.MULTILINE)


def conflict_line(data: Buffer) -> tuple[int, str] | None:
    """``(line number, marker)`` of the first git merge conflict marker, if any. A line of a
    written cassette never starts with one (JSON strings hold no raw newline)."""
    m = _CONFLICT.search(data)
    if m is None:
        return None
    return bytes(data[: m.start()]).count(b"\n") + 1, m.group(1).decode()


def _unless_conflict(data: Buffer, message: str, path: Any) -> str:
    found = conflict_line(data)
    if found is None:
        return message
    line, marker = found
    return (f"has unresolved git merge conflict markers ({marker!r} at line {line}). Resolve "
            "it by re-recording the test (DEJACACHE_MODE=record), or by keeping one side "
            f"whole (git checkout --ours -- {path}, or --theirs); after merging both sides "
            f"by hand, run: dejacache rehash {path}")


def _bad_json(data: Buffer, exc: orjson.JSONDecodeError, path: Any) -> str:
    if not bytes(data[:64]).lstrip().startswith(b"{") and conflict_line(data) is None:
        # Not a cassette gone bad but another file (a test module, a YAML recording):
        # rehash would not help.
        return ("not a dejacache cassette: it is not JSON. A cassette is the .json file a "
                "test records (tests/cassettes/<module>/<test>.json); vcrpy's YAML "
                "recordings convert with dejacache import")
    where = f"line {exc.lineno} column {exc.colno}"
    # On the written layout every entry starts with the same line: count them to name one.
    n = bytes(data[: exc.pos]).count(_ENTRY_START)
    end = data.find(ENTRIES_END)
    if n and (end < 0 or exc.pos < end):
        where += f", in entry #{n - 1}"
    elif end >= 0 and exc.pos > end:
        where += ", in the values section"
    return _unless_conflict(data, f"not valid JSON ({where}: {exc.msg}): the file was "
                            "damaged or edited by hand. Re-record it (DEJACACHE_MODE=record), "
                            f"or fix the JSON and run: dejacache rehash {path}", path)


# ------------------------------------------------------------------ byte layout

# Written files have a fixed shape (:func:`dumps`), which ``reader.FileIndex`` relies on:
# entries sit 4 spaces deep, their fields at 6, value items at 4 spaces inside "values"
# (JSON strings cannot hold raw newlines, so these lines are structure).
ENTRIES_HEAD: Final = (b'{\n  "checksums": ' + orjson.dumps(CHECKSUMS)
                       + b',\n  "entries": [\n')
ENTRIES_END: Final = b'\n  ],\n  "format": '
VALUES_HEAD: Final = b'\n  "values": {'
XREF_HEAD: Final = b'\n  "xref": '
XREF_AT: Final = b',\n  "xref_at": '  # after the cross-reference: the file's last member
KEYS_HEAD: Final = b'\n    "keys": '  # the xref's members sit 4 spaces deep, their items at 6
KEYS_END: Final = b'\n    ],\n    "kinds": ['
_ENTRY_START = b"\n    {\n"
_MODEL_FIELD = b'"model": "'


def model_in(body: bytes) -> str:
    """The last ``"model"`` field of a response's JSON bytes (for prices): with sorted keys
    the top-level one comes after ``choices``, so a backward search finds it quickly."""
    at = body.rfind(_MODEL_FIELD)
    if at < 0:
        return ""
    at += len(_MODEL_FIELD)
    return body[at : body.find(b'"', at)].decode(errors="replace")


def entry_bytes(entry: dict[str, Any]) -> bytes:
    """``entry`` as :func:`dumps` lays it out inside a document (4 spaces deep)."""
    return b"    " + orjson.dumps(entry, option=_ENTRY_OPTS).replace(b"\n", _NESTED)


def xref_checksum(xref: dict[str, Any]) -> str:
    """The hash of the ``xref`` object's bytes as they sit in the file (2 spaces deep),
    without its ``checksum`` field: checked with one hash over the slice a reader holds."""
    body = orjson.dumps({k: v for k, v in xref.items() if k != "checksum"},
                        option=_ENTRY_OPTS)
    return xxhash.xxh3_128_hexdigest(body.replace(b"\n", b"\n  "))[:HASH_LEN]


def follows_of(entry: dict[str, Any] | None) -> int | None:
    """An entry's ``follows`` (None: written before the order was kept)."""
    f = entry.get("follows") if entry else None
    return f if type(f) is int else None


def build_xref(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The cross-reference of ``entries`` (checksummed, in file order): what opening a file
    and finding one entry need, so neither reads the entries."""
    xref: dict[str, Any] = {
        "follows": [follows_of(e) for e in entries],
        "keys": [str(e.get("key", "")) for e in entries],
        "kinds": [str(e.get("kind", "call")) for e in entries],
        "names": [str(e.get("name", "")) for e in entries],
        "sizes": [len(entry_bytes(e)) for e in entries],
    }
    xref["checksum"] = xref_checksum(xref)
    return xref


#: What a spliced save writes: new bytes, or a ``(start, stop)`` range of the file it read.
Part = bytes | tuple[int, int]


def identity(path: pathlib.Path, fd: int | None = None) -> tuple[int, ...] | None:
    """What tells one version of a file from another without reading it: device, inode,
    size, modification and change times (None: no file). Every dejacache write replaces the
    inode (:func:`atomic_write`); an edit in place changes the times."""
    try:
        st = os.fstat(fd) if fd is not None else os.stat(path)
    except FileNotFoundError:
        return None
    return _identity_of(st)


def _identity_of(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either its old bytes or ``data``, never a mix.

    An unwritable place is a :class:`~dejacache.CassetteError` naming the cassette and why
    (a raw ``PermissionError`` named only the temp file, at a test's teardown)."""
    atomic_write_parts(path, [data], -1)


def atomic_write_parts(path: pathlib.Path, parts: list[Part], source: int) -> None:
    """:func:`atomic_write` of the concatenation of ``parts``, a range ``(start, stop)``
    being copied from the open file ``source`` by the kernel (a spliced save copies the
    untouched bulk of a 40 MB cassette without bringing it into Python: ~30 ms where
    writing the same bytes from a memory map took ~120 ms)."""
    try:
        _atomic_write(path, parts, source)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        where = path.parent if exc.filename != str(path) else path
        raise CassetteError(f"cannot write the cassette: {why} in {where}; the calls recorded "
                            "in this block are not saved", path=path) from None


def _write_parts(fd: int, parts: list[Part], source: int) -> None:
    for part in parts:
        if isinstance(part, tuple):
            _copy_range(source, fd, *part)
        else:
            _write_all(fd, part)


def _copy_range(source: int, fd: int, start: int, stop: int) -> None:
    while start < stop:
        try:
            n = os.copy_file_range(source, fd, stop - start, start)
        except (AttributeError, OSError):  # no such call here, or not between these files
            n = _write_all(fd, _read_at(source, min(stop - start, 1 << 22), start))
        if n <= 0:
            raise OSError(f"the cassette being copied ended early at byte {start}")
        start += n


def _read_at(fd: int, n: int, at: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, at)
    os.lseek(fd, at, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, n)  # pragma: no cover


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return len(data)


def _atomic_write(path: pathlib.Path, parts: list[Part], source: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.parent / f".{path.name}.{os.urandom(8).hex()}.tmp"
        try:  # the usual file mode (umask applies), not mkstemp's 0600
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue
    try:
        try:
            _write_parts(fd, parts, source)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_dir(path)  # the rename itself made durable


# The tail of the temp files' names (after ``.<name>``): ``atomic_write``'s 16 hex digits, and
# mkstemp's 8 characters from earlier versions.
_TEMP_TAIL: Final = r"\.(?:[0-9a-f]{16}|[a-z0-9_]{8})\.tmp"


def side_file(name: str) -> str:
    """What a file named ``name`` is when a save writes it beside a cassette: ``"undo"``
    (an append's undo record, :func:`undo_path`), ``"temp"`` (a temporary file of
    :func:`atomic_write`), or ``""`` (neither)."""
    if name.startswith(".") and name.endswith(".undo"):
        return "undo"
    if name.startswith(".") and re.fullmatch(r"\..+" + _TEMP_TAIL, name):
        return "temp"
    return ""


def remove_stale_temps(path: pathlib.Path) -> int:
    """Delete the temp files of ``path`` that a writer killed mid-write left behind; returns
    how many. Call it only while holding the cassette's lock (``lock.cassette_lock``): every
    writer of a cassette holds that lock from its temp file's creation to its rename, so no
    live write owns one. Only names :func:`atomic_write` makes for this exact file match
    (``.<name>.<16 hex>.tmp``, and mkstemp's ``.<name>.<8 chars>.tmp`` from earlier
    versions): a cassette whose name extends this one's keeps its temp files."""
    import glob  # on a write only, not with the first block (import time)

    exact = re.compile(re.escape(f".{path.name}") + _TEMP_TAIL)
    removed = 0
    for p in path.parent.glob(glob.escape(f".{path.name}.") + "*.tmp"):
        if exact.fullmatch(p.name):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed += 1
    return removed


def render(entries: list[dict[str, Any]], values: dict[str, Any]) -> bytes:
    """The bytes of a document holding ``entries`` (in this order) and the part of ``values``
    they use. Occurrences are renumbered in file order per key, so FIFO replay and the field
    agree; checksums are computed last, over the final entry."""
    seen: collections.Counter[str] = collections.Counter()
    out = []
    for doc in entries:
        k = str(doc.get("key", ""))
        d = {f: v for f, v in doc.items() if f != "checksum"}
        d["occurrence"] = seen[k]
        seen[k] += 1
        d["checksum"] = entry_checksum(d)
        out.append(d)
    return with_xref_at(dumps({"checksums": CHECKSUMS, "entries": out, "format": FORMAT,
                               "values": reachable(out, values), "xref": build_xref(out)}))


def value_item(h: str, value: Any) -> bytes:
    """Shared value ``h`` as :func:`dumps` lays it out in ``values`` (its line and the lines
    of its content, without the comma that separates it from the next)."""
    return orjson.dumps({h: value}, option=_ENTRY_OPTS)[1:-2].replace(b"\n", b"\n  ")


def xref_tail(xref: dict[str, Any], at: int) -> bytes:
    """The end of a one-segment document from its ``xref`` member's value on, ``xref_at``
    included, for a document whose cross-reference starts at byte ``at`` (what
    :func:`with_xref_at` gives, made without the bytes before it)."""
    body, keys, end = _xref_body(xref)
    return body + tail_bytes([len(ENTRIES_HEAD), at, at + keys, at + end])


def _xref_body(xref: dict[str, Any]) -> tuple[bytes, int, int]:
    """``xref`` as it sits in the file (2 spaces deep), and where its ``keys`` column lies
    in those bytes (the ``[`` opening it, the newline closing it)."""
    body = orjson.dumps(xref, option=_ENTRY_OPTS).replace(b"\n", b"\n  ")
    # Searched from a rare byte: a pattern opening with a newline matched at every line
    # (10k entries: 2 ms). "keys" follows "follows" (numbers) and "checksum" (hex); a key
    # is a JSON string, which holds no raw newline, so '],\n    "kinds"' ends the column.
    keys = body.index(b'"keys": [') + len(b'"keys": ')
    end = (keys + 1 if body[keys + 1 : keys + 2] == b"]"
           else body.index(b'],\n    "kinds": [', keys) - len(b"\n    "))
    return body, keys, end


def tail_bytes(places: list[int]) -> bytes:
    """The last member, ``xref_at`` (with the comma before it and the document's end):
    for each segment, where its entries start, where its cross-reference starts, and where
    that one's ``keys`` column opens and closes."""
    return b"," + orjson.dumps({"xref_at": places}, option=_OPTS)[1:]


def segment_head(k: int) -> bytes:
    """The bytes opening segment ``k`` >= 1, after the cross-reference of segment k-1."""
    return b',\n  "' + segment_names(k)[0].encode() + b'": [\n'


def segment_bytes(k: int, entries: list[bytes], values: dict[str, Any],
                  xref: dict[str, Any], at: int) -> tuple[bytes, list[int]]:
    """Segment ``k`` >= 1 as written at byte ``at`` of a file (after the cross-reference
    of segment k-1): ``entries`` (each :func:`entry_bytes`), the shared ``values`` it adds
    and its ``xref``; and its places for ``xref_at``. The bytes :func:`dumps` would give
    for these members (tests compare)."""
    _, v, x = segment_names(k)
    head = segment_head(k)
    items = b",".join(value_item(h, values[h]) for h in sorted(values))
    vals = b"{" + items + b"\n  }" if items else b"{}"
    out = b"".join([head, b",\n".join(entries), b'\n  ],\n  "', v.encode(), b'": ', vals,
                    b',\n  "', x.encode(), b'": '])
    body, keys, end = _xref_body(xref)
    xat = at + len(out)
    return out + body, [at + len(head), xat, xat + keys, xat + end]


def with_xref_at(data: bytes) -> bytes:
    """``data`` (:func:`dumps` of a one-segment document whose last member is ``xref``)
    with the ``xref_at`` member added: the bytes :func:`dumps` gives for the document
    holding it, made without rendering the document again."""
    at = data.rindex(XREF_HEAD + b"{\n") + len(XREF_HEAD)
    keys = data.index(KEYS_HEAD + b"[", at) + len(KEYS_HEAD)
    end = keys + 1 if data[keys + 1 : keys + 2] == b"]" else data.index(b"\n    ]", keys)
    return data[: -len(b"\n}\n")] + tail_bytes([len(ENTRIES_HEAD), at, keys, end])


def rehash(data: Buffer, path: Any) -> tuple[bytes, list[str]]:
    """A hand-edited cassette made valid again: each shared value renamed by the hash of
    its content (references to it follow), then every entry checksummed. Returns the new
    bytes and the entries whose content changed (empty when only the format was upgraded).
    Keys are kept: an edited request still answers the call recorded under its key."""
    doc = load_document(data, path, verify=False)
    values = doc["values"]
    renamed: dict[str, str] = {}
    fresh: dict[str, Any] = {}
    busy: set[str] = set()

    def rename(h: str) -> str:
        # Linear: values are renamed bottom-up, never expanded (an agent's requests repeat
        # their history, so expanding them all is quadratic: 12 s for a 10k-call file).
        if h in renamed:
            return renamed[h]
        if h not in values:
            raise CassetteError(f"cannot rehash: dangling value reference {REF}{h}", path=path)
        if h in busy:
            raise CassetteError(f"cannot rehash: value {REF}{h} refers to itself", path=path)
        busy.add(h)
        v = values[h]
        v = v if type(v) is str else relink(v)  # a top-level string value is literal
        busy.discard(h)
        renamed[h] = new = value_hash(v)
        fresh[new] = v
        return new

    def relink(tree: Any) -> Any:
        t = type(tree)
        if t is str:
            if tree.startswith(REF) and not tree.startswith(BLOB_REF):
                return REF + rename(tree[len(REF):])
            return tree
        if t is dict:
            return {k: relink(v) for k, v in tree.items()}
        if t is list:
            return [relink(v) for v in tree]
        return tree

    entries, changed = [], []
    for i, e in enumerate(doc["entries"]):
        d = dict(e)
        for field in ("request", "response"):  # the only packed fields
            if field in d:
                d[field] = relink(d[field])
        entries.append(d)
        # (a value edited below an entry renamed its references, so its bytes changed too;
        # format 1 had no checksums to tell)
        if "checksum" in e and e["checksum"] != entry_checksum(d):
            changed.append(describe(i, e))
    return render(entries, fresh), changed


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
