"""Finding recorded entries of a cassette file: through its cross-reference, or a parse.

:class:`FileIndex` reads a format-3 or 4 file as dejacache writes it (see format.py) and
touches only what a call needs: opening reads the file's last member (``xref_at``: where
each segment's cross-reference is), checks each ``xref`` section where it lies (one hash
each; a file has at most ``MAX_SEGMENTS``) and copies it, once per recording however many
blocks open it, and reads the entry sizes; finding a key searches the bytes of the ``keys``
columns; a hit reads and checks one entry's slice. A 10k-entry file opened and answered its
last entry in a few ms, where scanning to it took 48-59 ms.
Anything that does not have the written shape, or fails a check, raises
:class:`CassetteError`; the store then parses the whole file, which names the damage or
accepts a layout the byte index cannot follow (:class:`DocIndex`).

:class:`DocIndex` answers the same questions from a parsed document (formats 1 and 2, files
small enough to check whole when opened, hand-edited layouts).
"""

from __future__ import annotations

import _thread
import bisect
import collections
import itertools
import mmap
import operator

import orjson
import xxhash

from ..errors import CassetteError
from . import format as fmt

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["DocIndex", "FileIndex", "Index"]

_HASH_LEN: Final = fmt.HASH_LEN
_CHECK_LINE = b'    {\n      "checksum": "'
_CHECK_END = len(_CHECK_LINE) + _HASH_LEN + 3  # the hash, then '",\n'
_CHECK_AT = len(_CHECK_LINE)  # where the hash starts
_hex128 = xxhash.xxh3_128_hexdigest
_XREF_CHECK = b'{\n    "checksum": "'
_TAIL = b"\n}\n"
_TAIL_READ: Final = fmt.FROZEN_TAIL  # the "xref_at" member (format.py)
REQUEST_LINE: Final = b'\n      "request": '  # an entry's request (6 spaces deep)
_RESPONSE_LINE = b'\n      "response": '
_TAGGED_LINE = b'\n      "tagged": '
_USAGE_LINE = b'\n      "usage": '
_VALUE_LINE = b'\n    "'
_ITEM = b"\n      "  # a column element: 6 spaces deep
# Distinct keys looked up by searching the column's bytes (~50 us each at 10k entries) before
# the whole column is parsed into a dict (~2 ms at 10k): a test that replays a few calls of a
# large cassette never pays for the dict, a full replay pays it once.
_SEARCHES_BEFORE_MAP: Final = 24
_SUMS_BEFORE_TABLE: Final = 8


class Index:
    """What the store asks of a recorded file (entries in file order, ``0 .. n-1``)."""

    n: int = 0
    lazy: bool = False

    def positions(self, key: str) -> list[int]:
        """The entries recorded under ``key``, in file order (FIFO replay order)."""
        raise NotImplementedError

    def keys(self) -> list[str]:
        raise NotImplementedError

    def key_at(self, i: int) -> str:
        """The key of entry ``i``."""
        return self.keys()[i]

    def known_name(self, i: int) -> str | None:
        """The name of entry ``i`` if the index has read it (None: read the entry)."""
        return self.names()[i]

    def names(self) -> list[str]:
        raise NotImplementedError

    def kinds(self) -> list[str]:
        raise NotImplementedError

    def follows(self) -> list[int | None]:
        raise NotImplementedError

    def entry(self, i: int, key: str) -> dict[str, Any]:
        """Entry ``i``, parsed and checked (its key must be ``key``)."""
        raise NotImplementedError

    def replay_view(self, i: int, key: str) -> tuple[dict[str, Any], bytes | None]:
        """What a hit needs from entry ``i``: its fields, and its response as JSON bytes
        (None when ``fields`` holds the response, or for an error entry)."""
        return self.entry(i, key), None

    def value(self, h: str) -> tuple[bool, Any]:
        raise NotImplementedError

    def detached(self) -> Index:
        """This index without the file's bytes or entries (keys, names and kinds stay
        readable: a closed tape reports its unused entries from them)."""
        raise NotImplementedError


