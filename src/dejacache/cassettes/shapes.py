"""Which forms of keys a recording holds, read from the member names of its recorded
requests: an HTTP call whose key the file lacks tries the forms older recordings used only
when the file holds requests of their shape (``http/keying.py``).

Apart from tape.py and reader.py because only a block that asks past its first few calls
reads them (``Cassette.request_shapes``), once per recording: a replay hit never loads
this module.
"""

from __future__ import annotations

from . import format as fmt
from .reader import REQUEST_LINE, FileIndex, Index
from .tape import Tape

__all__ = ["parsed_members", "request_members", "request_shapes"]

# Request shapes of the recordings read, by seal (the cross-references' checksums: equal
# seals name the same recording): a proxy opening the same cassette for each test reads them
# once. A few bytes per recording; cleared when full.
_SHAPES: dict[bytes, frozenset[frozenset[str] | None]] = {}
_SHAPES_KEPT = 256
_MEMBER = b'\n        "'  # a member of an entry's request (8 spaces deep)
_REQUEST_END = b"\n      }"  # where an entry's request object ends


def request_shapes(tape: Tape) -> frozenset[frozenset[str] | None]:
    """The distinct member-name sets of ``tape``'s recorded requests
    (:func:`request_members`; None among them: a request that could not be read so), read
    once per recording: blocks that open the same file again share them (by the file's
    seal). Called under the cassette's lock."""
    ix = tape.index()
    if ix is None:
        return frozenset()
    seal = ix.seal if isinstance(ix, FileIndex) else b""
    shapes = _SHAPES.get(seal) if seal else None
    if shapes is None:
        shapes = tape.from_index(
            lambda ix: frozenset(request_members(ix, i, k) for i, k in enumerate(ix.keys())))
        if seal:
            if len(_SHAPES) >= _SHAPES_KEPT:
                _SHAPES.clear()
            _SHAPES[seal] = shapes
    return shapes


def request_members(ix: Index, i: int, key: str) -> frozenset[str] | None:
    """The names of entry ``i``'s request's members (empty: no request, or not an object;
    None: an object the index cannot read so). A byte index reads them from the entry's
    bytes, unparsed (:func:`_members_in`); anything else is parsed."""
    if isinstance(ix, FileIndex):
        names = _members_in(ix.checked_slice(i))
        if names is not None:
            return names
    return parsed_members(ix, i, key)


def parsed_members(ix: Index, i: int, key: str) -> frozenset[str] | None:
    """:func:`request_members` from the parsed entry (and its shared value)."""
    request = ix.entry(i, key).get("request")
    if type(request) is str and request.startswith(fmt.REF):
        found, request = ix.value(request[len(fmt.REF):])
        if not found:
            return None
    return frozenset(request) if type(request) is dict else frozenset()


def _members_in(raw: bytes) -> frozenset[str] | None:
    """The request's members in an entry's bytes: the lines 8 spaces deep between its
    ``{`` and its ``}`` 6 deep (a 1k-entry file in ~1 ms; parsing each entry was several
    times that). None: not laid out as written, or a name with an escape (parse it)."""
    at = raw.find(REQUEST_LINE)
    if at < 0:
        return frozenset()
    at += len(REQUEST_LINE)
    if raw[at : at + 2] != b"{\n":  # not laid out as written: parsed
        return None
    end = raw.find(_REQUEST_END, at)
    if end < 0:
        return None
    names = []
    at = raw.find(_MEMBER, at, end)
    while at >= 0:
        start = at + len(_MEMBER)
        stop = raw.find(b'"', start, end)
        if stop < 0 or raw.find(b"\\", start, stop) >= 0:  # an escape: parse it
            return None
        names.append(raw[start:stop].decode("utf-8", "replace"))
        at = raw.find(_MEMBER, stop, end)
    return frozenset(names)
