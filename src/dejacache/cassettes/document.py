"""A cassette parsed whole and checked: every entry's checksum, every value's hash, each
segment's cross-reference against the entries it describes, and errors that name the
damaged entry, a merge conflict, or a file that is not a cassette at all.

Apart from format.py because a replay hit of a large file never parses it whole (it reads
one entry through the byte index, ``reader.py``): files under ``EAGER_CHECK_UNDER`` are
checked whole when a block opens them, larger ones on a replay miss, a save that is not
appended or spliced, and by the CLI.
"""

from __future__ import annotations

import collections
import mmap
import re

import orjson

from .._lazy import pattern
from ..errors import CassetteError
from .format import (
    CHECKSUMS,
    ENTRIES_END,
    READABLE,
    REF,
    Buffer,
    Mapped,
    segment_names,
    value_hash,
    whole,
)
from .render import build_xref, entry_checksum, xref_checksum

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["conflict_line", "describe", "load_document", "verify_document"]

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
    from .pack import refs_in  # (an error report: opening a small file never packs)

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


_ENTRY_START = b"\n    {\n"