def _positions_map(keys: list[str]) -> tuple[dict[str, int], dict[str, list[int]]]:
    """``(first position of each key, every position of the keys recorded more than once)``
    (a dict of lists for every key cost 3x as much to build; repeated keys are rare)."""
    first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))
    repeated: dict[str, list[int]] = {}
    if len(first) < len(keys):
        for i, k in enumerate(keys):
            if first[k] != i:
                repeated.setdefault(k, [first[k]]).append(i)
    return first, repeated


class DocIndex(Index):
    """The index of a parsed document (its entries are already checked)."""

    __slots__ = ("_docs", "_first", "_keys", "_kinds", "_names", "_repeated", "_values", "n")

    def __init__(self, doc: dict[str, Any]) -> None:
        self._docs: list[dict[str, Any]] = doc["entries"]
        self._values: dict[str, Any] = doc["values"]
        self._keys = [str(d.get("key", "")) for d in self._docs]
        self._first, self._repeated = _positions_map(self._keys)
        self.n = len(self._docs)
        self._names: list[str] | None = None
        self._kinds: list[str] | None = None

    def detached(self) -> Index:
        self.names()
        self.kinds()
        self._docs, self._values = [], {}
        return self

    def positions(self, key: str) -> list[int]:
        more = self._repeated.get(key)
        if more is not None:
            return more
        i = self._first.get(key)
        return [] if i is None else [i]

    def keys(self) -> list[str]:
        return self._keys

    def names(self) -> list[str]:
        if self._names is None:
            self._names = [str(d.get("name", "")) for d in self._docs]
        return self._names

    def kinds(self) -> list[str]:
        if self._kinds is None:
            self._kinds = [str(d.get("kind", "call")) for d in self._docs]
        return self._kinds

    def follows(self) -> list[int | None]:
        return [fmt.follows_of(d) for d in self._docs]

    def entry(self, i: int, key: str) -> dict[str, Any]:
        return self._docs[i]

    def value(self, h: str) -> tuple[bool, Any]:
        v = self._values.get(h, _MISSING)
        return (False, None) if v is _MISSING else (True, v)


_MISSING: Any = object()
_NONE: list[Any] = []  # (no column parsed yet: one list fewer per column on open)


class _Segment:
    """One segment of a file: its cross-reference's bytes (a copy, shared by every index of
    the same recording), its columns' bounds in them, where its entries start and its values
    lie in the file, and its first entry's index."""

    __slots__ = ("base", "cols", "entries_at", "sizes", "stride", "v_hi", "v_lo", "xref")

    def __init__(self, xref: fmt.Buffer, cols: dict[str, tuple[int, int]], sizes: list[int],
                 entries_at: int, values: tuple[int, int], base: int) -> None:
        self.xref = xref
        self.cols = cols
        self.sizes = sizes
        self.entries_at = entries_at
        self.v_lo, self.v_hi = values
        self.base = base
        self.stride: int | None = None  # the keys' element width, when they all have one


# Cross-references by checksum: every block that opens the same big cassette shares one
# copy (copying ~1 MB at 10k entries was ~0.6 ms of each open, fresh pages, and each closed
# tape kept its own copy for its reports). Equal checksums name the same recording, as a
# tape's seal does; the bytes in the file are checked against the checksum first.
# The cache holds at most ``_KEPT_BYTES`` itself (what indexes hold is theirs).
_KEPT: collections.OrderedDict[tuple[bytes, int], fmt.Buffer] = collections.OrderedDict()
_KEPT_BYTES: Final = 16 << 20
_KEPT_LOCK = _thread.allocate_lock()


def _kept_xref(data: fmt.Buffer, x0: int, x1: int) -> fmt.Buffer:
    """The cross-reference ``data[x0:x1]``, checked against its checksum: the copy kept
    for this recording, or a new one (then kept)."""
    _check_xref(data, x0, x1)  # where it lies: no copy to check a recording already kept
    n = len(_XREF_CHECK)
    key = (bytes(data[x0 + n : x0 + n + _HASH_LEN]), x1 - x0)
    with _KEPT_LOCK:
        kept = _KEPT.get(key)
        if kept is not None:
            _KEPT.move_to_end(key)
            return kept
    xref = _copy(data, x0, x1)
    with _KEPT_LOCK:
        _KEPT[key] = xref
        held = sum(len(v) for v in _KEPT.values())
        while held > _KEPT_BYTES:
            held -= len(_KEPT.popitem(last=False)[1])
    return xref


