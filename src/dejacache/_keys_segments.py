"""Keying large requests by parts, and telling ``None`` from NaN without a walk.

Two jobs for :mod:`dejacache.keys`, both built on one fact: the canonical form of plain JSON
data is a function of its orjson bytes, except that orjson writes NaN and the infinities as
``null``, exactly like ``None``. So

* a **long list** (a conversation's messages) whose first ``n`` elements were once written,
  walked and found plain needs no walk for them when the same bytes come back as the prefix
  of a longer list (:class:`ListMemo`): only the places that held ``None`` are looked at
  again, to rule out a NaN there, and the new messages are walked. A request that resends
  its history then costs one ``orjson.dumps`` of the list, one digest of its bytes, one
  ``orjson.dumps`` per new message and Python work for the new messages only (the
  walk was 140 of 179 µs at 1,000 messages, and grew with the whole history
  every turn). One ``orjson.dumps`` per message instead would cost ~0.6 µs each in call
  overhead alone, 3x the floor at 366 messages;
* a **whole request** whose bytes hold ``null`` is told apart from its NaN twin by
  :class:`NoneCheck`: the ``None`` positions found once for those bytes, probed again on each
  call (a few dict lookups) instead of walking everything (the walk tripled the cost of a
  200 KB hit).

Nothing here trusts object identity: an input mutated after keying has new bytes, or the
same bytes with a NaN where a ``None`` was, which the probes see.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence

import orjson
import xxhash

from ._secrets import url_may_hold_secret

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Ctx", "ListMemo", "NoneCheck", "has_lists", "none_paths", "segmented"]

Step = str | int
Path = tuple[Step, ...]

_MISS: Any = object()
# Lists this long are written by parts whatever they hold. (Not on the hit path: there one
# orjson.dumps of the whole and the None probes cost 1.06-1.33x the floor at 200 KB, by parts
# 1.36-1.64x, measured interleaved.)
SEG_MIN = 8
_SEG_DEPTH = 3  # dict levels searched for such lists (bound args -> request -> messages)
TAIL = 32  # at most this many new elements per list are looked for before walking it all
HEAD = 64  # bytes of a list that name the runs it may start with
MEMO_MAX = 16_384  # entries per memo; cleared when full (bounded memory, no LRU upkeep)
_digest = xxhash.xxh3_128_digest
_DELIMS = (ord(","), ord("]"))


def none_paths(obj: Any, simple: frozenset[type]) -> list[Path] | None:
    """Where ``obj`` holds ``None``, or None when it holds anything but exact JSON types
    (and ``simple`` leaves) or a non-finite float: then its bytes alone do not tell its
    canonical form, and nothing is remembered. ``obj`` is acyclic (orjson wrote it)."""
    if obj is None:
        return [()]
    out: list[Path] = []
    stack: list[tuple[Path, Any]] = [((), obj)]
    while stack:
        path, node = stack.pop()
        t = type(node)
        items: Iterable[tuple[Any, Any]]
        if t is dict:
            items = node.items()
        elif t is list or t is tuple:
            items = enumerate(node)
        else:
            return None
        for k, v in items:
            tv = type(v)
            if tv is str:
                continue
            if v is None:
                out.append((*path, k))
            elif tv is dict or tv is list or tv is tuple:
                stack.append(((*path, k), v))
            elif tv is float:
                if v - v != 0.0:
                    return None
            elif tv not in simple:
                return None
    return out


def _at(node: Any, path: Path) -> Any:
    """The value at ``path`` through exact dicts, lists and tuples only (a subclass could
    answer lookups differently from what orjson wrote), or ``_MISS``."""
    for step in path:
        t = type(node)
        if t is dict:
            node = node.get(step, _MISS)
        elif (t is list or t is tuple) and type(step) is int and step < len(node):
            node = node[step]
        else:
            return _MISS
    return node


class Run:
    """The first ``n`` elements of some list, written and found plain: ``nulls`` says where
    the elements added by this run (over ``parent``) held ``None``, as ``(index, key)`` for
    ``messages[i].key`` (the common case) or ``(index, paths)``. ``length``: the bytes of
    those ``n`` elements with the opening ``[`` (the list's bytes without ``]``). ``clean``:
    whether the store's secret scrubbing leaves those bytes as they are (None: not asked
    yet; see :func:`scrub_free`). ``url``: whether those bytes may hold a URL credential
    (``_secrets.url_may_hold_secret``: the keys' URL masking has nothing to do otherwise);
    ``url_clean``: whether that masking leaves them as they are (None: not asked yet)."""

    __slots__ = ("any_null", "clean", "length", "n", "nulls", "parent", "url", "url_clean")

    def __init__(self, n: int, parent: Run | None, nulls: tuple[tuple[int, Any], ...],
                 length: int = 0, url: bool = True) -> None:
        self.n = n
        self.parent = parent
        self.nulls = nulls
        self.length = length
        self.url = url
        self.clean: bool | None = None
        self.url_clean: bool | None = None
        self.any_null: bool = bool(nulls) or (parent is not None and parent.any_null)

    def probe(self, seq: Any) -> bool:
        """Whether ``seq`` (with this run's bytes as its prefix) holds ``None`` wherever
        the elements that wrote those bytes did: then no NaN hides in its ``null``."""
        if (type(seq) is not list and type(seq) is not tuple) or len(seq) < self.n:
            return False
        run: Run | None = self
        while run is not None:
            for i, val in run.nulls:
                m = seq[i]
                if type(val) is str:
                    if type(m) is not dict or m.get(val, _MISS) is not None:
                        return False
                elif not all(_at(m, p) is None for p in val):
                    return False
            run = run.parent
        return True


class ListMemo:
    """Runs by the digest of their bytes (the list's bytes without the closing ``]``).

    One per set of volatile names (plain means: nothing to drop or mask under them).
    ``heads`` (the first ``HEAD`` bytes of each run) tells a list never seen before without
    writing any of its elements again; ``lengths`` lets a lookup hash only at offsets some
    run ends at. Thread-safe as far as it needs to be: a lost or doubled entry costs one
    walk.
    """

    __slots__ = ("heads", "lengths", "runs")

    def __init__(self) -> None:
        self.runs: dict[bytes, Run] = {}
        self.lengths: set[int] = set()
        self.heads: set[bytes] = set()

    def put(self, data: bytes | memoryview, length: int, run: Run) -> None:
        """Remember ``run`` as the first ``length`` bytes of ``data``."""
        if len(self.runs) >= MEMO_MAX:
            self.runs.clear()
            self.lengths.clear()
            self.heads.clear()
        self.runs[_digest(memoryview(data)[:length])] = run
        self.lengths.add(length)
        self.heads.add(bytes(data[:HEAD]))  # never a view: it would keep all of data alive


_FLAT_MAX = 16  # probes of a short run are written out as paths: one loop, no calls


def _flatten(pre: Path, run: Run, out: list[Path]) -> bool:
    """Append a short run's probes to ``out`` as paths; False (nothing appended) if long."""
    probes: list[Path] = []
    r: Run | None = run
    while r is not None:
        for i, val in r.nulls:
            if type(val) is str:
                probes.append((*pre, i, val))
            else:
                probes.extend((*pre, i, *p) for p in val)
            if len(probes) > _FLAT_MAX:
                return False
        r = r.parent
    out.extend(probes)
    return True


class NoneCheck:
    """The ``None`` positions of one byte string, to be probed on data with those bytes.

    Every ``null`` in the bytes is one of these positions; when each holds ``None`` in the
    data at hand, no NaN or infinity can hide in it. Long lists keep their :class:`Run`,
    whose probes are one small loop per run.
    """

    __slots__ = ("lists", "nones", "paths", "probe", "seen")

    def __init__(self, paths: Iterable[Path], lists: Iterable[tuple[Path, Run]] = ()) -> None:
        flat = list(paths)
        runs: list[tuple[Path, Run]] = []
        for pre, run in lists:
            if run.any_null and not _flatten(pre, run, flat):
                runs.append((pre, run))
        self.paths = tuple(flat)
        self.lists = tuple(runs)
        self.nones = bool(self.paths or self.lists)
        # All the probes as one callable, built when ``ok`` is asked a second time; a hit
        # calls it directly, without the ``ok`` frame. Not the first time: a call's key is
        # probed once on its first sight (lookup, then key), so each turn of a growing
        # conversation, never seen again, compiled a probe it used once (~150 µs a call, 40%
        # of a cassette's replay of 1,000 distinct 2 KB calls).
        self.probe: Callable[[Any], bool] | None = None
        self.seen = False

    def ok(self, data: Any) -> bool:
        probe = self.probe
        if probe is None:
            if not self.seen:
                self.seen = True
                return _lists_ok(self.lists, functools.partial(_slow_ok, self.paths), data)
            probe = (_compile(self.paths) if len(self.paths) <= _COMPILE_MAX
                     else functools.partial(_slow_ok, self.paths))
            if self.lists:
                probe = functools.partial(_lists_ok, self.lists, probe)
            self.probe = probe
        return probe(data)


def _lists_ok(lists: tuple[tuple[Path, Run], ...], paths: Callable[[Any], bool],
              data: Any) -> bool:
    for pre, run in lists:
        if not run.probe(_at(data, pre)):
            return False
    return paths(data)


_COMPILE_MAX = 64  # more probes than this are looped over (bounded code per memo entry)


def _compile(paths: tuple[Path, ...]) -> Callable[[Any], bool]:
    """The probes of ``paths`` as one straight-line function: each step checks the exact
    container type (a subclass could answer a lookup differently from what orjson wrote)
    and looks up one key or index; a missing one raises ``KeyError`` or ``IndexError``
    (exact dicts have no ``__missing__``), which answers False. Paths sharing a prefix
    (``request.messages``) walk it once. The loop over paths and steps it replaces cost
    0.5 µs of a 2 KB hit; this form, over the ``.get``-per-step one it replaced, cut the
    2 KB probe from ~2,500 to ~1,700 instructions. Dict keys are passed in as closure
    constants, never spelled in the source; indexes are ``int`` (checked), written as
    literals."""
    trie: dict[Step, Any] = {}
    for path in paths:
        if any(type(step) is not str and type(step) is not int for step in path):
            return functools.partial(_slow_ok, paths)
        node = trie
        for step in path:
            node = node.setdefault(step, {})
        node[_END] = {}
    names: list[str] = []
    body: list[str] = []
    _emit(trie, 0, names, body)
    params = ", ".join(f"K{i}" for i in range(len(names)))
    lines = [f"def make({params}):", "    def probe(n0):", "        try:",
             *(body or ["            pass"]),  # (no paths: nothing to probe)
             "        except (KeyError, IndexError):", "            return False",
             "        return True", "    return probe"]
    scope: dict[str, Any] = {}
    exec(compile("\n".join(lines), "<dejacache none probe>", "exec"), scope)
    return scope["make"](*names)  # type: ignore[no-any-return]


_END: Any = object()  # a trie node's mark: a path ends here (its value must be None)


def _emit(trie: dict[Step, Any], depth: int, names: list[str], out: list[str]) -> None:
    """The checks of ``trie`` under ``n{depth}`` (see :func:`_compile`)."""
    here, below, pad = f"n{depth}", f"n{depth + 1}", " " * 12
    if _END in trie:
        out.append(f"{pad}if {here} is not None:")
        out.append(f"{pad}    return False")
    steps = [step for step in trie if step is not _END]
    if any(type(step) is str for step in steps):
        out.append(f"{pad}if type({here}) is not dict:")
        out.append(f"{pad}    return False")
    if any(type(step) is int for step in steps):
        out.append(f"{pad}if type({here}) is not list and type({here}) is not tuple:")
        out.append(f"{pad}    return False")
    for step in steps:
        if isinstance(step, str):
            out.append(f"{pad}{below} = {here}[K{len(names)}]")
            names.append(step)
        else:  # an exact int (see _compile)
            out.append(f"{pad}{below} = {here}[{step:d}]")
        _emit(trie[step], depth + 1, names, out)


def _slow_ok(paths: tuple[Path, ...], data: Any) -> bool:
    return all(_at(data, path) is None for path in paths)


class Ctx:
    """One write by parts: names filter, memo, and what was found on the way."""

    __slots__ = ("clean", "dump", "lists", "memo", "names", "nones", "paths", "pending",
                 "simple", "spans", "url")

    def __init__(self, names: Any, memo: ListMemo, clean: Callable[[Any, Any], int],
                 dump: Callable[[Any], bytes], simple: frozenset[type]) -> None:
        self.names = names
        self.memo = memo
        self.clean = clean
        self.dump = dump
        self.simple = simple
        self.nones = False
        self.paths: list[Path] = []
        self.lists: list[tuple[Path, Run]] = []
        # Lists to write by parts, found by ``_parts``: (the dict holding it, its key, it,
        # its path); and, once written out of a whole, where each starts in it, with its run.
        self.pending: list[tuple[dict[str, Any], str, list[Any], Path]] = []
        self.spans: list[tuple[int, Run]] | None = None
        # Whether the written form may hold a URL credential: known False only when it was
        # cut out of a whole whose skeleton and every list's run may hold none.
        self.url = False

    def check(self) -> NoneCheck:
        return NoneCheck(self.paths, self.lists)


def _by_parts(v: list[Any]) -> bool:
    # Lists of objects (messages, tool schemas, content parts) and long lists of anything.
    return len(v) >= SEG_MIN or (bool(v) and type(v[0]) is dict)


def has_lists(d: Any, depth: int = 0) -> bool:
    """Whether a dict holds, within a few dict levels, a list worth writing by parts."""
    for v in d.values():
        tv = type(v)
        if tv is list:
            if _by_parts(v):
                return True
        elif tv is dict and depth < _SEG_DEPTH and has_lists(v, depth + 1):
            return True
    return False


def _new(ctx: Ctx, elem: Any) -> Any:
    """An element not seen before: walk it. True (no None), the one key holding None, all
    its None paths, or None (not plain: the caller writes the whole the general way)."""
    te = type(elem)
    if te is dict:  # a message: its own None keys found in the same pass as the check
        names = ctx.names
        if not names.plain.issuperset(elem) and not names.clean(elem):
            return None
        keys: list[Any] = []
        nested: list[Any] = []
        for k, v in elem.items():
            tv = type(v)
            if tv is str:
                continue
            if v is None:
                keys.append(k)
            elif tv is dict or tv is list or tv is tuple:
                r = ctx.clean(v, names)
                if not r:
                    return None
                if r != 1:
                    nested.append(k)
            elif tv is float:
                if v - v != 0.0:
                    return None
            elif tv not in ctx.simple:
                return None
        if not nested:
            if not keys:
                return True
            if len(keys) == 1:
                return keys[0]
        paths: list[Path] = [(k,) for k in keys]
        for k in nested:
            ps = none_paths(elem[k], ctx.simple)
            if ps is None:
                return None
            paths.extend((k, *p) for p in ps)
        return tuple(paths)
    verdict = ctx.clean(elem if te is list or te is tuple else [elem], ctx.names)
    if not verdict:
        return None
    if verdict == 1:  # keys._PLAIN: no None anywhere
        return True
    ps = none_paths(elem, ctx.simple)
    return tuple(ps) if ps else None


def _find(ctx: Ctx, v: list[Any], data: bytes | memoryview) -> Run | None:
    """The longest remembered run that ``data`` (``v``'s bytes) starts with, looking back at
    most ``TAIL`` elements; its probes are not run yet."""
    memo = ctx.memo
    # bytes, never a view: hashing a memoryview hashes the whole object under it first
    # (siphash of a fresh 200 KB request: 0.4x the key's floor)
    if bytes(data[:HEAD]) not in memo.heads:
        return None  # no run starts like this list (runs shorter than HEAD are walked)
    lengths = memo.lengths
    mv = memoryview(data)
    end = len(data) - 1  # the bytes of all of v, without "]"
    m = len(v)
    stop = max(1, m - TAIL)
    while True:
        if end > 0 and end in lengths and data[end] in _DELIMS:
            run = memo.runs.get(_digest(mv[:end]))
            if run is not None and run.n == m:
                return run
        if m <= stop:
            return None
        m -= 1
        end -= len(ctx.dump(v[m])) + 1  # the run before the last element


def _list(ctx: Ctx, v: list[Any], prefix: Path, data: bytes | memoryview) -> Run | None:
    """The run of all of ``v``, whose bytes are ``data``: the longest remembered one its
    bytes start with, extended by walking what follows it; None when some element is not
    plain."""
    n = len(v)
    run = _find(ctx, v, data)
    if run is not None and not run.probe(v):
        run = None  # a NaN (or an object) where None was: walk it all
    start = run.n if run is not None else 0
    if start < n:
        nulls: list[tuple[int, Any]] = []
        for i in range(start, n):
            val = _new(ctx, v[i])
            if val is None:
                return None
            if val is not True:
                nulls.append((i, val))
        # The new elements only (a search of 200 KB for ``://`` costs 180 µs): a URL lies
        # in one string, so it cannot straddle the comma before them.
        new = bytes(data[run.length + 1 if run is not None else 1:len(data) - 1])
        url = (run is not None and run.url) or url_may_hold_secret(new)
        run = Run(n, run, tuple(nulls), len(data) - 1, url)
        ctx.memo.put(data, len(data) - 1, run)
    assert run is not None
    ctx.url = ctx.url or run.url
    if run.any_null:
        ctx.nones = True
        ctx.lists.append((prefix, run))
    return run


def _parts(ctx: Ctx, d: dict[str, Any], prefix: Path, depth: int) -> dict[str, Any] | None:
    names = ctx.names
    if not names.plain.issuperset(d) and not names.clean(d):
        return None
    parts: dict[str, Any] = {}
    for k, v in d.items():
        tv = type(v)
        if tv is list and _by_parts(v):
            parts[k] = v  # written by ``segmented``, once its bytes are known
            ctx.pending.append((parts, k, v, (*prefix, k)))
        elif tv is dict and depth < _SEG_DEPTH:
            sub = _parts(ctx, v, (*prefix, k), depth + 1)
            if sub is None:
                return None
            parts[k] = sub
        else:  # a scalar or a short list: walked, and written with the whole
            verdict = ctx.clean([v], names)
            if not verdict:
                return None
            if verdict != 1:
                ps = none_paths(v, ctx.simple)
                if ps is None:
                    return None
                ctx.nones = True
                ctx.paths.extend((*prefix, k, *p) for p in ps)
            parts[k] = v
    return parts


def segmented(ctx: Ctx, d: dict[str, Any], whole: bytes | None = None) -> bytes | None:
    """The canonical bytes of plain ``d`` written by parts, or None when some part needs a
    rewrite (the caller then writes the whole the general way). Same bytes as one
    ``orjson.dumps`` of ``d``: orjson sorts the keys, long lists go in as fragments; when the
    caller has that ``whole`` already, it is the answer and nothing is written twice: the
    lists' bytes are cut out of it (:func:`_cut`), and ``ctx.spans`` says where each is."""
    parts = _parts(ctx, d, (), 0)
    if parts is None:
        return None
    pending = ctx.pending
    cut = _cut(ctx, parts, whole) if whole is not None else None
    datas: Sequence[bytes | memoryview] = (
        cut[0] if cut is not None else [ctx.dump(v) for _, _, v, _ in pending])
    runs: list[Run] = []
    for (holder, k, v, path), data in zip(pending, datas, strict=True):
        run = _list(ctx, v, path, data)
        if run is None:
            return None
        runs.append(run)
        if whole is None:
            assert isinstance(data, bytes)
            holder[k] = orjson.Fragment(data)
    if cut is not None:
        ctx.spans = list(zip(cut[1], runs, strict=True))
    return whole if whole is not None else ctx.dump(parts)


_MARKS = 32  # placeholders: control bytes, which orjson never writes raw


def _cut(ctx: Ctx, parts: dict[str, Any], whole: bytes
         ) -> tuple[list[memoryview], list[int]] | None:
    """The bytes of each pending list, cut out of ``whole`` (``ctx.dump`` of the data
    ``parts`` was made of) instead of written again: the longest list is what a turn of a
    conversation resends, and writing it a second time cost as much as the key's floor.
    The other lists are written (tool schemas: small), each list is replaced by a one-byte
    placeholder, and the skeleton so written must match ``whole`` byte for byte around the
    gaps, or None (the caller writes every list). With the bytes (views of ``whole``: a
    copy of 200 KB costs 20 µs), where each starts."""
    pending = ctx.pending
    count = len(pending)
    if not count or count > _MARKS:
        return None
    big = max(range(count), key=lambda i: len(pending[i][2]))
    written: list[bytes] = [b""] * count
    for i, (holder, k, v, _) in enumerate(pending):
        if i != big:
            written[i] = ctx.dump(v)
        holder[k] = orjson.Fragment(bytes((i,)))
    skel = ctx.dump(parts)
    gap = len(whole) - len(skel) + count - sum(len(b) for b in written)
    if gap <= 0:
        return None
    order = sorted(range(count), key=lambda i: skel.index(bytes((i,))))
    spans: list[tuple[int, int]] = [(0, 0)] * count
    pos = spos = 0  # in whole, in skel
    # startswith compares in place (a memoryview comparison unpacks byte by byte: 1.3 ms
    # for 200 KB)
    for i in order:
        mark = skel.index(bytes((i,)), spos)
        size = gap if i == big else len(written[i])
        end = pos + mark - spos
        if not whole.startswith(skel[spos:mark], pos) or (
                i != big and not whole.startswith(written[i], end)):
            return None
        spans[i] = (end, size)
        pos, spos = end + size, mark + 1
    if len(whole) - pos != len(skel) - spos or not whole.startswith(skel[spos:], pos):
        return None
    ctx.url = ctx.url or url_may_hold_secret(skel)
    mv = memoryview(whole)
    return [mv[off:off + size] for off, size in spans], [off for off, _ in spans]


def scrub_free(form: bytes, spans: list[tuple[int, Run]],
               invariant: Callable[[bytes], bool], attr: str = "clean") -> bool:
    """Whether a rewrite leaves ``form`` (canonical JSON, the lists of ``spans`` at their
    offsets) as it is: the store's secret scrubbing (``attr`` ``"clean"``), or the keys' URL
    masking (``"url_clean"``). ``invariant`` answers that for one canonical JSON value. Each
    run's own bytes are asked once, ever (the run's ``attr``): a turn of a growing
    conversation asks only its new messages and the skeleton around the lists (a URL in the
    history made every turn mask 200 KB and scrub the whole request again: 17 ms a miss,
    95x its floor, at 1,000 messages)."""
    skeleton: list[bytes] = []
    pos = 0
    for off, run in sorted(spans, key=lambda s: s[0]):
        if not _run_clean(form, off, run, invariant, attr):
            return False
        skeleton += (form[pos:off], b"[]")
        pos = off + run.length + 1  # past the closing "]"
    end = len(form) - 1 if form[-1:] == b" " else len(form)  # without the None mark
    skeleton.append(form[pos:end])
    return invariant(b"".join(skeleton))


def _run_clean(form: bytes, off: int, run: Run, invariant: Callable[[bytes], bool],
               attr: str) -> bool:
    """The run's ``attr``, asking ``invariant`` about the bytes of every run on its chain not
    asked before (oldest first); ``run``'s list starts at ``off`` in ``form``. A run is
    clean when its own elements and every earlier one are."""
    todo: list[Run] = []
    r: Run | None = run
    while r is not None and getattr(r, attr) is None:
        todo.append(r)
        r = r.parent
    ok = r is None or getattr(r, attr) is True
    for r in reversed(todo):
        if ok:
            start = off + (r.parent.length + 1 if r.parent is not None else 1)
            ok = invariant(b"[" + form[start:off + r.length] + b"]")
        setattr(r, attr, ok)
    return ok
