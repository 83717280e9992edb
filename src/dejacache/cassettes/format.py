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
across segments. A parse (``document.load_document``) joins them and checks each segment's
cross-reference against its entries. Past ``MAX_SEGMENTS`` the next save writes the file
whole again, as one segment: the same bytes ``render.render`` gives.

An agent's n-th request repeats the messages before it, so storing requests whole grows the
file quadratically. Every string or list of numbers of at least ``MIN_SHARED`` bytes, and every
dict of at least ``MIN_SHARED_DICT`` bytes, is stored once in ``values`` under a hash of its
content (``pack.py``) and replaced where it occurs by the string ``"@ref:<hash>"``; a
request then reads as its list of message references in order. Responses are packed more
lightly (only strings of ``MIN_SHARED_RESPONSE`` bytes or more), so a typical replay reads one
entry and no shared value.
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
the checksum line (``render.entry_checksum``). The hit path checks that with one hash over the
slice it reads anyway; a full parse recomputes it from the parsed entry. Anything that does not
match is a :class:`CassetteError` naming the file and the entry, never a value. A deliberate
edit is accepted by ``dejacache rehash PATH`` (``rehash.py``).

The cross-reference (format 3: finding entry 9,999 of a format-2 file meant scanning
the 9,998 before it, 48-59 ms). ``xref`` lists every entry's key, name, kind, ``follows`` and
byte size in file order (per segment in format 4; columns: one element per line, so
re-recording one call changes a few lines of it). Entry ``i`` starts after its segment's
head and the sizes of the entries before it there.
``xref`` carries its own checksum (``render.xref_checksum``, over its bytes like an entry's), and
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

This module is what reading a file needs: the layout's constants and reading the bytes (with
rolling back an append a writer left half done). A replay hit of a large file loads nothing
else of the format; the rest lives where it is used: packing values (``pack.py``), the bytes a
save writes (``render.py``), replacing a file (``atomic.py``), a whole parse and its checks
(``document.py``) and ``dejacache rehash`` (``rehash.py``). Together they were 45 KB of this
module's 69 KB of bytecode, loaded by every first block (~0.25 ms of its imports).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable

import orjson
import xxhash

from .._lazy import served
from ..errors import CassetteError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import pathlib
    from typing import Any, Final

    from .document import load_document
    from .render import render

__all__ = [
    "BLOB",
    "BLOB_REF",
    "BLOB_REF_BYTES",
    "CHECKSUMS",
    "EAGER_CHECK_UNDER",
    "FORMAT",
    "HASH_LEN",
    "READABLE",
    "REF",
    "Buffer",
    "Mapped",
    "follows_of",
    "identity",
    "last_bytes",
    "load_document",  # defined in document.py, served by __getattr__
    "model_in",
    "read_file",
    "recover_locked",
    "refers_blobs",
    "render",  # defined in render.py, served by __getattr__
    "segment_head",
    "segment_names",
    "strings_in",
    "sync_dir",
    "undo_file",
    "undo_path",
    "unpack",
    "value_hash",
    "whole",
]

# The documented way to edit a recording by hand (docs/living-with-recordings.md) reads
# ``format.load_document`` and ``format.render``: kept where they are used, served from here.
__getattr__ = served(__name__, {"load_document": "dejacache.cassettes.document",
                                "render": "dejacache.cassettes.render"})

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
#: cassette (``blobs.py``). Never collected as a value reference (``pack.refs_in``).
BLOB_REF: Final = REF + "blob:"
BLOB_REF_BYTES: Final = BLOB_REF.encode()
#: What :func:`unpack` hands a resolver for such a reference: ``BLOB + hash``.
BLOB: Final = BLOB_REF[len(REF):]
HASH_LEN = 24  # 96 bits of xxh3-128: collisions are out of reach for any cassette size
_CANON = orjson.OPT_SORT_KEYS


def value_hash(node: Any) -> str:
    """The name a shared value is stored under: a hash of its canonical JSON."""
    return xxhash.xxh3_128_hexdigest(orjson.dumps(node, option=_CANON))[:HASH_LEN]


def strings_in(tree: Any, pick: Callable[[str], str | None], out: set[str]) -> None:
    """Add to ``out`` what ``pick`` makes of each string in ``tree`` (None: nothing): the
    value hashes an entry refers to (``pack.refs_in``), the blobs (``blobs.blobs_in``)."""
    t = type(tree)
    if t is str:
        found = pick(tree)
        if found is not None:
            out.add(found)
    elif t is dict:
        for v in tree.values():
            strings_in(v, pick, out)
    elif t is list:
        for v in tree:
            strings_in(v, pick, out)


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


def undo_file(path: str | os.PathLike[str]) -> str:
    """Where an append keeps what it overwrites until it is durable (``append.py``)."""
    head, name = os.path.split(os.fspath(path))
    return os.path.join(head, f".{name}.undo")


def undo_path(path: pathlib.Path) -> pathlib.Path:
    """:func:`undo_file` as a Path."""
    return type(path)(undo_file(path))


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


def read_file(path: str | os.PathLike[str],
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
    undo = undo_file(path)  # (a string: a replay hit makes no Path, nor imports pathlib)
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


def _read_locked(where: str | os.PathLike[str], seen: list[tuple[int, ...]] | None
                 ) -> Buffer:
    from .._paths import as_path
    from .lock import cassette_lock  # (with pathlib: this read is rare)

    path = as_path(os.fspath(where))

    # (a reader takes the lock only when an append overlapped its read: nothing is lost)
    with cassette_lock(path, unsaved="the cassette was not read: an append overlapped the "
                       "read, and it is read again only under the lock"):
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


def segment_names(k: int) -> tuple[str, str, str]:
    """The members holding segment ``k`` (0: the first, written as format 3 wrote the file)."""
    if k == 0:
        return "entries", "values", "xref"
    return f"entries.{k}", f"values.{k}", f"xref.{k}"


# ------------------------------------------------------------------ byte layout

# Written files have a fixed shape (``render.dumps``), which ``reader.FileIndex`` relies on:
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
_MODEL_FIELD = b'"model": "'


def model_in(body: bytes) -> str:
    """The last ``"model"`` field of a response's JSON bytes (for prices): with sorted keys
    the top-level one comes after ``choices``, so a backward search finds it quickly."""
    at = body.rfind(_MODEL_FIELD)
    if at < 0:
        return ""
    at += len(_MODEL_FIELD)
    return body[at : body.find(b'"', at)].decode(errors="replace")


def follows_of(entry: dict[str, Any] | None) -> int | None:
    """An entry's ``follows`` (None: written before the order was kept)."""
    f = entry.get("follows") if entry else None
    return f if type(f) is int else None


def identity(path: str | os.PathLike[str], fd: int | None = None) -> tuple[int, ...] | None:
    """What tells one version of a file from another without reading it: device, inode,
    size, modification and change times (None: no file). Every dejacache write replaces the
    inode (``atomic.atomic_write``); an edit in place changes the times."""
    try:
        st = os.fstat(fd) if fd is not None else os.stat(path)
    except FileNotFoundError:
        return None
    return _identity_of(st)


def _identity_of(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def segment_head(k: int) -> bytes:
    """The bytes opening segment ``k`` >= 1, after the cross-reference of segment k-1."""
    return b',\n  "' + segment_names(k)[0].encode() + b'": [\n'