_POPULATE: Final = getattr(mmap, "MAP_POPULATE", 0)  # (Linux)
_POPULATE_FROM: Final = 1 << 18


def _copy(data: fmt.Buffer, x0: int, x1: int) -> fmt.Buffer:
    """``data[x0:x1]`` in memory of its own. A large copy goes to pages mapped in one call
    where the platform can (a fresh 930 KB ``bytes`` took 227 page faults, ~0.2 ms of its
    ~0.5 ms)."""
    if _POPULATE and x1 - x0 >= _POPULATE_FROM:
        try:
            out = mmap.mmap(-1, x1 - x0, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
        except OSError:
            pass
        else:
            with memoryview(data)[x0:x1] as view:
                out.write(view)
            return out
    return bytes(data[x0:x1])


class FileIndex(Index):
    """The cross-reference of a format-3 or 4 file's bytes (see the module docstring)."""

    __slots__ = ("_data", "_first", "_found", "_keys", "_parsed", "_repeated",
                 "_searches", "_segs", "_sizes", "_slices", "_starts", "end", "n", "places",
                 "version")

    lazy = True

    def __init__(self, data: fmt.Buffer, segs: list[_Segment], places: list[int],
                 end: int, version: int) -> None:
        self._data = data
        self._segs = segs
        self._sizes = segs[0].sizes if len(segs) == 1 else [
            z for sg in segs for z in sg.sizes]
        self.n = len(self._sizes)
        #: ``xref_at`` as read, where it starts (an append writes from there) and the format
        self.places, self.end, self.version = places, end, version
        self._starts: list[int] | None = None
        self._slices = 0
        self._keys: list[str] | None = None
        self._first: dict[str, int] | None = None
        self._repeated: dict[str, list[int]] = {}
        self._found: dict[str, list[int]] = {}
        self._searches = 0
        self._parsed: dict[str, list[Any]] = {}

    @classmethod
    def open(cls, data: fmt.Buffer) -> FileIndex | None:
        """The index of ``data``, or None when it is not a format-3 or 4 file of the written
        shape (the caller parses it whole). Raises ``CassetteError`` when a
        cross-reference is damaged, or is not where ``xref_at`` says."""
        head = fmt.ENTRIES_HEAD
        if data[: len(head)] != head:
            return None
        # The last member says where the cross-references and their keys are (format.py):
        # read from the end, no search over the columns (a megabyte at 10k entries).
        tail = fmt.last_bytes(data, _TAIL_READ)
        at = tail.rfind(fmt.XREF_AT)
        if at < 0 or not tail.endswith(b"]" + _TAIL):
            return None
        try:
            places = orjson.loads(tail[at + len(fmt.XREF_AT) : -len(_TAIL)])
        except orjson.JSONDecodeError:
            raise CassetteError("the cross-reference's place ('xref_at') is damaged") from None
        if not isinstance(places, list) or not all(type(p) is int for p in places):
            raise CassetteError("the cross-reference's place ('xref_at') is damaged")
        version = 3 if len(places) == 3 else 4
        if version == 3:
            places = [len(head), *places]
        if not places or len(places) % 4 or places[0] != len(head):
            raise CassetteError("the cross-reference's place ('xref_at') is damaged")
        end = len(data) - len(tail) + at  # where the last cross-reference ends
        segs: list[_Segment] = []
        count = len(places) // 4
        for k in range(count):
            stop = end if k == count - 1 else places[4 * k + 4] - len(fmt.segment_head(k + 1))
            if k < count - 1 and data[stop : places[4 * k + 4]] != fmt.segment_head(k + 1):
                raise CassetteError(f"segment {k + 1} is not where 'xref_at' says")
            segs.append(_open_segment(data, k, places[4 * k : 4 * k + 4], stop, version,
                                      sum(len(sg.sizes) for sg in segs)))
        return cls(data, segs, places, end, version)

    @property
    def segments(self) -> int:
        return len(self._segs)

    @property
    def seal(self) -> bytes:
        """The cross-references' checksums: equal for two reads of the same recording."""
        n = len(_XREF_CHECK)
        return b"".join(bytes(sg.xref[n : n + _HASH_LEN]) for sg in self._segs)

    def detached(self) -> Index:
        self._data = b""
        self._starts = None
        return self

    # ------------------------------------------------------------ keys

    def positions(self, key: str) -> list[int]:
        if self._first is not None:
            more = self._repeated.get(key)
            if more is not None:
                return more
            i = self._first.get(key)
            return [] if i is None else [i]
        found = self._found.get(key)
        if found is not None:
            return found
        self._searches += 1
        if self._searches > _SEARCHES_BEFORE_MAP:
            self._build_map()
            return self.positions(key)
        segs = self._segs
        found = (_search(segs[0], key) if len(segs) == 1
                 else [i for sg in segs for i in _search(sg, key)])
        self._found[key] = found
        return found

    def _build_map(self) -> None:
        self._first, self._repeated = _positions_map(self.keys())
        self._found.clear()

    def keys(self) -> list[str]:
        if self._keys is None:
            self._keys = self._list("keys")
        return self._keys

    def key_at(self, i: int) -> str:
        if self._keys is not None or not 0 <= i < self.n:
            return self.keys()[i]
        sg = self._segment_of(i)
        stride = sg.stride if sg.stride is not None else _stride(sg)
        if not stride:
            return self.keys()[i]
        at = sg.cols["keys"][0] + (i - sg.base) * stride
        raw = sg.xref[at : at + stride - 1]  # newline, indent, the quoted key
        if raw[: len(_ITEM) + 1] != _ITEM + b'"':
            raise CassetteError("the cross-reference's keys are not one per line")
        try:
            key = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise CassetteError("the cross-reference's keys are not valid JSON") from None
        if type(key) is not str:
            raise CassetteError("the cross-reference's keys are not valid JSON")
        return key

    def _list(self, name: str) -> list[Any]:
        """One column, parsed once (its types: the column is checksummed with the rest).
        Callers get the kept list: they must not change it."""
        out = self._parsed.get(name)
        if out is None:
            out = _NONE
            for sg in self._segs:
                bounds = sg.cols.get(name) or _column(sg.xref, 0, len(sg.xref), name)
                part = _parse(sg.xref, bounds)
                if len(part) != len(sg.sizes):
                    raise CassetteError(f"the cross-reference's {name} do not match its sizes")
                out = part if out is _NONE else out + part
            self._parsed[name] = out
        return out

    def names(self) -> list[str]:
        return self._list("names")

    def known_name(self, i: int) -> str | None:
        names = self._parsed.get("names")
        return None if names is None else str(names[i])

    def kinds(self) -> list[str]:
        return self._list("kinds")

    def follows(self) -> list[int | None]:
        return self._list("follows")

    # ------------------------------------------------------------ entries

    def _segment_of(self, i: int) -> _Segment:
        segs = self._segs
        if len(segs) == 1:
            return segs[0]
        return segs[bisect.bisect_right([sg.base for sg in segs], i) - 1]

    def _start(self, i: int) -> int:
        """Where entry ``i`` starts: after its segment's head and the entries before it in
        the segment, each followed by ``",\\n"``. A few lookups sum the sizes (C loops,
        ~50 us at 10k); after that a table of every start pays for itself (a Python loop
        over 10k sizes was 2 ms, the largest part of opening a file and serving one entry)."""
        starts = self._starts
        if starts is not None:
            return starts[i]
        self._slices += 1
        if self._slices <= _SUMS_BEFORE_TABLE:
            sg = self._segment_of(i)
            j = i - sg.base
            return sg.entries_at + sum(itertools.islice(sg.sizes, j)) + 2 * j
        return self.starts()[i]

    def starts(self) -> list[int]:
        """Where every entry starts, and at ``[n]`` two bytes past the last one's end."""
        if self._starts is None:
            out: list[int] = []
            for sg in self._segs:
                if out:
                    out.pop()
                out += itertools.accumulate(map(operator.add, sg.sizes, itertools.repeat(2)),
                                            initial=sg.entries_at)
            self._starts = out
        return self._starts

    def checksums(self, n: int) -> list[bytes]:
        """The checksums the first ``n`` entries carry (their first line), unverified: equal
        lists say two files hold the same first ``n`` recordings, whatever else changed."""
        starts, data = self.starts(), self._data
        at, end = len(_CHECK_LINE), _CHECK_END - 3
        return [bytes(data[starts[i] + at : starts[i] + end]) for i in range(min(n, self.n))]

    def checked_slice(self, i: int) -> bytes:
        """Entry ``i``'s bytes, checked against its checksum (not parsed)."""
        if not 0 <= i < self.n:
            raise CassetteError("entry is not in the cross-reference")
        starts = self._starts  # (with the table, _start's one read written out)
        start = starts[i] if starts is not None else self._start(i)
        raw = self._data[start : start + self._sizes[i]]
        # The checksum line comes first (sorted keys): hash the slice around it ('    {\n',
        # then what follows the line), no parsing. Joined and hashed in one call: the
        # streaming hasher's four calls were ~40 of a hit's opcodes, the copy is a memcpy.
        if raw.startswith(_CHECK_LINE) and raw.startswith(b'",\n', _CHECK_END - 3):
            got = _hex128(raw[:6] + raw[_CHECK_END:])
            if got[:_HASH_LEN].encode() == raw[_CHECK_AT : _CHECK_END - 3]:
                return raw
        # The caller falls back to parsing the whole file, which names what is wrong.
        raise CassetteError("entry does not match its checksum")

    @staticmethod
    def _checked(raw: bytes, key: str) -> dict[str, Any]:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise CassetteError("entry is not valid JSON") from None
        if not isinstance(doc, dict) or doc.get("key") != key:
            raise CassetteError("entry does not match the index")
        return doc

    def entry(self, i: int, key: str) -> dict[str, Any]:
        return self._checked(self.checked_slice(i), key)

    def replay_view(self, i: int, key: str) -> tuple[dict[str, Any], bytes | None]:
        """The request is not parsed at all and the response is not parsed here: the codec
        parses it once when the engine decodes it (at 20 KB this halved the replay cost)."""
        raw = self.checked_slice(i)
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
            return self._checked(raw, key), None
        req = raw.find(REQUEST_LINE, 0, resp)
        head = raw[:req] if req >= 0 else raw[:resp]
        if tail < 0:
            body = raw[resp + len(_RESPONSE_LINE) : raw.rfind(b"\n    }")]
            fields = head.rstrip(b",") + b"\n    }"
        else:
            body = raw[resp + len(_RESPONSE_LINE) : tail].rstrip(b",")
            fields = head + raw[tail + 1 :]
        return self._checked(fields, key), body

    def value(self, h: str) -> tuple[bool, Any]:
        """``(found, value)`` for one hash, by binary search over each segment's sorted
        section (a value is written in one segment: an append adds only those the file
        lacks)."""
        for sg in self._segs:
            found, at = _value_slot(self._data, sg, h)
            if found:
                return True, self._value_at(sg, h, at)
        return False, None

    def _value_at(self, sg: _Segment, h: str, at: int) -> Any:
        data = self._data
        name_end = at + len(_VALUE_LINE) + len(h)
        nxt = data.find(_VALUE_LINE, name_end, sg.v_hi)
        stop = nxt if nxt >= 0 else sg.v_hi
        raw = data[name_end + 3 : stop].rstrip(b",")  # skip '": '
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise CassetteError(f"value {fmt.REF}{h} is not valid JSON") from None
        if fmt.value_hash(value) != h:  # content-addressed: the name is the checksum
            raise CassetteError(f"value {fmt.REF}{h} does not match its hash")
        return value

    def value_slot(self, h: str) -> tuple[bool, int]:
        """``(found, at)`` in the first segment's values (see :func:`_value_slot`)."""
        return _value_slot(self._data, self._segs[0], h)

    @property
    def values_bounds(self) -> tuple[int, int]:
        """Where the items of the first segment's ``values`` lie: after its ``{``, up to
        the newline before its ``}`` (equal when the section is empty)."""
        sg = self._segs[0]
        return sg.v_lo, sg.v_hi

    def segment_values(self, k: int) -> dict[str, Any]:
        """The shared values segment ``k`` holds, parsed and checked."""
        sg = self._segs[k]
        raw = b"{" + bytes(self._data[sg.v_lo : sg.v_hi]) + b"}"
        try:
            out = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise CassetteError(f"the values of segment {k} are not valid JSON") from None
        for h, v in out.items():
            if fmt.value_hash(v) != h:
                raise CassetteError(f"value {fmt.REF}{h} does not match its hash")
        return dict(out)

    def first_segment(self) -> FileIndex:
        """The index of this file's first segment alone (a compaction splices the others'
        entries into it)."""
        sg = self._segs[0]
        return FileIndex(self._data, [sg], self.places[:4], self.end, self.version)

    @property
    def sizes(self) -> list[int]:
        """Every entry's byte size, in file order (the checksummed columns)."""
        return self._sizes

    def entry_range(self, i: int) -> tuple[int, int]:
        """``(start, stop)`` of entry ``i``'s bytes (a save copies them as they are)."""
        if not 0 <= i < self.n:
            raise CassetteError("entry is not in the cross-reference")
        start = self._start(i)
        return start, start + self._sizes[i]


def _open_segment(data: fmt.Buffer, k: int, place: list[int], stop: int, version: int,
                  base: int) -> _Segment:
    """Segment ``k``, checked by its cross-reference (one hash) and the bytes around it;
    ``place`` is its part of ``xref_at``, ``stop`` where its cross-reference ends."""
    a, x, k_lo, k_hi = place
    _, v_name, x_name = fmt.segment_names(k)
    x_head = fmt.XREF_HEAD if k == 0 else b'\n  "' + x_name.encode() + b'": '
    if not (len(x_head) <= a < x < k_lo < k_hi < stop) or data[x - len(x_head) : x] != x_head:
        raise CassetteError("the cross-reference is not where 'xref_at' says")
    xref = _kept_xref(data, x, stop)
    # the keys column, checked by the bytes around it: the only "keys" member of the
    # (checksummed) cross-reference, up to the only "kinds" that follows it
    k_lo, k_hi = k_lo - x, k_hi - x
    if (xref[k_lo - len(fmt.KEYS_HEAD) : k_lo + 1] != fmt.KEYS_HEAD + b"["
            or xref[k_hi : k_hi + len(fmt.KEYS_END)] != fmt.KEYS_END):
        raise CassetteError("the cross-reference's keys are not where 'xref_at' says")
    cols = {"keys": (k_lo + 1, k_hi), "sizes": _column(xref, k_hi, len(xref), "sizes")}
    sizes = _parse(xref, cols["sizes"])
    # where the entries end, by the sizes: the bytes there must be the written ones
    # (a size that is not a positive int makes its entry fail its checksum when read)
    try:
        end = a + sum(sizes) + 2 * (len(sizes) - 1)
    except TypeError:
        end = None
    if not sizes or type(end) is not int:
        raise CassetteError("the cross-reference lists no entry sizes")
    mid = (fmt.ENTRIES_END + b"%d," % version + fmt.VALUES_HEAD if k == 0
           else b'\n  ],\n  "' + v_name.encode() + b'": {')
    if data[end : end + len(mid)] != mid:
        raise CassetteError("the entries do not end where the cross-reference says")
    v_lo = end + len(mid)
    v_hi = (x - len(x_head) - len(b"\n  },")
            if data[v_lo : v_lo + 2] != b"}," else v_lo)
    if v_hi < v_lo or (data[v_hi : v_hi + 4] != b"\n  }" and v_hi != v_lo):
        raise CassetteError("no values section")
    return _Segment(xref, cols, sizes, a, (v_lo, v_hi), base)


def _search(sg: _Segment, key: str) -> list[int]:
    """The entries of segment ``sg`` recorded under ``key`` (file indexes), by a search
    of its keys column's bytes."""
    buf = sg.xref
    lo, hi = sg.cols["keys"]
    pat = _ITEM + orjson.dumps(key)
    stride = sg.stride if sg.stride is not None else _stride(sg)
    out: list[int] = []
    at = buf.find(pat, lo, hi)
    counted, line = lo, sg.base
    while at >= 0:
        after = buf[at + len(pat) : at + len(pat) + 1]
        if after in (b",", b"\n"):  # the whole element, not a key it starts
            if stride:
                out.append(sg.base + (at - lo) // stride)
            else:
                line += bytes(buf[counted:at]).count(b"\n")
                counted = at
                out.append(line)
        at = buf.find(pat, at + 1, hi)
    return out


def _stride(sg: _Segment) -> int:
    """The width of every element of ``sg``'s keys column, or 0 when they differ. Each
    element starts with a newline, which no JSON string holds: when the column is ``n``
    elements of one width with a newline at each of their starts, an element's place is
    its offset over that width (counting newlines up to a late key cost 0.1 ms at 10k)."""
    buf, n = sg.xref, len(sg.sizes)
    lo, hi = sg.cols["keys"]
    second = buf.find(b"\n", lo + 1, hi)
    width = second - lo if n > 1 and second > lo else hi - lo + 1
    if not (width > 0 and hi - lo == n * width - 1 and buf[lo:hi:width] == b"\n" * n):
        width = 0
    sg.stride = width
    return width


def _value_slot(data: fmt.Buffer, sg: _Segment, h: str) -> tuple[bool, int]:
    """``(found, at)``: whether value ``h`` is in segment ``sg``, and where its line starts
    (the newline opening it), or where a value of that name would be inserted (the line
    of the first greater name, or the section's end). A binary search: no parsing."""
    lo, hi = sg.v_lo, sg.v_hi
    want = h.encode()
    slot = sg.v_hi
    while lo < hi:
        mid = (lo + hi) // 2
        at = data.find(_VALUE_LINE, mid, sg.v_hi)
        if at < 0:
            hi = mid
            continue
        name_start = at + len(_VALUE_LINE)
        name_end = data.find(b'"', name_start)
        name = data[name_start:name_end]
        if name == want:
            return True, at
        if name < want:
            lo = name_end
        else:
            slot = min(slot, at)
            hi = mid
    return False, slot


def _check_xref(buf: fmt.Buffer, x0: int, x1: int) -> None:
    """The ``xref`` object's bytes, ``buf[x0:x1]``, against its checksum line (one hash,
    no parsing)."""
    n = len(_XREF_CHECK)
    if (buf[x0 : x0 + n] == _XREF_CHECK
            and buf[x0 + n + _HASH_LEN : x0 + n + _HASH_LEN + 3] == b'",\n'):
        h = xxhash.xxh3_128()
        h.update(b"{\n")
        with memoryview(buf)[x0 + n + _HASH_LEN + 3 : x1] as view:
            h.update(view)
        if h.hexdigest()[:_HASH_LEN].encode() == buf[x0 + n : x0 + n + _HASH_LEN]:
            return
    raise CassetteError("the cross-reference ('xref') does not match its checksum")


def _column(buf: fmt.Buffer, start: int, stop: int, name: str) -> tuple[int, int]:
    """``(lo, hi)`` in ``buf``: the newline before the first element and the one closing
    the list of the member ``name`` of the cross-reference ``buf[start:stop]``."""
    # Searched without its leading newline and indent, which match at every line start
    # and made the search 3x slower; the indent is checked after.
    head = b'"' + name.encode() + b'": ['
    at = (buf.rfind(head, start, stop) if name == "sizes"  # (sizes come last)
          else buf.find(head, start, stop))
    while at >= 0 and buf[at - 5 : at] != b"\n    ":
        at = buf.find(head, at + 1, stop)
    if at < 0:
        raise CassetteError(f"the cross-reference has no {name}")
    lo = at + len(head)
    if buf[lo : lo + 1] == b"]":
        return lo, lo
    # The closing bracket is the first "]" after a newline and 4 spaces (an element's own
    # "]" is inside a string, which holds no raw newline). Searching for that newline and
    # indent matched at every line start: 0.3 ms of a 10k-entry open for the sizes alone.
    hi = buf.find(b"]", lo, stop)
    while hi >= 0 and buf[hi - 5 : hi] != b"\n    ":
        hi = buf.find(b"]", hi + 1, stop)
    if hi < 0:
        raise CassetteError(f"the cross-reference's {name} have no end")
    return lo, hi - 5


def _parse(buf: fmt.Buffer, bounds: tuple[int, int]) -> list[Any]:
    lo, hi = bounds
    # the column with its own brackets, parsed in place (no copy: at 10k entries each copy
    # is fresh memory, and its page faults cost more than the parse); the view is let go
    # at once (a buffer with views held open cannot be closed)
    try:
        with memoryview(buf)[lo - 1 : hi + len(b"\n    ]") if hi > lo else hi + 1] as text:
            out = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise CassetteError("the cross-reference is not valid JSON") from None
    if not isinstance(out, list):
        raise CassetteError("the cross-reference is not valid JSON")
    return out
